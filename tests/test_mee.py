"""Memory-encryption engine: engine time, metadata-cache hit rates, tree walks, by hand."""

from __future__ import annotations

import pytest

from hetsim.devices.enclave import SGX_MEE
from hetsim.devices.mee import (
    AccessPattern,
    MetadataCache,
    aes_engine,
    secure_stream,
    simulate_metadata,
    tree_levels,
)
from hetsim.workloads.tee.secure import SecureMemoryParams, stream_traffic

GIB = 1 << 30


def test_engine_throughput_and_latency() -> None:
    e = aes_engine("aesni-gcm")
    # 2.0e9 cycles/s / 0.64 cycles/B = 3.125e9 B/s per core; 40 cycles = 20 ns
    assert e.throughput_Bps == pytest.approx(3.125e9)
    assert e.with_lanes(4).throughput_Bps == pytest.approx(12.5e9)
    assert e.time_s(1e9) == pytest.approx(20e-9 + 0.32)
    assert e.time_s(0) == 0.0
    with pytest.raises(KeyError, match="known"):
        aes_engine("des")


def test_throughput_bound_copy_time() -> None:
    # 1 GiB sequential read through a 1-lane software engine (3.125 GB/s) from 100 GB/s
    # memory: crypto 0.3436 s dominates memory (1 GiB + metadata / 100 GB/s = ~0.0126 s);
    # exposed latency: one version miss per 8 lines x 20 ns / 10 in flight
    s = secure_stream(GIB, AccessPattern(footprint_bytes=GIB), 100e9, aes_engine("aesni-gcm"))
    assert s.crypto_s == pytest.approx(GIB / 3.125e9)
    assert s.memory_s < s.crypto_s
    lines = GIB / 64
    assert s.latency_s == pytest.approx(lines / 8 * 20e-9 / 10, rel=1e-3)
    assert s.time_s == pytest.approx(GIB / 3.125e9 + lines / 8 * 2e-9, rel=1e-3)
    # with 64 lanes the engine keeps up and memory bounds the copy
    fast = secure_stream(
        GIB, AccessPattern(footprint_bytes=GIB), 100e9, aes_engine("aesni-gcm", 64)
    )
    assert fast.time_s == pytest.approx(fast.memory_s + fast.latency_s)


@pytest.mark.parametrize("stride_lines", [1, 2, 4, 8, 16])
def test_version_hit_rate_on_a_strided_pattern(stride_lines: int) -> None:
    # one version block covers 8 lines: a stream of stride s lines needs a new block
    # every 8/s accesses (every access once s >= 8); nothing is reused, so the hit
    # rate is 1 - min(1, s/8), the same for MAC lines
    pat = AccessPattern(stride_bytes=64 * stride_lines, footprint_bytes=GIB)
    st = simulate_metadata(pat, MetadataCache(), GIB)
    want = 1 - min(1.0, stride_lines / 8)
    assert st.version_hit_rate == pytest.approx(want, abs=1e-9)
    assert 1 - st.mac_fetch_rate == pytest.approx(want, abs=1e-9)
    assert st.writeback_rate == 0.0  # reads dirty nothing


def test_tree_walks_and_capacity() -> None:
    # 1 GiB: 2^24 lines, 2^21 version blocks; each level divides by 8 until the 8 root
    # counters on die cover it: 2^21 -> 2^18 -> ... -> 2^3, 6 levels
    assert tree_levels(GIB) == 6
    # sequential read: a walk goes up only when a new level-1 node starts (1 in 8 version
    # misses), then 1 in 64, ...: per access (1/8)(1/8 + 1/64 + ...) ~ 1/56, plus cold
    # misses of the top levels
    st = simulate_metadata(AccessPattern(footprint_bytes=GIB), MetadataCache(), GIB)
    assert st.tree_fetch_rate == pytest.approx(1 / 56, rel=0.1)
    # random lines over 1 GiB miss everywhere: versions ~1, walks several levels deep
    rnd = simulate_metadata(AccessPattern("random", footprint_bytes=GIB), MetadataCache(), GIB)
    assert rnd.version_hit_rate < 0.01 and rnd.tree_fetch_rate > 2
    # a cache holding the whole working set hits after the cold misses
    small = AccessPattern("random", footprint_bytes=64 * 1024)
    big = simulate_metadata(small, MetadataCache(capacity_bytes=1 << 20), 64 * 1024)
    assert big.version_hit_rate > 0.99


def test_writes_dirty_the_path() -> None:
    # a sequential write dirties one version block and one MAC line per 8 lines, each
    # written back once: >= 2/8 write-backs per access
    st = simulate_metadata(AccessPattern(write=True, footprint_bytes=GIB), MetadataCache(), GIB)
    assert st.writeback_rate >= 0.25
    # the secure-memory layer prices a simulated sequential MEE read at 64 B per miss:
    # 16384 lines x (1/8 MAC + 1/8 version) x 64 B + tree
    tr = stream_traffic(SGX_MEE, 1 << 20, region_bytes=GIB, params=SecureMemoryParams())
    assert tr.mac_bytes == pytest.approx(16384 / 8 * 64)
    assert tr.counter_bytes == pytest.approx(16384 / 8 * 64)
