"""H100-CC-like GPU confidential computing (calibration/README.md A.5).

A CPU TEE (TDX: 28-bit MAC per 64 B line when cryptographic integrity is on) runs the
driver; GPU memory is access-controlled, not encrypted; every CPU-GPU transfer goes
through a bounce buffer in shared memory, AES-GCM encrypted by the CPU with a
per-transfer setup toll and decrypted by the GPU copy engine. Simplified: the driver's
chunking and the async-copy serialisation are folded into the per-transfer setup.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.tee.view import Preset, ProtectionPlan, ProtectionView


class H100CCParams(BaseModel):
    """``cpu_enclave``: the CPU TEE around the driver (``tdx``, or None for SEV-like
    integrity by ownership checks only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    cpu_enclave: Preset | None = Field(
        default="tdx",
        description="CPU TEE preset around the driver (tdx; null: "
        "SEV-like integrity by ownership checks only).",
    )


@policies.register("tee.protection", "h100-cc")
class H100CCProtection:
    """TDX on the CPU, protected-region GPU memory, bounce-buffer transfers."""

    Params = H100CCParams

    def __init__(self, params: H100CCParams, rng: np.random.Generator) -> None:
        self.params = params

    def plan(self, view: ProtectionView) -> ProtectionPlan:
        """CPU streams under the CPU TEE, accelerator streams under ``h100-cc``."""
        cpu = self.params.cpu_enclave
        per = tuple(cpu if s.side == "cpu" else "h100-cc" for s in view.streams)
        return ProtectionPlan(cpu, "h100-cc", per, "bounce", "none")
