"""The TEE primitive: the cost of secure memory and of moving data between enclaves.

An enclave protects memory at a *granularity* (a 64 B cache line, or a whole tensor)
and keeps *metadata* per protected unit (counters, MACs). Three costs follow:

- **traffic**: every access to ``nbytes`` also moves the metadata of its units,
  ``protected_bytes = nbytes + ceil(units * metadata_bytes_per_unit)`` with
  ``units = ceil(nbytes / granularity_bytes)`` (one unit when ``granularity_bytes == 0``:
  one record per tensor or per transfer);
- **secure access time**: ``protected_bytes / mem_bandwidth_Bps``. The inline memory
  crypto engine is assumed to keep up with memory (TensorTEE's design point); counter
  and tree-node cache misses are not modelled (an upper-level model can scale the
  metadata rate);
- **crossing**: moving data between two different enclaves through non-secure memory
  re-encrypts it (TensorTEE's baseline, tee.md section 1.3): the source decrypts with
  its key and encrypts with a session key, the destination decrypts the session key's
  ciphertext and encrypts with its own key. Each side pays its ``setup_latency_s`` and
  two passes at its ``crypto_throughput_Bps``, serialised (the consumer waits for the
  whole tensor). A side that is not an enclave (``None``: plain memory) pays nothing and
  the secure side makes one pass (decrypt out, or encrypt in). Two enclaves that both
  have ``reencrypt_on_cross=False`` share granularity and keys and exchange ciphertext
  directly (TensorTEE's direct transfer): crossing costs 0. The copies themselves
  (write, DMA, read) are link and memory costs, charged by the caller.

Numbers of the presets: see each preset's ``source``; "parameter, reconstruction" marks
a value chosen here for lack of a published figure (override it in a scenario).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class EnclaveSpec:
    """One TEE design: protection granularity, metadata, crypto rate, per-transfer toll."""

    name: str
    granularity_bytes: int
    metadata_bytes_per_unit: float
    crypto_throughput_Bps: float
    setup_latency_s: float
    reencrypt_on_cross: bool
    source: str = ""

    def __post_init__(self) -> None:
        if self.granularity_bytes < 0 or self.metadata_bytes_per_unit < 0:
            raise ValueError(f"{self.name}: granularity and metadata must be >= 0")
        if self.crypto_throughput_Bps <= 0 or self.setup_latency_s < 0:
            raise ValueError(f"{self.name}: crypto throughput > 0 and setup latency >= 0")


@dataclass(frozen=True)
class Enclave:
    """One enclave instance (a CPU's SGX enclave, one GPU's CC region) of a given design."""

    name: str
    spec: EnclaveSpec


_SOFTWARE_CRYPTO = (
    "crypto 3e9 B/s: parameter, reconstruction of 'in-enclave crypto at a few GB/s' "
    "(papers/tee.md section 5, recall)"
)

SGX_MEE = EnclaveSpec(
    name="sgx-mee",
    granularity_bytes=64,
    metadata_bytes_per_unit=14.0,  # 56-bit counter + 56-bit MAC per 64 B line = 112 bits
    crypto_throughput_Bps=3e9,
    setup_latency_s=8e-6,
    reencrypt_on_cross=True,
    source=(
        "64 B line, 56-bit counter + 56-bit MAC: calibration/README.md A.5 (Intel SGX MEE). "
        f"{_SOFTWARE_CRYPTO}; setup 8e-6 s: parameter, reconstruction of an ECALL/OCALL "
        "of about 8-10 us (papers/tee.md section 5, recall)"
    ),
)

TDX = EnclaveSpec(
    name="tdx",
    granularity_bytes=64,
    metadata_bytes_per_unit=3.5,  # 28-bit MAC per 64 B line (cryptographic integrity)
    crypto_throughput_Bps=3e9,
    setup_latency_s=0.0,
    reencrypt_on_cross=True,
    source=(
        "64 B line, 28-bit MAC: calibration/README.md A.5 (Intel TDX, TME-MK with "
        f"cryptographic integrity). {_SOFTWARE_CRYPTO}; setup 0: parameter, "
        "reconstruction (the GPU bounce-buffer toll is in h100-cc)"
    ),
)

H100_CC = EnclaveSpec(
    name="h100-cc",
    granularity_bytes=0,
    metadata_bytes_per_unit=16.0,  # one 128-bit AES-GCM tag per transfer
    crypto_throughput_Bps=2e9,
    setup_latency_s=2e-4,
    reencrypt_on_cross=True,
    source=(
        "bounce buffers in shared memory, AES-GCM-256, CPU encrypts: calibration/README.md "
        "A.5 (NVIDIA H100 CC), which says no clean bounce-buffer GB/s figure exists. "
        "Crypto 2e9 B/s: parameter, reconstruction (CPU-bound AES-GCM). Setup 2e-4 s per "
        "transfer: parameter, reconstruction of 'small copies about 44x slower' (Yin & "
        "Wang, arXiv 2606.23969) over a ~5 us plain copy. 16 B tag per transfer: "
        "parameter, reconstruction (the driver's chunking is not modelled)"
    ),
)

TENSOR = EnclaveSpec(
    name="tensor",
    granularity_bytes=0,
    metadata_bytes_per_unit=64.0,  # one record (version number + MAC) per tensor
    crypto_throughput_Bps=1e12,
    setup_latency_s=0.0,
    reencrypt_on_cross=False,
    source=(
        "tensor-granularity VN and MAC, direct ciphertext transfer between enclaves: "
        "TensorTEE (ASPLOS'24), papers/tee.md section 1.2. 64 B per tensor and crypto "
        "1e12 B/s (an engine that keeps up with the link): parameter, reconstruction"
    ),
)

PRESETS: dict[str, EnclaveSpec] = {s.name: s for s in (SGX_MEE, TDX, H100_CC, TENSOR)}


def enclave_preset(name: str) -> EnclaveSpec:
    """The preset named ``name`` (``sgx-mee``, ``tdx``, ``h100-cc``, ``tensor``)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown enclave preset {name!r}; known: {sorted(PRESETS)}") from None


def protection_units(spec: EnclaveSpec, nbytes: int) -> int:
    """Protected units covering ``nbytes`` (lines, or 1 per tensor when granularity is 0)."""
    if nbytes < 0:
        raise ValueError(f"negative size {nbytes}")
    if nbytes == 0:
        return 0
    if spec.granularity_bytes == 0:
        return 1
    return -(-nbytes // spec.granularity_bytes)


def metadata_bytes(spec: EnclaveSpec, nbytes: int) -> int:
    """Metadata bytes that protect ``nbytes`` (also the capacity they take in memory)."""
    return math.ceil(protection_units(spec, nbytes) * spec.metadata_bytes_per_unit)


def protected_bytes(spec: EnclaveSpec | None, nbytes: int) -> int:
    """Memory traffic of accessing ``nbytes`` securely: data plus metadata."""
    if spec is None:
        return nbytes
    return nbytes + metadata_bytes(spec, nbytes)


def secure_access_time_s(spec: EnclaveSpec | None, nbytes: int, mem_bandwidth_Bps: float) -> float:
    """Time to stream ``nbytes`` of protected memory at ``mem_bandwidth_Bps``."""
    if mem_bandwidth_Bps <= 0:
        raise ValueError(f"memory bandwidth must be > 0, got {mem_bandwidth_Bps}")
    return protected_bytes(spec, nbytes) / mem_bandwidth_Bps


def crossing_time_s(
    src: Enclave | EnclaveSpec | None, dst: Enclave | EnclaveSpec | None, nbytes: int
) -> float:
    """Re-encryption time when ``nbytes`` move from ``src`` to ``dst`` (module doc).

    An :class:`EnclaveSpec` stands for the enclave named after it, so passing one spec
    as both ends means the same enclave (cost 0); use :class:`Enclave` to tell apart
    two enclaves of one design (two GPUs).
    """
    if nbytes < 0:
        raise ValueError(f"negative size {nbytes}")
    a, b = _as_enclave(src), _as_enclave(dst)
    if a is None and b is None:
        return 0.0
    if a is not None and b is not None:
        if a.name == b.name:
            return 0.0
        if not (a.spec.reencrypt_on_cross or b.spec.reencrypt_on_cross):
            return 0.0  # shared granularity and keys: ciphertext moves as is
    passes = 2 if (a is not None and b is not None) else 1
    return sum(_side_time_s(e.spec, nbytes, passes) for e in (a, b) if e is not None)


def _side_time_s(spec: EnclaveSpec, nbytes: int, passes: int) -> float:
    return spec.setup_latency_s + passes * nbytes / spec.crypto_throughput_Bps


def _as_enclave(end: Enclave | EnclaveSpec | None) -> Enclave | None:
    if isinstance(end, EnclaveSpec):
        return Enclave(end.name, end)
    return end
