"""ZB-H1 (Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024).

1F1B with each backward split into B (activation gradients, which the previous stage
waits for) and W (weight gradients, which nothing downstream waits for). Stage i of p
warms up with p-i-1 forwards as in 1F1B and postpones its weight gradients by i units, so
they fill the cool-down bubble; the activations of a micro-batch are held until its W,
so every stage holds at most p micro-batches, the peak of 1F1B's first stage. With
forward, B and W times F, B, W the bubble is (p-1)(F+B-W) against 1F1B's (p-1)(F+B+W)
(paper Sec. 3.1; m >= p): a third of it when F = B = W.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.schedulers.training._orders import zb_h1
from hetsim.simulator.registry import policies
from hetsim.workloads.training.view import PipelineView, Schedule, Unit


class ZeroBubbleH1Params(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("training.schedule", "zb-h1")
class ZeroBubbleH1:
    """Zero-bubble pipeline schedule ZB-H1 (1F1B's memory, a third of its bubble)."""

    Params = ZeroBubbleH1Params

    def __init__(self, params: ZeroBubbleH1Params, rng: np.random.Generator) -> None:
        self.params = params

    def schedule(self, view: PipelineView) -> Schedule:
        """Warm-up p-i-1 forwards and W delay i on stage i."""
        p, m = view.stages, view.micro_batches
        fwd = [Unit("F", j) for j in range(m)]
        bwd = [Unit("B", j) for j in range(m)]
        wgt = [Unit("W", j) for j in range(m)]
        return Schedule(tuple(zb_h1(fwd, bwd, wgt, p - i - 1, i) for i in range(p)))
