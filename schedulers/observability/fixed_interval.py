"""Checkpoint interval: a fixed amount of work between checkpoints (the common default)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.limits import PositiveSeconds
from hetsim.simulator.registry import policies
from hetsim.workloads.observability.view import CheckpointView


class FixedIntervalParams(BaseModel):
    """``interval_s``: seconds of training between two checkpoints."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    interval_s: PositiveSeconds = Field(
        default=3600.0, gt=0, description="Seconds of training work between two checkpoints."
    )


@policies.register("observability.checkpoint", "fixed")
class FixedInterval:
    """Checkpoint every ``interval_s`` seconds of work, whatever the failure rate."""

    Params = FixedIntervalParams

    def __init__(self, params: FixedIntervalParams, rng: np.random.Generator) -> None:
        self.params = params

    def interval_s(self, view: CheckpointView) -> float:
        """The configured interval."""
        return self.params.interval_s
