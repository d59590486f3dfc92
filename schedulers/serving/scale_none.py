"""Static deployment: no scaling (the default)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import ScaleDecision, ScaleView


class NoScalingParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("serving.scaling", "none")
class NoScaling:
    """The deployment chosen at start stays provisioned for the whole run (vLLM,
    DistServe and Cauchy's static evaluation); the mechanism never wakes it."""

    Params = NoScalingParams
    period_s: float | None = None
    window_s = 60.0

    def __init__(self, params: NoScalingParams, rng: np.random.Generator) -> None:
        pass

    def decide(self, view: ScaleView) -> ScaleDecision:
        """Nothing to change."""
        return ScaleDecision()
