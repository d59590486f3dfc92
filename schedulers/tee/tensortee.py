"""TensorTEE (Han et al., ASPLOS'24): one tensor granularity across CPU and NPU enclaves.

Tensor streams get one version number and one MAC per tensor (TenAnalyzer on the CPU,
tensor MACs with delayed verification on the NPU), so the off-chip metadata traffic
and MAC storage disappear; with one granularity and shared keys, ciphertext moves
directly between enclaves (no re-encryption); verification is exposed only when a
tensor is committed (leaves the NPU). Streams that are not tensors keep the
cacheline presets, and so do the parts of tensor streams the hardware does not detect
(the mechanism models detection: :mod:`workloads.tee.collab_costs`).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.tee.view import Preset, ProtectionPlan, ProtectionView


class TensorTEEParams(BaseModel):
    """``fallback_*``: presets for non-tensor streams of each side."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    fallback_cpu: Preset = Field(
        default="sgx-mee",
        description="Enclave preset of the CPU side's non-tensor "
        "streams and undetected tensor parts.",
    )
    fallback_accel: Preset = Field(
        default="tnpu-like",
        description="Enclave preset of the accelerator side's "
        "non-tensor streams and undetected tensor parts.",
    )


@policies.register("tee.protection", "tensortee")
class TensorTEEProtection:
    """Tensor granularity for tensor streams, direct transfer, delayed verification."""

    Params = TensorTEEParams

    def __init__(self, params: TensorTEEParams, rng: np.random.Generator) -> None:
        self.params = params

    def plan(self, view: ProtectionView) -> ProtectionPlan:
        """``tensor`` for every tensor stream, the side's fallback otherwise."""
        p = self.params
        per = tuple(
            "tensor" if s.is_tensor else (p.fallback_cpu if s.side == "cpu" else p.fallback_accel)
            for s in view.streams
        )
        return ProtectionPlan(
            "tensor", "tensor", per, "direct", "delayed", p.fallback_cpu, p.fallback_accel
        )
