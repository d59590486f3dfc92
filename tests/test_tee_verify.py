"""Verifiable inference (Slalom, workloads/tee/verify*): per-layer enclave, GPU-side and
paging costs worked out by hand on a one-layer toy, and the directions of effect of the
shipped scenario (verified faster than in-enclave; precomputed checks faster than
per-batch ones)."""

from __future__ import annotations

import numpy as np
import pytest

import hetsim
from hetsim.devices.enclave import EnclaveSpec
from hetsim.devices.spec import DeviceSpec, EfficiencyCurve
from hetsim.workloads.tee.models import LayerTable
from hetsim.workloads.tee.verify_costs import (
    VerifyCostConfig,
    VerifyMode,
    enclave_forward_s,
    verify_tee_s,
)

CPU = DeviceSpec(name="toy", display_name="toy", vendor="x", kind="cpu",
                 peak_flops={"fp32": 1e12}, memory_bytes=1 << 40, memory_bandwidth_Bps=100e9,
                 compute_efficiency={"default": EfficiencyCurve(1.0)},
                 memory_efficiency=EfficiencyCurve(1.0), cores=4)  # fmt: skip
# no metadata traffic (a name without counters, 0 metadata bytes): bytes move as counted
ENCLAVE = EnclaveSpec("toy", 64, 0.0, 3e9, 8e-6, True)
# one linear layer: 1,000 inputs, 2,000 outputs (and 2,000 ReLU elements), 1e6 weights
TABLE = LayerTable("toy", ("fc",), ("linear",), np.array([4e9]), np.array([1000.0]),
                   np.array([2000.0]), np.array([1e6]), np.array([2000.0]))  # fmt: skip


def _cfg(verify: VerifyMode = "preproc", epc: float = 1e12) -> VerifyCostConfig:
    # one enclave thread of four: 1/4 of the FLOP/s; 25 GB/s of the 100 GB/s
    return VerifyCostConfig(2, 1, verify, 1, 25e9, epc, 4.0, 2.0, 8.0, "fp32", "fp32", ENCLAVE)


def test_in_enclave_forward_is_its_cpu_roofline() -> None:
    # 4e9 FLOPs at 0.25e12 FLOP/s = 16 ms; bytes 4 (1e6 + 3000) + 8 x 2000 = 4.028 MB at
    # 25 GB/s = 0.161 ms: compute-bound
    assert enclave_forward_s(TABLE, CPU, _cfg())[0] == pytest.approx(16e-3)


def test_freivalds_check_with_and_without_precomputed_secrets() -> None:
    # preproc, batch 2: 2 FLOPs x 2 x 3000 elements = 12,000 FLOPs (48 ns); bytes
    # 4 x 6000 + 8 x 2 x 2000 = 56,000 (2.24 us): memory-bound; + 2 crossings of 8 us
    assert verify_tee_s(TABLE, CPU, _cfg())[0] == pytest.approx(2.24e-6 + 16e-6)
    # online: + r^T W per batch, 2e6 FLOPs (8 us) and 4e6 bytes read (160 us)
    assert verify_tee_s(TABLE, CPU, _cfg("online"))[0] == pytest.approx(162.24e-6 + 16e-6)


def test_epc_paging_of_the_batch_working_set() -> None:
    # working set 4 B x 2 images x 3000 elements = 24,000 B; EPC 10,000 B: 14,000 B paged
    # out and back in at 3 GB/s = 9.33 us on top of the unpaged check
    paged = verify_tee_s(TABLE, CPU, _cfg(epc=10_000))[0]
    assert paged - verify_tee_s(TABLE, CPU, _cfg())[0] == pytest.approx(2 * 14_000 / 3e9)


def test_slalom_directions_of_effect() -> None:
    over = {"workload.batches": 1}
    pre = hetsim.run("scenarios/tee_verify.yaml", overrides=over).summary_row
    online = hetsim.run(
        "scenarios/tee_verify.yaml", overrides={**over, "workload.verify": "online"}
    ).summary_row
    assert pre["images_per_s"] > pre["enclave_images_per_s"]
    assert pre["images_per_s"] > online["images_per_s"]
    # the enclave is the bottleneck of the verified pipeline (GPU and PCIe are faster)
    assert pre["tee_s"] > pre["gpu_s"] + pre["copy_s"]
    assert pre["batch_s"] == pytest.approx(pre["tee_s"] + pre["gpu_s"] + pre["copy_s"])
