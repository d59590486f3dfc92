"""SlimPipe (Li et al., arXiv 2504.14519): 1F1B over uniform sequence slices.

Each microbatch's sequence is cut into n slices; forwards run slices in order (slice j
attends to the KV of slices < j), backwards in reverse order (dK/dV accumulate into earlier
slices). Stage i warms up with n + p - i - 2 forwards, then alternates. Bubble about
(p-1)/(m n + p - 1). The mechanism prices slice j's causal attention at (2j-1)/n^2 of the
sequence's. Not modelled: the paper's attention-context exchange that rebalances slice
costs across devices, its interleaved variant and activation offload.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from schedulers.training._orders import one_f_one_b
from schedulers.training.view import PipelineView, Schedule, Unit
from simulator.registry import policies


class SlimPipeParams(BaseModel):
    """Slices per sequence (the paper tunes it; 16 is this reconstruction's default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    slices: int = Field(16, ge=1)


@policies.register("training.schedule", "slimpipe")
class SlimPipe:
    """Sliced 1F1B."""

    Params = SlimPipeParams

    def __init__(self, params: SlimPipeParams, rng: np.random.Generator) -> None:
        self.params = params

    def schedule(self, view: PipelineView) -> Schedule:
        """Forward slices in order, backward slices in reverse, per microbatch."""
        p, m, n = view.stages, view.micro_batches, self.params.slices
        fwd = [Unit("F", mb, 0, j) for mb in range(m) for j in range(n)]
        bwd = [Unit("B", mb, 0, j) for mb in range(m) for j in reversed(range(n))]
        order = tuple(one_f_one_b(fwd, bwd, n + p - i - 2) for i in range(p))
        return Schedule(order, slices=n)
