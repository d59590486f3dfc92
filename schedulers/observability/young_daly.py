"""Checkpoint interval from Young (1974) or Daly (2006), given the job's MTBF and cost.

Young: ``tau = sqrt(2 C M)``; Daly's higher-order refinement
``tau = sqrt(2CM) [1 + sqrt(C/2M)/3 + (C/2M)/9] - C`` for C < 2M (else M). C is the
checkpoint write time, M the job MTBF that the mechanism expects (1 / (N x rate)).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.observability.view import CheckpointView, daly_interval_s, young_interval_s


class YoungDalyParams(BaseModel):
    """``formula``: young or daly; ``scale`` multiplies the optimum (for sensitivity sweeps)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    formula: Literal["young", "daly"] = Field(
        default="daly",
        description="Optimum interval formula: Young's sqrt(2 C M) "
        "or Daly's higher-order refinement.",
    )
    scale: float = Field(
        default=1.0,
        gt=0,
        description="Multiplier of the optimum interval (for sensitivity sweeps).",
    )


@policies.register("observability.checkpoint", "young-daly")
class YoungDaly:
    """Checkpoint at the Young or Daly optimum for the expected MTBF and checkpoint cost."""

    Params = YoungDalyParams

    def __init__(self, params: YoungDalyParams, rng: np.random.Generator) -> None:
        self.params = params

    def interval_s(self, view: CheckpointView) -> float:
        """The optimum interval of work between checkpoints, in seconds."""
        f = young_interval_s if self.params.formula == "young" else daly_interval_s
        return self.params.scale * f(view.checkpoint_s, view.mtbf_s)
