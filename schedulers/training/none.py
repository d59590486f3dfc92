"""No memory optimisation: every activation stays on the device; an overflow fails the run."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.training.view import StepDecision, StepReport


class NoneParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("training.swap", "none")
class NoSwap:
    """Baseline: keep everything resident (plain PyTorch eager training)."""

    Params = NoneParams

    def __init__(self, params: NoneParams, rng: np.random.Generator) -> None:
        self.params = params

    def decide(self, report: StepReport | None) -> StepDecision:
        """The empty plan, never profiling."""
        return StepDecision()
