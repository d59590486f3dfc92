"""TEE primitive: metadata traffic, secure access and crossing times by hand."""

import pytest

from hetsim.devices.enclave import (
    H100_CC,
    PRESETS,
    SGX_MEE,
    TDX,
    TENSOR,
    Enclave,
    EnclaveSpec,
    crossing_time_s,
    enclave_preset,
    metadata_bytes,
    protected_bytes,
    secure_access_time_s,
)

MIB = 1 << 20


def test_protected_bytes_per_preset() -> None:
    # 1 MiB = 16384 lines of 64 B
    # SGX: 14 B per line -> 16384 * 14 = 229376; 1 MiB * (1 + 14/64) = 1277952
    assert protected_bytes(SGX_MEE, MIB) == 1277952 == MIB * (1 + 14 / 64)
    # TDX: 28 bits = 3.5 B per line -> 16384 * 3.5 = 57344 -> 1105920
    assert protected_bytes(TDX, MIB) == 1105920
    # tensor granularity: one 64 B record for the whole tensor
    assert protected_bytes(TENSOR, MIB) == MIB + 64
    # H100 CC: one 16 B GCM tag per transfer
    assert protected_bytes(H100_CC, MIB) == MIB + 16
    assert protected_bytes(None, MIB) == MIB
    assert protected_bytes(SGX_MEE, 0) == 0


def test_partial_lines_round_up() -> None:
    # 100 B touch 2 lines: 2 * 14 = 28 B of metadata; TDX 2 * 3.5 = 7
    assert metadata_bytes(SGX_MEE, 100) == 28
    assert protected_bytes(TDX, 100) == 107
    # one line of TDX: 3.5 B rounds up to 4 whole bytes
    assert metadata_bytes(TDX, 64) == 4


def test_secure_access_time() -> None:
    # 1277952 B at 100e9 B/s = 1.277952e-5 s
    assert secure_access_time_s(SGX_MEE, MIB, 100e9) == pytest.approx(1.277952e-5, rel=1e-12)
    assert secure_access_time_s(None, MIB, 1e9) == pytest.approx(MIB / 1e9)


A = EnclaveSpec(
    "a", 64, 8.0, crypto_throughput_Bps=1e9, setup_latency_s=1e-5, reencrypt_on_cross=True
)
B = EnclaveSpec(
    "b", 64, 8.0, crypto_throughput_Bps=2e9, setup_latency_s=2e-5, reencrypt_on_cross=True
)


def test_crossing_reencrypts_on_both_sides() -> None:
    # src: 1e-5 + 2 passes * 1e6 / 1e9 = 2.01e-3; dst: 2e-5 + 2 * 1e6 / 2e9 = 1.02e-3
    # total 3.03e-3
    assert crossing_time_s(A, B, 10**6) == pytest.approx(3.03e-3, rel=1e-12)
    assert crossing_time_s(A, A, 10**6) == 0.0  # same enclave
    # two enclaves of one design are different enclaves: 2 * (1e-5 + 2e-3) = 4.02e-3
    gpu0, gpu1 = Enclave("gpu0", A), Enclave("gpu1", A)
    assert crossing_time_s(gpu0, gpu1, 10**6) == pytest.approx(4.02e-3, rel=1e-12)


def test_crossing_to_plain_memory_is_one_pass() -> None:
    # out of B into plain memory: 2e-5 + 1e6 / 2e9 = 5.2e-4
    assert crossing_time_s(B, None, 10**6) == pytest.approx(5.2e-4, rel=1e-12)
    assert crossing_time_s(None, None, 10**6) == 0.0


def test_tensor_enclaves_transfer_ciphertext_directly() -> None:
    cpu, npu = Enclave("cpu", TENSOR), Enclave("npu", TENSOR)
    assert crossing_time_s(cpu, npu, 10**9) == 0.0


def test_presets_are_sourced() -> None:
    assert enclave_preset("sgx-mee") is SGX_MEE
    with pytest.raises(KeyError, match="known"):
        enclave_preset("sev")
    for spec in PRESETS.values():
        assert spec.source
    for spec in (H100_CC, TENSOR):
        assert "parameter, reconstruction" in spec.source
