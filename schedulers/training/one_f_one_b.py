"""1F1B (PipeDream-Flush; Narayanan et al., SC'21, Megatron's default schedule).

Stage i runs min(p-i-1, m) warm-up forwards, then alternates one forward and one backward,
then drains. Same bubble as GPipe, (p-1)/(m+p-1), but stage i holds at most p-i microbatches.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.schedulers.training._orders import one_f_one_b
from hetsim.simulator.registry import policies
from hetsim.workloads.training.view import PipelineView, Schedule, Unit


class OneFOneBParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("training.schedule", "1f1b")
class OneFOneB:
    """Non-interleaved one-forward-one-backward."""

    Params = OneFOneBParams

    def __init__(self, params: OneFOneBParams, rng: np.random.Generator) -> None:
        self.params = params

    def schedule(self, view: PipelineView) -> Schedule:
        """Warm-up p-i-1 forwards on stage i."""
        p, m = view.stages, view.micro_batches
        fwd = [Unit("F", i) for i in range(m)]
        bwd = [Unit("B", i) for i in range(m)]
        return Schedule(tuple(one_f_one_b(fwd, bwd, p - i - 1) for i in range(p)))
