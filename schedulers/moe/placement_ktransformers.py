"""kTransformers-style fixed mapping (baseline of HybriMoE, DAC'25).

Attention and shared experts on the GPU (the mechanism's default), routed experts on the
CPU, except those placed on the GPU ahead of time (the ``static`` cache policy's
warm-start set). Nothing is ever copied during inference.
"""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.moe._params import NoParams
from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import Placement, PlacementView


@policies.register("moe.placement", "ktransformers")
class KTransformersPlacement:
    """Cached experts on the GPU, every other routed expert on the CPU."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params

    def place(self, view: PlacementView) -> Placement:
        """GPU: resident experts; CPU: the rest, by ascending load."""
        n = len(view.experts)
        on_gpu = [int(view.experts[i]) for i in range(n) if view.cached[i]]
        rest = sorted((i for i in range(n) if not view.cached[i]), key=lambda i: (view.loads[i], i))
        return Placement(gpu=tuple(on_gpu), cpu=tuple(int(view.experts[i]) for i in rest))
