"""A placement given in full by the scenario (llama.cpp ``-ngl``/``-nkvo``, ZeRO-Inference,
or any hand-chosen FlexGen policy vector)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.offload.view import OffloadPlan, OffloadView


class FixedParams(BaseModel):
    """The fields of :class:`OffloadPlan`; ``cpu_layers: -1`` means every layer (CPU-only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    weights_gpu: float = Field(1.0, ge=0, le=1)
    weights_cpu: float = Field(0.0, ge=0, le=1)
    cpu_layers: int = Field(0, ge=-1)
    kv_gpu: float = Field(1.0, ge=0, le=1)
    attention_on_cpu: bool = False
    overlap: bool = True
    gpu_batches: int = Field(1, ge=1)
    pinned: bool = True
    kv_disk: float = Field(0.0, ge=0, le=1, description="KV fraction on the disk tier (cd)")


@policies.register("offload.placement", "fixed")
class FixedPlacement:
    """The plan the scenario gives (default: everything resident on the GPU)."""

    Params = FixedParams

    def __init__(self, params: FixedParams, rng: np.random.Generator) -> None:
        self.params = params

    def place(self, view: OffloadView) -> OffloadPlan:
        """The configured plan (``cpu_layers: -1`` -> all layers)."""
        d = self.params.model_dump()
        if d["cpu_layers"] == -1:
            d["cpu_layers"] = view.layers
        return OffloadPlan(**d)
