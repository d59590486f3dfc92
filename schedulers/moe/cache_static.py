"""Static expert placement: the warm-start set (most frequent experts of the warm-up
profile, uniform slots per layer) stays on the GPU for the whole run; nothing is
admitted or evicted. With ``placement: ktransformers`` this is kTransformers' fixed
mapping of some experts to the GPU."""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.moe._params import NoParams
from hetsim.schedulers.moe._slots import uniform_slots
from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import AllocationView, CacheDecision, CacheView


@policies.register("moe.cache", "static")
class StaticCache:
    """Pinned experts, uniform slots per layer."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params

    def allocate(self, view: AllocationView) -> tuple[int, ...]:
        """Uniform slots per layer."""
        return uniform_slots(view)

    def observe(self, layer: int, probs: np.ndarray, selected: np.ndarray, step: int) -> None:
        """Nothing to learn."""

    def admit(self, view: CacheView) -> CacheDecision:
        """Admit nothing: the placement is fixed."""
        return CacheDecision((), ())
