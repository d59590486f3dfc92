"""TEE cost model: metadata bytes of a 1 MiB stream and a transfer's passes, by hand."""

import pytest

from hetsim.devices.enclave import (
    H100_CC,
    SGX_MEE,
    TDX,
    TENSOR,
    Enclave,
    crossing_time_s,
    metadata_bytes,
)
from hetsim.workloads.tee.secure import (
    TNPU_LIKE,
    SecureMemoryParams,
    TransferSide,
    crypto_bytes,
    stored_metadata_bytes,
    stream_traffic,
    tee_preset,
    transfer_plan,
    tree_depth,
)

MIB = 1 << 20
LINES = MIB // 64  # 16384 lines of 64 B


def test_metadata_of_1mib_under_each_scheme() -> None:
    p = SecureMemoryParams(cache_model="fixed", counter_miss_rate=1.0, tree_miss_rate=0.1)
    # tree over a 1 MiB region: 16384 lines / 8 per counter block = 2048 blocks,
    # log8(2048) = 3.67 -> 4 levels
    assert tree_depth(p, MIB) == 4
    sgx = stream_traffic(SGX_MEE, MIB, region_bytes=MIB, params=p)
    assert sgx.mac_bytes == LINES * 7  # 56-bit MAC per line = 114688
    assert sgx.counter_bytes == LINES * 7  # 56-bit counter, every line misses = 114688
    assert sgx.tree_bytes == pytest.approx(LINES * 7 * 4 * 0.1)  # 45875.2
    assert sgx.metadata_bytes == pytest.approx(275251.2)
    # a write updates counters and tree read-modify-write (x2), MACs once
    w = stream_traffic(SGX_MEE, MIB, write=True, region_bytes=MIB, params=p)
    assert w.metadata_bytes == pytest.approx(114688 + 229376 + 91750.4)
    assert stream_traffic(TDX, MIB).metadata_bytes == LINES * 3.5  # 28-bit MAC: 57344
    assert stream_traffic(TNPU_LIKE, MIB).metadata_bytes == MIB / 8  # 8 B per 64 B
    assert stream_traffic(TENSOR, MIB).metadata_bytes == 64  # one record per tensor
    assert stream_traffic(H100_CC, MIB).metadata_bytes == 16  # one GCM tag
    assert stream_traffic(None, MIB).total_bytes == MIB


def test_no_tree_misses_matches_the_enclave_primitive() -> None:
    p = SecureMemoryParams(cache_model="fixed", counter_miss_rate=1.0, tree_miss_rate=0.0)
    got = stream_traffic(SGX_MEE, MIB, params=p).metadata_bytes
    assert got == metadata_bytes(SGX_MEE, MIB) == LINES * 14


def test_stored_metadata_capacity() -> None:
    # NPU MACs take 1/8 of protected HBM (papers/tee.md 1.3: 12.5%)
    assert stored_metadata_bytes(TNPU_LIKE, 8 * MIB) == MIB
    assert stored_metadata_bytes(None, MIB) == 0.0
    with pytest.raises(KeyError, match="known"):
        tee_preset("sgx-9")


CPU = TransferSide(SGX_MEE, 100e9)
NPU = TransferSide(TNPU_LIKE, 1e12)


def test_reencrypt_passes_counted() -> None:
    plan = transfer_plan("reencrypt", NPU, CPU, MIB, dma_s=1e-4)
    kinds = [p.kind for p in plan]
    # src: setup, decrypt, encrypt(session), write non-secure; dma;
    # dst: read non-secure, setup, decrypt(session), encrypt
    assert kinds.count("crypto") == 4 and kinds.count("setup") == 2
    assert kinds.count("memory") == 2 and kinds.count("dma") == 1
    assert crypto_bytes(plan) == 4 * MIB
    crypto_s = sum(p.time_s for p in plan if p.kind in ("crypto", "setup"))
    # same as the primitive: 2 passes + setup on each side
    both = crossing_time_s(Enclave("npu", TNPU_LIKE), Enclave("cpu", SGX_MEE), MIB)
    assert crypto_s == pytest.approx(both)
    # by hand: 2 * MIB / 2e11 + 8e-6 + 2 * MIB / 3e9
    assert crypto_s == pytest.approx(2 * MIB / 2e11 + 8e-6 + 2 * MIB / 3e9)


def test_direct_and_bounce_passes() -> None:
    direct = transfer_plan("direct", NPU, CPU, MIB, dma_s=1e-4, verify_latency_s=1e-6)
    assert [p.kind for p in direct] == ["dma", "verify"]
    assert crypto_bytes(direct) == 0
    bounce = transfer_plan("bounce", CPU, NPU, MIB, dma_s=1e-4, accel_decrypt_Bps=1e12)
    assert [p.kind for p in bounce] == ["setup", "crypto", "dma", "crypto"]
    # CPU AES-GCM at 2e9 B/s after a 2e-4 s setup; the copy engine at 1e12 B/s
    total = sum(p.time_s for p in bounce)
    assert total == pytest.approx(2e-4 + MIB / 2e9 + 1e-4 + MIB / 1e12)
    assert [p.kind for p in transfer_plan("plain", CPU, NPU, MIB, dma_s=1.0)] == ["dma"]


def test_one_plain_end_makes_one_pass() -> None:
    plan = transfer_plan("reencrypt", TransferSide(None, 1e11), CPU, MIB, dma_s=0.0)
    assert crypto_bytes(plan) == MIB
    crypto_s = sum(p.time_s for p in plan if p.kind in ("crypto", "setup"))
    assert crypto_s == pytest.approx(crossing_time_s(None, SGX_MEE, MIB))
