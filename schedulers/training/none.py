"""No memory optimisation: every activation stays on the device; an overflow fails the run,
or, with ``forced_swap_on_oom``, is left to the runtime's fallback (no plan: the eager
allocator's forced swap, ``workload.oom_fallback``)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.training.view import StepDecision, StepReport, SwapPlan


class NoneParams(BaseModel):
    """Whether an allocation that does not fit goes to the runtime's fallback."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    forced_swap_on_oom: bool = Field(
        False, description="no plan, the runtime's OOM fallback (workload.oom_fallback)"
    )


@policies.register("training.swap", "none")
class NoSwap:
    """Baseline: keep everything resident (plain PyTorch eager training)."""

    Params = NoneParams

    def __init__(self, params: NoneParams, rng: np.random.Generator) -> None:
        self.params = params

    def decide(self, report: StepReport | None) -> StepDecision:
        """The empty plan (forced swaps on OOM if so configured), never profiling."""
        return StepDecision(SwapPlan(forced_swap_on_oom=self.params.forced_swap_on_oom))
