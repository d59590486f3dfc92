"""Cacheline-granularity heterogeneous TEE: TensorTEE's baseline (ASPLOS'24, section 2).

CPU side SGX/MEE-like (64 B lines, counter + MAC + integrity tree), NPU side
TNPU/MGX-like (MAC per 64 B line stored off-chip, version numbers on chip, verification
synchronous per tile), and transfers re-encrypted through non-secure memory with a
session key. Simplified: the presets stand for the designs (papers/tee.md 1.1); which
design the paper's baseline used exactly is not known from the abstract.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.tee.view import Preset, ProtectionPlan, ProtectionView, Verify


class CachelineParams(BaseModel):
    """Presets of each side (``devices.enclave`` or ``tnpu-like``) and verification mode."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    cpu_enclave: Preset = Field(
        default="sgx-mee",
        description="Enclave preset of the CPU side's streams (SGX/MEE-like by default).",
    )
    accel_enclave: Preset = Field(
        default="tnpu-like",
        description="Enclave preset of the accelerator side's streams (TNPU/MGX-like by default).",
    )
    verify: Verify = Field(
        default="sync",
        description="Accelerator integrity verification: sync (a "
        "stall per tile), delayed, or none.",
    )


@policies.register("tee.protection", "cacheline")
class CachelineProtection:
    """Cacheline TEE on both sides, re-encryption on every CPU-NPU transfer (the baseline)."""

    Params = CachelineParams

    def __init__(self, params: CachelineParams, rng: np.random.Generator) -> None:
        self.params = params

    def plan(self, view: ProtectionView) -> ProtectionPlan:
        """Each stream takes its side's cacheline preset."""
        p = self.params
        per = tuple(p.cpu_enclave if s.side == "cpu" else p.accel_enclave for s in view.streams)
        return ProtectionPlan(p.cpu_enclave, p.accel_enclave, per, "reencrypt", p.verify)
