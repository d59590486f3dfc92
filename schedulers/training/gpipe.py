"""GPipe (Huang et al., NeurIPS'19): all forwards of the batch, then all backwards.

Every stage holds all m microbatches' activations at the turn; bubble (p-1)/(m+p-1).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.training.view import PipelineView, Schedule, Unit


class GPipeParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("training.schedule", "gpipe")
class GPipe:
    """Fill-and-drain: F of every microbatch, then B of every microbatch."""

    Params = GPipeParams

    def __init__(self, params: GPipeParams, rng: np.random.Generator) -> None:
        self.params = params

    def schedule(self, view: PipelineView) -> Schedule:
        """Same order on every stage."""
        m = view.micro_batches
        order = tuple(Unit("F", i) for i in range(m)) + tuple(Unit("B", i) for i in range(m))
        return Schedule((order,) * view.stages)
