"""Low-bit GPU kernel model (devices/lowbit_kernels.py), its calibration and the MoE engine
profile: hand rooflines, closed forms, directions, and the data's provenance."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import yaml

from hetsim.devices.catalogue import shipped_devices
from hetsim.devices.lowbit_calibration import DATA_FILE, fit_all, load_points
from hetsim.devices.lowbit_kernels import (
    KERNEL_FILE,
    LowbitKernel,
    device_time_s,
    kernel_time_s,
    lowbit_kernel,
)
from hetsim.workloads.models.moe import load_moe_models
from hetsim.workloads.moe.engines import expert_table_s, load_engine

ROOT = Path(__file__).resolve().parents[1]


def test_hand_roofline_at_batch_one() -> None:
    # a pure memory roofline (no floor, full bandwidth, no per-weight work): one Mixtral
    # gate projection, 14336 x 4096 at 3 bits per weight, on a 1008 GB/s RTX 4090:
    # packed weights and scales 14336 * 4096 * 3 / 8 = 22,020,096 bytes, plus the fp16
    # input and output 2 * (4096 + 14336) = 36,864 bytes -> 22,056,960 / 1.008e12 s
    ideal = LowbitKernel("ideal", bandwidth_fraction=1.0, floor_s=0.0, ops_per_weight=0.0)
    t = float(kernel_time_s(ideal, 1008e9, 82.6e12, 14336, 4096, 1, 3.0))
    assert t == pytest.approx(22_056_960 / 1.008e12, rel=1e-12)
    assert float(kernel_time_s(ideal, 1008e9, 82.6e12, 14336, 4096, 0, 3.0)) == 0.0


@pytest.mark.parametrize("family", ["gemv", "marlin", "triton-gemm"])
def test_fitted_families_are_never_faster_than_the_roofline(family: str) -> None:
    gpu = shipped_devices()["rtx-4090"]
    k = lowbit_kernel(family)
    for bits in (2.0, 3.0, 4.125):
        roof = (14336 * 4096 * bits / 8) / gpu.memory_bandwidth_Bps
        t = float(device_time_s(k, gpu, 14336, 4096, 1, bits))
        assert t > roof
        # and within the fraction and floor the family carries (memory-bound GEMV)
        if family == "gemv":
            assert t < roof / k.bandwidth_fraction * 1.25 + k.floor_s


def test_batch_directions() -> None:
    gpu = shipped_devices()["rtx-4090"]
    n = np.arange(1, 17)
    marlin = device_time_s(lowbit_kernel("marlin"), gpu, 14336, 4096, n, 4.125)
    gemv = device_time_s(lowbit_kernel("gemv"), gpu, 14336, 4096, n, 4.125)
    triton = device_time_s(lowbit_kernel("triton-gemm"), gpu, 14336, 4096, n, 4.125)
    # Marlin: tensor-core work, flat over small batches (its README: near-ideal to 16-32)
    assert marlin[-1] / marlin[0] < 1.15
    # a CUDA-core GEMV repeats its dequantise-and-FMA per token: grows with the batch
    assert np.all(np.diff(gemv) > 0) and gemv[-1] / gemv[0] > 2.0
    # rows padded to 16: the same time for 1..16 tokens
    assert np.allclose(triton, triton[0], rtol=1e-3)  # (the activations grow a little)


def test_shipped_yaml_is_the_fit_of_the_shipped_points() -> None:
    fits = fit_all(load_points())
    shipped = yaml.safe_load(KERNEL_FILE.read_text(encoding="utf-8"))["families"]
    for fam, f in fits.items():
        for key in ("bandwidth_fraction", "floor_s", "ops_per_weight"):
            assert shipped[fam][key] == pytest.approx(getattr(f.kernel, key), rel=2e-3), (fam, key)


def test_points_name_sources_and_none_is_a_validation_row() -> None:
    rows = list(csv.DictReader(DATA_FILE.open(encoding="utf-8")))
    assert len(rows) >= 20
    cal = ROOT.parent / "shared" / "calibration" / "endtoend.csv"
    end_sources = set()
    if cal.exists():
        end_sources = {
            r["source"].split(" (")[0] for r in csv.DictReader(cal.open(encoding="utf-8"))
        }
    for r in rows:
        assert r["source"].strip() and r["source_key"].strip(), r["id"]
        assert "exllamav2 README" not in r["source"]  # V41/V42 of the validation set
        assert r["source"].split(" (")[0] not in end_sources, r["id"]


def test_bad_overrides_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"gpu_kernels\.nope"):
        lowbit_kernel("gemv", {"nope": 1})
    with pytest.raises(ValueError, match="gpu_kernel: unknown family"):
        lowbit_kernel("hqq")
    with pytest.raises(ValueError, match="bandwidth_fraction"):
        lowbit_kernel("gemv", {"bandwidth_fraction": 1.5})
    with pytest.raises(ValueError, match=r"engine_overrides\.torch_op_s"):
        load_engine("hqq-offloading", {"torch_op_s": -1})
    with pytest.raises(ValueError, match=r"engine_overrides\.layer_torch_ops"):
        load_engine("hqq-offloading", {"layer_torch_ops": 2.5})


def test_expert_time_is_max_of_host_and_gpu_plus_syncs() -> None:
    gpu = shipped_devices()["rtx-4090"]
    model = load_moe_models()["mixtral-8x7b"]
    k = lowbit_kernel("triton-gemm")
    e = load_engine("hqq-offloading", {"torch_op_s": 1e-5, "launch_s": 4e-5, "sync_s": 7e-6})
    table = expert_table_s(k, e, gpu, model, 2, 3.0)
    h, f = model.hidden, model.expert_ffn
    kern = 2 * float(device_time_s(k, gpu, f, h, 1, 3.0)) + float(
        device_time_s(k, gpu, h, f, 1, 3.0)
    )
    small = e.expert_torch_ops * gpu.launch_overhead_s
    host = e.expert_torch_ops * 1e-5 + e.expert_launches * 4e-5  # 26 x 10 us + 3 x 40 us
    assert host == pytest.approx(380e-6)
    assert table[0] == 0.0
    assert table[1] == pytest.approx(max(kern + small, host) + 3 * 7e-6)
    free = load_engine("hqq-offloading", {"torch_op_s": 0, "launch_s": 0, "sync_s": 0})
    assert expert_table_s(k, free, gpu, model, 1, 3.0)[1] == pytest.approx(kern + small)
