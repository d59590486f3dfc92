"""llama.cpp-style static layer split (baseline of HybriMoE, DAC'25).

llama.cpp offloads whole layers (``-ngl``): a layer whose experts are all on the GPU
(the ``static-layers`` cache policy fills the first layers completely) runs entirely on
the GPU; every other layer runs entirely on the CPU, attention and shared experts
included. Simplification: the KV cache and attention weights of CPU layers are still
accounted in GPU memory.
"""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.moe._params import NoParams
from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import Placement, PlacementView


@policies.register("moe.placement", "llamacpp")
class LlamaCppPlacement:
    """Whole layer on the GPU if it is resident, else whole layer on the CPU."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params

    def place(self, view: PlacementView) -> Placement:
        """All experts of the layer on one device."""
        ids = tuple(int(e) for e in view.experts)
        if view.layer_resident:
            return Placement(gpu=ids, cpu=())
        return Placement(gpu=(), cpu=ids, dense_on_cpu=True)
