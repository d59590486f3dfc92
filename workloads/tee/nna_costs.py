"""Per-op costs of DNN training with private data in a CPU TEE and untrusted NNAs (DAC'23).

Every op of a training step runs three GEMMs (forward, input gradient, weight gradient:
3x the forward FLOPs). In the TEE (SGX-class) an op costs its CPU roofline time over
the enclave's threads (their share of the cores, and ``core_bandwidth_Bps`` of memory
bandwidth each), with memory traffic protected by the enclave's cacheline metadata
(:func:`workloads.tee_secure.stream_traffic`) and EPC paging (:func:`paging_s`).
Offloaded (masked) to an NNA, a linear op costs

- in the TEE (``protect_s``): masking and type conversion of every input element
  (``mask_bytes_per_element``), unmasking with the meta-key of every output element
  (``unmask_bytes_per_element``), meta-key generation, the nonlinear work, the weight
  update, and two enclave crossings (ECALL/OCALL, the preset's ``setup_latency_s``) per
  GEMM. A meta-key is keyed pseudo-random material, one ``masked_bytes_per_element``
  field element per element received, made by the enclave's threads with a keyed
  primitive at ``metakey_cycles_per_byte`` per thread at the CPU's clock
  (``devices/cpu_kernels.yaml``): 0.63 cycles/B by default, AES-128-GCM on Skylake
  (OpenSSL ``crypto/modes/asm/aesni-gcm-x86_64.pl``, raw profiled figure); the
  robustness range runs from 0.16 (VAES AES-GCM, Drucker, Gueron, Krasnov 2018) to 7.7
  (SHA-256 on Skylake, OpenSSL ``crypto/sha/asm/sha256-586.pl``, x86_64 column), a
  cipher-based to a hash-based derivation. The algebraic correction (an incremental
  W r update) is not priced on top: it is a few FLOPs per element at AVX-512 rates,
  below the primitive's cost at every point of that range;
- on the link: masked inputs (forward input, output gradient, both for the weight
  gradient) and the weights to the NNA, masked outputs back, at
  ``masked_bytes_per_element`` (reconstruction: 32-bit field elements as in Slalom);
- on the NNA: the GEMMs at its roofline in ``nna_dtype``.

Ops with two private operands (attention) stay in the TEE.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hetsim.devices.enclave import EnclaveSpec
from hetsim.devices.roofline import op_times_s
from hetsim.devices.spec import DeviceSpec
from hetsim.workloads.tee.models import LayerTable
from hetsim.workloads.tee.secure import stream_traffic
from hetsim.workloads.tee.view import OpView


@dataclass(frozen=True)
class NnaCostConfig:
    """The parameters of the per-op cost model (the workload fills them)."""

    batch: int
    tee_cores: int | None
    tee_dtype: str
    nna_dtype: str
    epc_bytes: float
    masked_bytes_per_element: float
    mask_bytes_per_element: float
    unmask_bytes_per_element: float
    nonlinear_bytes_per_element: float
    metakey_cycles_per_byte: float
    core_bandwidth_Bps: float
    enclave: EnclaveSpec
    clock_hz: float = 2.0e9  # the CPU's clock (devices/cpu_kernels.yaml)


def tee_scale(cpu: DeviceSpec, cores: int | None, core_Bps: float) -> tuple[float, float]:
    """(compute share, memory-bandwidth share) of the CPU the enclave's threads get:
    cores / all cores, and cores x ``core_Bps`` / memory bandwidth (capped at 1)."""
    if cores is None or cpu.cores <= 0:
        return 1.0, 1.0
    return min(1.0, cores / cpu.cores), min(1.0, cores * core_Bps / cpu.memory_bandwidth_Bps)


def working_set_bytes(t: LayerTable, cfg: NnaCostConfig, all_in_tee: bool) -> float:
    """Enclave working set of a step: activations (fp32), plus weights, grads and the
    weights' optimizer copy when every op runs inside (reconstruction: 4 copies)."""
    acts = 4.0 * cfg.batch * float((t.in_elems + t.out_elems).sum())
    return acts + (16.0 * float(t.weight_elems.sum()) if all_in_tee else 0.0)


def paging_s(traffic_bytes: np.ndarray, working_set: float, cfg: NnaCostConfig) -> np.ndarray:
    """EPC paging per op: the working set beyond the EPC is paged out and back in on
    each of the step's two sweeps (forward, backward), each page encrypted out and
    decrypted in at the enclave's crypto rate; spread over ops by their traffic."""
    over = max(0.0, working_set - cfg.epc_bytes)
    total_s = 2 * 2 * over / cfg.enclave.crypto_throughput_Bps
    share = traffic_bytes / traffic_bytes.sum() if traffic_bytes.sum() > 0 else traffic_bytes
    return total_s * share


def _protected(cfg: NnaCostConfig, nbytes: np.ndarray, region: float) -> np.ndarray:
    """Traffic with the enclave's metadata (read-heavy streams; reconstruction)."""
    ratio = stream_traffic(cfg.enclave, 1 << 20, region_bytes=region).total_bytes / (1 << 20)
    return nbytes * ratio


def _cpu_times(
    cpu: DeviceSpec, flops: np.ndarray, nbytes: np.ndarray, cfg: NnaCostConfig
) -> np.ndarray:
    c_share, m_share = tee_scale(cpu, cfg.tee_cores, cfg.core_bandwidth_Bps)
    return op_times_s(cpu, flops / c_share, nbytes / m_share, cfg.tee_dtype)


def tee_only_s(t: LayerTable, cpu: DeviceSpec, cfg: NnaCostConfig) -> np.ndarray:
    """Seconds per op of a step run entirely inside the TEE."""
    b = cfg.batch
    flops = 3.0 * t.fwd_flops * b
    nbytes = 4.0 * (3 * t.weight_elems + 3 * b * (t.in_elems + t.out_elems)) + (
        2 * cfg.nonlinear_bytes_per_element * b * t.nonlinear_elems + 12.0 * t.weight_elems
    )
    ws = working_set_bytes(t, cfg, all_in_tee=True)
    traffic = _protected(cfg, nbytes, ws)
    return _cpu_times(cpu, flops, traffic, cfg) + paging_s(traffic, ws, cfg)


def masked_elements(t: LayerTable, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(elements sent to the NNA, elements received) per op and step."""
    sent = batch * 2 * (t.in_elems + t.out_elems) + t.weight_elems
    received = batch * (t.out_elems + t.in_elems) + t.weight_elems
    return sent, received


PARTS = ("mask", "unmask", "nonlinear", "metakey", "crossings")


def protect_parts(t: LayerTable, cpu: DeviceSpec, cfg: NnaCostConfig) -> dict[str, np.ndarray]:
    """TEE-side seconds per op and step when the op's GEMMs run on an NNA, by part:

    ``mask`` (masking and type conversion of the inputs sent), ``unmask`` (unmasking
    with the meta-keys and conversion of the outputs received), ``nonlinear`` (the
    nonlinear work and the weight update), ``metakey`` (meta-key generation: the only
    part that does not depend on this step's activations, so the only one that can be
    prefetched), ``crossings`` (two ECALL/OCALLs per GEMM). Each part is its own CPU
    roofline; EPC paging is shared by their traffic.
    """
    sent, received = masked_elements(t, cfg.batch)
    nbytes = {
        "mask": cfg.mask_bytes_per_element * sent,
        "unmask": cfg.unmask_bytes_per_element * received,
        "nonlinear": 2 * cfg.nonlinear_bytes_per_element * cfg.batch * t.nonlinear_elems
        + 12.0 * t.weight_elems,
    }
    ws = working_set_bytes(t, cfg, all_in_tee=False)
    traffic = {k: _protected(cfg, v, ws) for k, v in nbytes.items()}
    total = np.sum(list(traffic.values()), axis=0)
    paging = paging_s(total, ws, cfg)
    zero = np.zeros(len(t))
    out = {
        k: _cpu_times(cpu, zero, v, cfg)
        + paging * np.divide(v, total, out=zero.copy(), where=total > 0)
        for k, v in traffic.items()
    }
    out["metakey"] = metakey_s(received, cpu, cfg)
    out["crossings"] = np.full(len(t), 6 * cfg.enclave.setup_latency_s)  # 2 per GEMM
    return out


def metakey_s(received: np.ndarray, cpu: DeviceSpec, cfg: NnaCostConfig) -> np.ndarray:
    """Seconds per op of making one meta-key element per element received (module doc):
    bytes x cycles/byte over the enclave threads' cycles per second."""
    threads = cfg.tee_cores if cfg.tee_cores is not None else cpu.cores
    if cpu.cores > 0:
        threads = min(threads, cpu.cores)  # as tee_scale
    threads = max(threads, 1)
    nbytes = cfg.masked_bytes_per_element * np.asarray(received, dtype=float)
    return np.asarray(nbytes * cfg.metakey_cycles_per_byte / (threads * cfg.clock_hz))


def protect_s(t: LayerTable, cpu: DeviceSpec, cfg: NnaCostConfig) -> np.ndarray:
    """TEE-side seconds per op when the op's GEMMs run on an NNA: the sum of
    :func:`protect_parts`."""
    return np.asarray(sum(protect_parts(t, cpu, cfg).values()))


def nna_s(t: LayerTable, nna: DeviceSpec, cfg: NnaCostConfig) -> np.ndarray:
    """NNA seconds per op (inf where the NNA lacks ``nna_dtype``)."""
    if cfg.nna_dtype not in nna.peak_flops:
        return np.full(len(t), math.inf)
    sent, received = masked_elements(t, cfg.batch)
    nbytes = cfg.masked_bytes_per_element * (sent + received)
    return op_times_s(nna, 3.0 * t.fwd_flops * cfg.batch, nbytes, cfg.nna_dtype)


def op_views(
    t: LayerTable,
    tee: np.ndarray,
    parts: dict[str, np.ndarray],
    nna: list[np.ndarray],
    xfer: list[np.ndarray],
) -> tuple[OpView, ...]:
    """One :class:`OpView` per op from the per-op cost arrays (``parts``:
    :func:`protect_parts`)."""
    protect = np.asarray(sum(parts.values()))
    return tuple(
        OpView(
            t.names[i],
            t.kinds[i] == "linear",
            float(tee[i]),
            float(protect[i]),
            tuple(float(a[i]) for a in nna),
            tuple(float(a[i]) for a in xfer),
            float(parts["mask"][i]),
            float(parts["metakey"][i]),
            float(parts["crossings"][i]),
            float(parts["nonlinear"][i]),
        )
        for i in range(len(t))
    )
