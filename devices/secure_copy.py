"""Host<->GPU copies under GPU confidential computing (H100 CC and later).

In CC mode the GPU cannot DMA from guest memory: the driver encrypts each transfer on
the CPU (AES-GCM) into a shared bounce buffer, and the GPU decrypts it as it pulls the
data in (calibration/README.md A.5). The CPU encryption is pipelined with the DMA, so a
copy of ``n`` bytes that takes ``plain_s`` without CC takes

    max(plain_s, setup + n / crypto_throughput)     (devices.enclave.crossing_time_s)

per transfer: the slower of the link and the CPU's AES rate, plus the per-transfer toll.
The crypto rate is the enclave preset's (``h100-cc``: a parameter, reconstruction) or a
scenario's value, e.g. ``threads x per-core AES-GCM rate`` when the driver encrypts on
several threads. Only :func:`devices.enclave.crossing_time_s` is used, so a richer
enclave model (issue 19) changes these copies through the same function.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hetsim.devices.enclave import EnclaveSpec, crossing_time_s, enclave_preset


@dataclass(frozen=True)
class SecureCopy:
    """The encrypted bounce-buffer path of one GPU in CC mode."""

    spec: EnclaveSpec

    @classmethod
    def preset(
        cls, name: str = "h100-cc", crypto_throughput_Bps: float | None = None,
        setup_latency_s: float | None = None,
    ) -> SecureCopy:  # fmt: skip
        """The named enclave preset, with its crypto rate / setup toll overridden."""
        spec = enclave_preset(name)
        if crypto_throughput_Bps is not None:
            spec = dataclasses.replace(spec, crypto_throughput_Bps=crypto_throughput_Bps)
        if setup_latency_s is not None:
            spec = dataclasses.replace(spec, setup_latency_s=setup_latency_s)
        return cls(spec)

    def copy_time_s(self, plain_s: float, nbytes: int) -> float:
        """Seconds of a copy that takes ``plain_s`` in the clear (module doc)."""
        if nbytes <= 0:
            return plain_s
        return max(plain_s, crossing_time_s(None, self.spec, nbytes))
