"""Secure-memory traffic and cross-enclave transfers, built on :mod:`devices.enclave`.

The enclave primitive prices a protected stream as data plus a flat amount of metadata per
unit. This module splits that metadata into its parts and adds what the TEE domain needs
(papers/tee.md section 1.3):

- **cacheline CPU TEE (SGX/MEE-like)**, ``cache_model: simulated`` (default): the
  stream's access pattern runs through the memory-encryption engine's metadata cache
  (:func:`devices.mee.simulate_metadata`): 64 B version blocks, MAC lines and tree nodes
  fetched on misses, tree walks up to the first cached node, dirty lines written back;
  hit rates follow from the pattern (``streams`` arrays interleaved) and the cache size.
  ``cache_model: fixed`` keeps the closed form of tee.md: per 64 B line a MAC (always
  fetched) and a version counter fetched with probability ``counter_miss_rate``; each
  counter miss walks ``d_tree = ceil(log_arity(counter blocks of the region))`` levels,
  each missing with ``tree_miss_rate`` and fetching as many bytes as a counter; writes
  update counters and tree nodes read-modify-write (``write_rmw_factor``). With
  ``counter_miss_rate = 1`` and ``tree_miss_rate = 0`` a read costs exactly
  ``enclave.metadata_bytes``;
- **cacheline NPU TEE (TNPU/MGX-like)**: MAC per line, version numbers on chip
  (:data:`TNPU_LIKE`); the stored MACs also take ``8 / 64`` of the protected HBM;
- **tensor granularity (TensorTEE)**: one record per tensor (``enclave.TENSOR``).

Transfers between the CPU and the accelerator are planned as a list of passes
(:func:`transfer_plan`): re-encryption through non-secure memory (the baseline), direct
ciphertext transfer (TensorTEE) or H100-CC-like bounce buffers. Every constant not taken
from a named source is marked "reconstruction" and exposed as a parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from hetsim.devices.enclave import (
    H100_CC,
    PRESETS,
    EnclaveSpec,
    enclave_preset,
    protection_units,
)
from hetsim.devices.mee import LINE_BYTES, AccessPattern, MetadataCache, simulate_metadata

TransferMode = Literal["plain", "reencrypt", "direct", "bounce"]

#: NPU TEE at cacheline granularity: one 8 B MAC per 64 B line stored off-chip, version
#: numbers kept on chip (TNPU keeps a VN table; MGX derives VNs): papers/tee.md 1.1.
TNPU_LIKE = EnclaveSpec(
    name="tnpu-like",
    granularity_bytes=64,
    metadata_bytes_per_unit=8.0,
    crypto_throughput_Bps=200e9,
    setup_latency_s=0.0,
    reencrypt_on_cross=True,
    source=(
        "8 B MAC per 64 B line, VN on chip: papers/tee.md 1.1 and 1.3 (TNPU/MGX). "
        "Crypto 2e11 B/s (hardware engine near HBM rate): parameter, reconstruction"
    ),
)

#: Counter bytes inside ``metadata_bytes_per_unit`` of each preset (the rest is MAC).
#: SGX MEE: 56-bit counter + 56-bit MAC per line (calibration/README.md A.5); TDX and the
#: NPU keep no off-chip counters.
COUNTER_BYTES_PER_UNIT: dict[str, float] = {"sgx-mee": 7.0}

_EXTRA_PRESETS: dict[str, EnclaveSpec] = {TNPU_LIKE.name: TNPU_LIKE}


def tee_preset(name: str) -> EnclaveSpec:
    """A preset of :mod:`devices.enclave` or of this module (``tnpu-like``)."""
    if name in _EXTRA_PRESETS:
        return _EXTRA_PRESETS[name]
    try:
        return enclave_preset(name)
    except KeyError:
        known = sorted([*PRESETS, *_EXTRA_PRESETS])
        raise KeyError(f"unknown enclave preset {name!r}; known: {known}") from None


class SecureMemoryParams(BaseModel):
    """Metadata-cache behaviour of cacheline TEEs: simulated (default) or fixed rates
    (all rates and the cache size are reconstruction: no published figure)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    cache_model: Literal["simulated", "fixed"] = Field(
        default="simulated", description="simulate the MEE metadata cache, or fixed rates"
    )
    cache_bytes: int = Field(
        default=64 * 1024, ge=512, description="MEE metadata cache (reconstruction)"
    )
    cache_ways: int = Field(default=8, ge=1, description="associativity of that cache")
    counter_miss_rate: float = Field(
        default=1.0, ge=0, le=1, description="counter fetched per line (1: streaming, no reuse)"
    )
    tree_miss_rate: float = Field(default=0.1, ge=0, le=1, description="miss rate per tree level")
    tree_arity: int = Field(default=8, ge=2, description="children per integrity-tree node")
    counters_per_block: int = Field(
        default=8, ge=1, description="lines covered by one counter block"
    )
    write_rmw_factor: float = Field(
        default=2.0, ge=1, description="counter and tree bytes of a write (read-modify-write)"
    )


class StreamTraffic(NamedTuple):
    """Memory bytes of one protected stream, by kind."""

    data_bytes: float
    mac_bytes: float
    counter_bytes: float
    tree_bytes: float
    writeback_bytes: float = 0.0  # dirty metadata lines written back (simulated cache)

    @property
    def metadata_bytes(self) -> float:
        """MAC + counter + tree + write-back bytes."""
        return self.mac_bytes + self.counter_bytes + self.tree_bytes + self.writeback_bytes

    @property
    def total_bytes(self) -> float:
        """Data plus metadata."""
        return self.data_bytes + self.metadata_bytes


def tree_depth(params: SecureMemoryParams, region_bytes: float, line_bytes: int = 64) -> int:
    """Integrity-tree levels above the counter blocks of a region: ceil(log_arity(blocks))."""
    blocks = max(1.0, region_bytes / line_bytes / params.counters_per_block)
    return max(1, math.ceil(math.log(blocks, params.tree_arity) - 1e-9))


def stream_traffic(
    spec: EnclaveSpec | None,
    nbytes: float,
    *,
    write: bool = False,
    region_bytes: float = 0.0,
    params: SecureMemoryParams | None = None,
    streams: int = 1,
) -> StreamTraffic:
    """Bytes moved when ``nbytes`` of protected memory are streamed (module doc).

    ``region_bytes`` sizes the integrity tree (the protected region holding the stream);
    ``streams``: arrays accessed side by side (simulated cache only).
    """
    if nbytes < 0:
        raise ValueError(f"negative stream size {nbytes}")
    if spec is None or nbytes == 0:
        return StreamTraffic(float(nbytes), 0.0, 0.0, 0.0)
    p = params or SecureMemoryParams()
    units = protection_units(spec, math.ceil(nbytes))
    ctr_unit = COUNTER_BYTES_PER_UNIT.get(spec.name, 0.0)
    mac = units * (spec.metadata_bytes_per_unit - ctr_unit)
    if ctr_unit == 0.0:
        return StreamTraffic(float(nbytes), float(mac), 0.0, 0.0)
    if p.cache_model == "simulated":
        return _simulated(spec, nbytes, write, max(region_bytes, nbytes), p, streams)
    rmw = p.write_rmw_factor if write else 1.0
    fetches = units * ctr_unit * p.counter_miss_rate * rmw
    depth = tree_depth(p, max(region_bytes, nbytes), spec.granularity_bytes or 64)
    return StreamTraffic(float(nbytes), float(mac), fetches, fetches * depth * p.tree_miss_rate)


def _simulated(
    spec: EnclaveSpec,
    nbytes: float,
    write: bool,
    region: float,
    p: SecureMemoryParams,
    streams: int,
) -> StreamTraffic:
    footprint = max(LINE_BYTES, int(region))
    pattern = AccessPattern(streams=streams, write=write, footprint_bytes=footprint)
    st = simulate_metadata(pattern, MetadataCache(p.cache_bytes, p.cache_ways), region)
    line = float(spec.granularity_bytes or LINE_BYTES)
    acc = nbytes / line
    return StreamTraffic(
        float(nbytes),
        acc * st.mac_fetch_rate * LINE_BYTES,
        acc * st.version_fetch_rate * LINE_BYTES,
        acc * st.tree_fetch_rate * LINE_BYTES,
        acc * st.writeback_rate * LINE_BYTES,
    )


def stored_metadata_bytes(spec: EnclaveSpec | None, nbytes: float) -> float:
    """Capacity the metadata of ``nbytes`` of protected data takes in memory."""
    if spec is None or nbytes <= 0:
        return 0.0
    return protection_units(spec, math.ceil(nbytes)) * spec.metadata_bytes_per_unit


# ---- transfers -----------------------------------------------------------------------


@dataclass(frozen=True)
class Pass:
    """One pass of a transfer: who does it, what it is, its bytes and its time."""

    side: Literal["src", "dst", "link"]
    kind: Literal["setup", "crypto", "memory", "dma", "verify"]
    what: str
    nbytes: float
    time_s: float


@dataclass(frozen=True)
class TransferSide:
    """One end of a transfer: its enclave (None: plain memory) and memory bandwidth."""

    spec: EnclaveSpec | None
    mem_bandwidth_Bps: float


def transfer_plan(
    mode: TransferMode,
    src: TransferSide,
    dst: TransferSide,
    nbytes: float,
    *,
    dma_s: float,
    verify_latency_s: float = 0.0,
    bounce_spec: EnclaveSpec = H100_CC,
    accel_decrypt_Bps: float = 1e12,
    cpu_is_src: bool = True,
) -> tuple[Pass, ...]:
    """The passes of moving one tensor of ``nbytes`` from ``src`` to ``dst``.

    ``reencrypt`` (TensorTEE's baseline): the source decrypts with its key and encrypts
    with a session key (2 crypto passes, then a write to non-secure memory), the DMA
    copies, the destination reads the non-secure copy, decrypts and encrypts with its
    key (2 crypto passes). ``direct``: the DMA moves ciphertext, the destination checks
    one tensor MAC. ``bounce`` (H100-CC-like): the CPU encrypts (or decrypts) with
    AES-GCM at ``bounce_spec``'s rate after its per-transfer setup, the accelerator's
    copy engine decrypts (or encrypts) at ``accel_decrypt_Bps`` (reconstruction).
    ``plain``: the DMA only.
    """
    dma = Pass("link", "dma", "copy", nbytes, dma_s)
    if mode == "plain":
        return (dma,)
    if mode == "direct":
        return (dma, Pass("dst", "verify", "tensor MAC check", 0.0, verify_latency_s))
    if mode == "bounce":
        return _bounce_passes(nbytes, dma, bounce_spec, accel_decrypt_Bps, cpu_is_src)
    return _reencrypt_passes(src, dst, nbytes, dma)


def _reencrypt_passes(
    src: TransferSide, dst: TransferSide, nbytes: float, dma: Pass
) -> tuple[Pass, ...]:
    both = src.spec is not None and dst.spec is not None
    out = _crypto_side("src", src, nbytes, ("decrypt", "encrypt session") if both else ("decrypt",))
    out.append(Pass("src", "memory", "write non-secure", nbytes, _mem_s(src, nbytes)))
    out.append(dma)
    out.append(Pass("dst", "memory", "read non-secure", nbytes, _mem_s(dst, nbytes)))
    dst_order = ("decrypt session", "encrypt") if both else ("encrypt",)
    out.extend(_crypto_side("dst", dst, nbytes, dst_order))
    return tuple(out)


def _crypto_side(
    side: Literal["src", "dst"], end: TransferSide, nbytes: float, order: tuple[str, ...]
) -> list[Pass]:
    spec = end.spec
    if spec is None:
        return []
    rate = spec.crypto_throughput_Bps
    setup = Pass(side, "setup", "setup", 0.0, spec.setup_latency_s)
    return [setup, *(Pass(side, "crypto", w, nbytes, nbytes / rate) for w in order)]


def _bounce_passes(
    nbytes: float,
    dma: Pass,
    spec: EnclaveSpec,
    accel_Bps: float,
    cpu_is_src: bool,
) -> tuple[Pass, ...]:
    cpu: Literal["src", "dst"] = "src" if cpu_is_src else "dst"
    acc: Literal["src", "dst"] = "dst" if cpu_is_src else "src"
    setup = Pass(cpu, "setup", "bounce setup", 0.0, spec.setup_latency_s)
    cpu_pass = Pass(cpu, "crypto", "AES-GCM (CPU)", nbytes, nbytes / spec.crypto_throughput_Bps)
    acc_pass = Pass(acc, "crypto", "AES-GCM (copy engine)", nbytes, nbytes / accel_Bps)
    if cpu_is_src:
        return (setup, cpu_pass, dma, acc_pass)
    return (acc_pass, dma, setup, cpu_pass)


def _mem_s(end: TransferSide, nbytes: float) -> float:
    return nbytes / end.mem_bandwidth_Bps


def side_time_s(passes: tuple[Pass, ...], side: str, kinds: tuple[str, ...] | None = None) -> float:
    """Seconds of the passes done by ``side`` (optionally only of the given kinds)."""
    return sum(p.time_s for p in passes if p.side == side and (kinds is None or p.kind in kinds))


def crypto_bytes(passes: tuple[Pass, ...]) -> float:
    """Bytes run through a cipher by a plan (the re-encryption work)."""
    return sum(p.nbytes for p in passes if p.kind == "crypto")
