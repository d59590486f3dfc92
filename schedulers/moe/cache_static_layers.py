"""llama.cpp-style static layer split: the slot budget buys whole layers (the first
``total // experts`` layers keep all their experts on the GPU), pinned for the run."""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.moe._params import NoParams
from hetsim.schedulers.moe._slots import whole_layer_slots
from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import AllocationView, CacheDecision, CacheView


@policies.register("moe.cache", "static-layers")
class StaticLayersCache:
    """Whole layers on the GPU; nothing admitted or evicted."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params

    def allocate(self, view: AllocationView) -> tuple[int, ...]:
        """All slots of the first layers."""
        return whole_layer_slots(view)

    def observe(self, layer: int, probs: np.ndarray, selected: np.ndarray, step: int) -> None:
        """Nothing to learn."""

    def admit(self, view: CacheView) -> CacheDecision:
        """Admit nothing."""
        return CacheDecision((), ())
