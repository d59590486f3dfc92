"""Per-layer costs of verifiable DNN inference: a CPU enclave outsources every linear
layer to an untrusted GPU and checks each result with Freivalds' algorithm (Slalom,
Tramer & Boneh, ICLR'19, arXiv 1806.03287; runs as in ftramer/slalom ``run_all.sh``).

Values are field elements (Slalom works in the prime field p = 2^24 - 3, so an element
fits a float32: ``element_bytes`` 4). Per linear layer with ``n_in`` input and ``n_out``
output elements per image and ``w`` weights, over a batch of ``b`` images:

- **in the enclave, baseline** (the whole forward pass inside, batch ``baseline_batch``):
  the layer's FLOPs at the enclave's CPU roofline (``tee_cores`` threads, each drawing
  ``core_bandwidth_Bps``), bytes = weights + inputs + outputs + the nonlinear pass, every
  byte carrying the enclave's cacheline metadata; the working set (all weights plus the
  largest layer's activations) beyond the EPC is paged out and back in once per pass at
  the enclave's crypto rate;
- **verified** (batch ``batch``): the GPU computes the layer (its roofline in
  ``gpu_dtype``); the outputs cross PCIe to the host and the next layer's inputs back;
  the enclave checks ``r^T y == (r^T W) x`` with ``r^T W`` precomputed offline
  (``verify: preproc``: ``freivalds_flops_per_element`` FLOPs per input and per output
  element, one multiply-add each) or computed per batch (``verify: online``: + 2 w FLOPs
  and a read of the weights), applies the nonlinearity itself, and pays two enclave
  crossings (the preset's ``setup_latency_s``); its working set (the largest layer's
  activations of the batch, plus that layer's weights when online) beyond the EPC is
  paged as above.

The stages of one layer run one after another (reconstruction: Slalom's TensorFlow graph
calls the enclave between GPU layers; nothing overlaps). Reconstructions are named
parameters of the workload and swept in ``scenarios/tee_verify-robustness.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from hetsim.devices.enclave import EnclaveSpec
from hetsim.devices.roofline import op_times_s
from hetsim.devices.spec import DeviceSpec
from hetsim.workloads.tee.models import LayerTable
from hetsim.workloads.tee.nna_costs import tee_scale
from hetsim.workloads.tee.secure import stream_traffic

VerifyMode = Literal["preproc", "online"]


@dataclass(frozen=True)
class VerifyCostConfig:
    """The parameters of the verifiable-inference cost model (the workload fills them)."""

    batch: int
    baseline_batch: int
    verify: VerifyMode
    tee_cores: int | None
    core_bandwidth_Bps: float
    epc_bytes: float
    element_bytes: float
    freivalds_flops_per_element: float
    nonlinear_bytes_per_element: float
    tee_dtype: str
    gpu_dtype: str
    enclave: EnclaveSpec


def _linear(t: LayerTable) -> None:
    if any(k != "linear" for k in t.kinds):
        raise ValueError(f"model {t.name}: verifiable inference needs linear ops only")


def _protected(cfg: VerifyCostConfig, nbytes: np.ndarray, region: float) -> np.ndarray:
    """Bytes moved with the enclave's cacheline metadata (read-heavy streams)."""
    ratio = stream_traffic(cfg.enclave, 1 << 20, region_bytes=region).total_bytes / (1 << 20)
    return nbytes * ratio


def paging_s(working_set_bytes: float, cfg: VerifyCostConfig) -> float:
    """EPC paging of one pass: the working set beyond the EPC is encrypted out and
    decrypted back in once, at the enclave's crypto rate."""
    over = max(0.0, working_set_bytes - cfg.epc_bytes)
    return 2.0 * over / cfg.enclave.crypto_throughput_Bps


def _enclave_s(
    cpu: DeviceSpec, flops: np.ndarray, nbytes: np.ndarray, ws: float, cfg: VerifyCostConfig
) -> np.ndarray:
    """Enclave seconds per layer: the CPU roofline of the protected traffic on the
    enclave's threads, plus the pass's EPC paging spread over layers by traffic."""
    c_share, m_share = tee_scale(cpu, cfg.tee_cores, cfg.core_bandwidth_Bps)
    traffic = _protected(cfg, nbytes, ws)
    t = op_times_s(cpu, flops / c_share, traffic / m_share, cfg.tee_dtype)
    total = float(traffic.sum())
    share = traffic / total if total > 0 else np.full(len(traffic), 1.0 / len(traffic))
    return np.asarray(t + paging_s(ws, cfg) * share, dtype=float)


def baseline_working_set_bytes(t: LayerTable, cfg: VerifyCostConfig) -> float:
    """All weights plus the largest layer's inputs and outputs of the baseline batch."""
    e, b = cfg.element_bytes, cfg.baseline_batch
    return e * float(t.weight_elems.sum()) + e * b * float((t.in_elems + t.out_elems).max())


def enclave_forward_s(t: LayerTable, cpu: DeviceSpec, cfg: VerifyCostConfig) -> np.ndarray:
    """Seconds per layer of one baseline batch computed entirely inside the enclave."""
    _linear(t)
    e, b = cfg.element_bytes, cfg.baseline_batch
    flops = t.fwd_flops * b
    nbytes = e * (t.weight_elems + b * (t.in_elems + t.out_elems)) + (
        cfg.nonlinear_bytes_per_element * b * t.nonlinear_elems
    )
    return _enclave_s(cpu, flops, nbytes, baseline_working_set_bytes(t, cfg), cfg)


def verify_working_set_bytes(t: LayerTable, cfg: VerifyCostConfig) -> float:
    """The largest layer's activations of the batch (plus its weights when online)."""
    e, b = cfg.element_bytes, cfg.batch
    live = b * (t.in_elems + t.out_elems)
    if cfg.verify == "online":
        live = live + t.weight_elems
    return e * float(live.max())


def verify_tee_s(t: LayerTable, cpu: DeviceSpec, cfg: VerifyCostConfig) -> np.ndarray:
    """Enclave seconds per layer of one verified batch: Freivalds' check, the
    nonlinearity, EPC paging and two enclave crossings."""
    _linear(t)
    e, b = cfg.element_bytes, cfg.batch
    elems = b * (t.in_elems + t.out_elems)
    flops = cfg.freivalds_flops_per_element * elems
    nbytes = e * elems + cfg.nonlinear_bytes_per_element * b * t.nonlinear_elems
    if cfg.verify == "online":  # r^T W per layer and batch: read W, one MAC per weight
        flops = flops + 2.0 * t.weight_elems
        nbytes = nbytes + e * t.weight_elems
    crossings = 2 * cfg.enclave.setup_latency_s
    return _enclave_s(cpu, flops, nbytes, verify_working_set_bytes(t, cfg), cfg) + crossings


def gpu_linear_s(t: LayerTable, gpu: DeviceSpec, cfg: VerifyCostConfig) -> np.ndarray:
    """GPU seconds per layer of one verified batch (roofline in ``gpu_dtype``)."""
    _linear(t)
    e, b = cfg.element_bytes, cfg.batch
    nbytes = e * (t.weight_elems + b * (t.in_elems + t.out_elems))
    return np.asarray(op_times_s(gpu, t.fwd_flops * b, nbytes, cfg.gpu_dtype), dtype=float)


def copy_bytes(t: LayerTable, cfg: VerifyCostConfig) -> tuple[np.ndarray, np.ndarray]:
    """(bytes to the GPU, bytes back to the host) per layer of one verified batch: the
    layer's inputs (computed by the enclave) and its outputs (checked by the enclave)."""
    e, b = cfg.element_bytes, cfg.batch
    return e * b * t.in_elems, e * b * t.out_elems
