"""A memory-encryption engine (MEE): AES engines, metadata caches and integrity-tree walks.

This is the cost model under the cacheline TEEs of :mod:`devices.enclave`. Three parts:

- :class:`AesEngine`: an AES(-GCM) engine with a throughput (``lanes x clock /
  cycles_per_byte``) and a pipeline latency (one block's rounds). A software engine is
  a number of CPU cores running AES-NI or VAES code; a hardware engine (the SGX MEE in
  the memory controller, a GPU copy engine, an NPU's inline engine) is a pipe of given
  rate. Presets in :data:`AES_ENGINES`, each with its source.
- :class:`MetadataCache` and :func:`simulate_metadata`: the on-chip cache that holds
  version (counter) blocks, MAC lines and integrity-tree nodes, simulated as a
  set-associative LRU cache over an access pattern. The layout follows the SGX MEE
  (Gueron, "A Memory Encryption Engine Suitable for General Purpose Processors",
  IACR ePrint 2016/204; calibration/README.md A.5): one 64 B version block holds the
  56-bit counters of 8 data lines, one 64 B MAC line the 56-bit MACs of 8 data lines,
  and each tree level above the versions has one 64 B node per 8 nodes below (arity 8),
  up to a root kept on die. A read of a data line needs its MAC line and its version
  block; a version miss walks up the tree until the first cached (already verified)
  node. A write updates the version and every tree level up to the root (read-modify-
  write), dirtying each; a dirty line evicted (or left dirty at the end) is written
  back. Hit rates therefore come from the access pattern (:class:`AccessPattern`),
  not from a fixed rate.
- :func:`secure_stream_time_s`: the time to stream protected bytes: the larger of the
  memory time of data plus metadata traffic and the engine's crypto time, plus the
  exposed latency of version misses: the counter is fetched alongside the data, but the
  one-time pad can only be computed once it has arrived, so each miss adds the engine's
  latency, divided by the memory-level parallelism. On a version hit the pad is
  computed while the data is in flight and the latency is hidden.

Every constant is either sourced or marked "parameter, reconstruction".
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

import numpy as np

from hetsim.simulator import diskcache

LINE_BYTES = 64
ARITY = 8  # counters per version block, MACs per MAC line, children per tree node (MEE)


@dataclass(frozen=True)
class AesEngine:
    """An AES engine: ``lanes`` parallel pipes at ``clock_hz``, ``cycles_per_byte`` each."""

    name: str
    cycles_per_byte: float
    clock_hz: float
    lanes: int
    latency_cycles: float
    source: str = ""

    def __post_init__(self) -> None:
        if self.cycles_per_byte <= 0 or self.clock_hz <= 0 or self.lanes < 1:
            raise ValueError(f"{self.name}: cycles_per_byte, clock_hz > 0 and lanes >= 1")
        if self.latency_cycles < 0:
            raise ValueError(f"{self.name}: latency_cycles must be >= 0")

    @property
    def throughput_Bps(self) -> float:
        """Bytes per second the engine encrypts or decrypts: lanes x clock / cpb."""
        return self.lanes * self.clock_hz / self.cycles_per_byte

    @property
    def latency_s(self) -> float:
        """One block through the pipe (the fill time of a stream)."""
        return self.latency_cycles / self.clock_hz

    def time_s(self, nbytes: float) -> float:
        """Seconds to run ``nbytes`` through the engine: fill latency + bytes / rate."""
        if nbytes < 0:
            raise ValueError(f"negative size {nbytes}")
        return 0.0 if nbytes == 0 else self.latency_s + nbytes / self.throughput_Bps

    def with_lanes(self, lanes: int) -> AesEngine:
        """The same engine with ``lanes`` parallel pipes (cores for a software engine)."""
        return replace(self, lanes=lanes)


_AESNI_SRC = (
    "AES-GCM 0.64 cycles/byte per core with AES-NI + PCLMULQDQ, and about 0.16 cycles/"
    "byte anticipated with VAES/VPCLMULQDQ on AVX-512 (Drucker, Gueron, Krasnov, 'Making "
    "AES great again: the forthcoming vectorized AES instruction', 2018, abstract); clock "
    "2.0e9 Hz: Xeon 8480 base (catalogue); latency 40 cycles = 10 AES-128 rounds x 4-cycle "
    "AESENC latency (parameter, reconstruction; papers/tee.md 1.3 quotes about 40 cycles)"
)

AESNI_GCM = AesEngine("aesni-gcm", 0.64, 2.0e9, 1, 40.0, _AESNI_SRC)
VAES_GCM = AesEngine("vaes-gcm", 0.16, 2.0e9, 1, 40.0, _AESNI_SRC)
SGX_MEE_ENGINE = AesEngine(
    "sgx-mee-hw",
    0.0625,
    2.0e9,
    1,
    40.0,
    "4 AES operations per 64 B line (calibration/README.md A.5); rate 16 B/cycle at 2 GHz "
    "(one AES pipe, 32 GB/s): parameter, reconstruction; latency 40 cycles: as aesni-gcm",
)
NPU_INLINE_ENGINE = AesEngine(
    "npu-inline",
    0.01,
    2.0e9,
    1,
    40.0,
    "AES pipes x 16 B/cycle x f keeping up with HBM (papers/tee.md 1.3): 200 GB/s at 2 GHz "
    "(parameter, reconstruction, as the tnpu-like preset)",
)
GPU_COPY_ENGINE = AesEngine(
    "gpu-cc-ce",
    0.002,
    2.0e9,
    1,
    40.0,
    "H100-CC copy-engine AES-GCM: no published rate (calibration/README.md A.5); 1e12 B/s "
    "(parameter, reconstruction, as the tee-collab accel_engine_Bps default)",
)

AES_ENGINES: dict[str, AesEngine] = {
    e.name: e for e in (AESNI_GCM, VAES_GCM, SGX_MEE_ENGINE, NPU_INLINE_ENGINE, GPU_COPY_ENGINE)
}


def aes_engine(name: str, lanes: int | None = None) -> AesEngine:
    """The engine preset ``name`` (optionally with ``lanes`` pipes); KeyError lists them."""
    try:
        e = AES_ENGINES[name]
    except KeyError:
        raise KeyError(f"unknown AES engine {name!r}; known: {sorted(AES_ENGINES)}") from None
    return e if lanes is None else e.with_lanes(lanes)


# ---- access patterns and the metadata cache ----------------------------------------


@dataclass(frozen=True)
class AccessPattern:
    """Which data lines a stream touches, in order.

    ``sequential``: ``streams`` arrays read (or written) side by side, element by element
    (Adam reads param, m, v and grad together), each advancing ``stride_bytes``;
    ``random``: uniformly random lines over ``footprint_bytes`` (seeded).
    """

    kind: Literal["sequential", "random"] = "sequential"
    stride_bytes: int = LINE_BYTES
    streams: int = 1
    footprint_bytes: int = 1 << 30
    write: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.stride_bytes < 1 or self.streams < 1 or self.footprint_bytes < LINE_BYTES:
            raise ValueError("stride_bytes, streams >= 1 and footprint_bytes >= 64")

    def lines(self, n: int) -> np.ndarray:
        """The first ``n`` data-line indices of the pattern."""
        total = self.footprint_bytes // LINE_BYTES
        if self.kind == "random":
            return np.random.default_rng(self.seed).integers(0, total, size=n)
        per = max(1, total // self.streams)  # each stream owns a contiguous slice
        i = np.arange(n)
        step, which = i // self.streams, i % self.streams
        return which * per + (step * self.stride_bytes // LINE_BYTES) % per


@dataclass(frozen=True)
class MetadataCache:
    """The engine's on-chip cache of version blocks, MAC lines and tree nodes."""

    capacity_bytes: int = 64 * 1024
    ways: int = 8
    line_bytes: int = LINE_BYTES
    source: str = (
        "64 KiB, 8-way, 64 B lines: parameter, reconstruction (the MEE cache size is not "
        "published; secure-memory studies assume 32-128 KiB counter caches)"
    )

    def __post_init__(self) -> None:
        if self.capacity_bytes < self.line_bytes * self.ways or self.ways < 1:
            raise ValueError("metadata cache must hold at least one set of `ways` lines")

    @property
    def sets(self) -> int:
        """Number of sets."""
        return max(1, self.capacity_bytes // (self.line_bytes * self.ways))


@dataclass(frozen=True)
class MetadataStats:
    """Per data-line access: metadata lines fetched and written back, and hit rates."""

    accesses: int
    version_fetch_rate: float  # version-block misses per access
    mac_fetch_rate: float  # MAC-line misses per access
    tree_fetch_rate: float  # tree-node fetches per access (all levels)
    writeback_rate: float  # dirty metadata lines written back per access
    depth: int  # tree levels above the version blocks (root on die)

    @property
    def version_hit_rate(self) -> float:
        """1 - version misses per access."""
        return 1.0 - self.version_fetch_rate

    @property
    def metadata_lines_per_access(self) -> float:
        """Metadata lines moved (fetched + written back) per data-line access."""
        return (
            self.version_fetch_rate + self.mac_fetch_rate + self.tree_fetch_rate
        ) + self.writeback_rate


def tree_levels(region_bytes: float, root_entries: int = ARITY) -> int:
    """Tree levels above the version blocks of a region: the root (on die) holds
    ``root_entries`` counters, each level divides the node count by :data:`ARITY`."""
    nodes = max(1, math.ceil(region_bytes / LINE_BYTES / ARITY))  # version blocks
    depth = 0
    while nodes > root_entries:
        nodes = math.ceil(nodes / ARITY)
        depth += 1
    return depth


_MAC = -1  # level tag of MAC lines; versions are level 0, tree nodes 1..depth
_SET_MIX_INDEX, _SET_MIX_LEVEL = 0x9E3779B1, 0x85EBCA77  # set = hash(level, index) % sets


def simulate_metadata(
    pattern: AccessPattern,
    cache: MetadataCache | None = None,
    region_bytes: float | None = None,
    sample_lines: int = 1 << 15,
) -> MetadataStats:
    """Metadata traffic of ``pattern`` through ``cache`` (module doc), per data access.

    The first ``sample_lines`` accesses are simulated from a cold cache; rates per access
    are then applied to the whole stream (sequential patterns are periodic, so a sample
    of many version blocks gives their steady rate). Memoised.
    """
    return _simulate(pattern, cache or MetadataCache(), region_bytes, sample_lines)


@lru_cache(maxsize=512)
def _simulate(
    pattern: AccessPattern, cache: MetadataCache, region_bytes: float | None, n: int
) -> MetadataStats:
    # a pure function of its arguments and of this file: kept between processes too
    # (``simulator.diskcache``; a tensortee build simulates ~10^6 line accesses)
    key = repr((pattern, cache, region_bytes, n))
    return diskcache.cached(
        "mee-metadata", key, lambda: _simulate_lines(pattern, cache, region_bytes, n), [__file__]
    )


def _simulate_lines(
    pattern: AccessPattern, cache: MetadataCache, region_bytes: float | None, n: int
) -> MetadataStats:
    """The set-associative LRU cache of (level, index) metadata lines with dirty bits,
    run over the first ``n`` lines of ``pattern``. Each line's MAC line and version
    block are touched, then the tree nodes up to the first cached one (a read) or to
    the root (a write updates every level); a miss inserts the line, evicting its set's
    least recently used one (written back if dirty). Written out in one loop (~10^5
    accesses per call; start-up time)."""
    region = float(region_bytes if region_bytes is not None else pattern.footprint_bytes)
    depth = tree_levels(region)
    n_sets, ways = cache.sets, cache.ways
    sets: list[OrderedDict[tuple[int, int], bool]] = [OrderedDict() for _ in range(n_sets)]
    mix_i, mix_l = _SET_MIX_INDEX, _SET_MIX_LEVEL
    w = pattern.write
    writebacks = v_miss = m_miss = t_fetch = 0
    prev_block, prev_all_hit = -1, False
    for line in pattern.lines(n).tolist():
        block = line // ARITY
        if block == prev_block and prev_all_hit:
            # the same metadata lines as the access before, which hit on every one: they
            # are the most recent of their sets, in this order, with the dirty bits this
            # access would set, so this access changes nothing
            continue
        all_hit = True
        key = (_MAC, block)
        s = sets[(block * mix_i + _MAC * mix_l) % n_sets]
        if key in s:
            s.move_to_end(key)
            if w:
                s[key] = True
        else:
            m_miss += 1
            all_hit = False
            if len(s) >= ways:
                writebacks += s.popitem(last=False)[1]
            s[key] = w
        key = (0, block)
        s = sets[(block * mix_i) % n_sets]
        if key in s:
            s.move_to_end(key)
            if w:
                s[key] = True
            hit = True
        else:
            v_miss += 1
            hit = all_hit = False
            if len(s) >= ways:
                writebacks += s.popitem(last=False)[1]
            s[key] = w
        node = block
        for level in range(1, depth + 1):
            if hit and not w:
                break  # a cached version was verified when it came in
            node //= ARITY
            key = (level, node)
            s = sets[(node * mix_i + level * mix_l) % n_sets]
            if key in s:
                s.move_to_end(key)
                if w:
                    s[key] = True
                hit = True
            else:
                t_fetch += 1
                hit = all_hit = False
                if len(s) >= ways:
                    writebacks += s.popitem(last=False)[1]
                s[key] = w
        prev_block, prev_all_hit = block, all_hit
    wb = writebacks + sum(sum(1 for d in s.values() if d) for s in sets)
    return MetadataStats(n, v_miss / n, m_miss / n, t_fetch / n, wb / n, depth)


# ---- time of a protected stream ------------------------------------------------------


@dataclass(frozen=True)
class MeeTiming:
    """How many version misses overlap (parameter, reconstruction)."""

    mlp: float = 10.0
    source: str = "10 outstanding misses per core (line fill buffers): parameter, reconstruction"


@dataclass(frozen=True)
class SecureStream:
    """Bytes and seconds of one protected stream (:func:`secure_stream`)."""

    data_bytes: float
    metadata_bytes: float
    memory_s: float
    crypto_s: float
    latency_s: float

    @property
    def time_s(self) -> float:
        """max(memory, crypto) + exposed version-miss latency."""
        return max(self.memory_s, self.crypto_s) + self.latency_s


def secure_stream(
    nbytes: float,
    pattern: AccessPattern,
    mem_bandwidth_Bps: float,
    engine: AesEngine,
    cache: MetadataCache | None = None,
    region_bytes: float | None = None,
    timing: MeeTiming | None = None,
) -> SecureStream:
    """Cost of streaming ``nbytes`` of MEE-protected memory in ``pattern`` (module doc)."""
    if nbytes < 0 or mem_bandwidth_Bps <= 0:
        raise ValueError("nbytes >= 0 and mem_bandwidth_Bps > 0")
    if nbytes == 0:
        return SecureStream(0.0, 0.0, 0.0, 0.0, 0.0)
    st = simulate_metadata(pattern, cache, region_bytes)
    accesses = nbytes / LINE_BYTES
    meta = accesses * st.metadata_lines_per_access * LINE_BYTES
    t = timing or MeeTiming()
    misses = accesses * st.version_fetch_rate
    lat = misses * engine.latency_s / t.mlp
    return SecureStream(
        float(nbytes),
        meta,
        (nbytes + meta) / mem_bandwidth_Bps,
        nbytes / engine.throughput_Bps,
        lat,
    )
