"""No expert cache: every GPU expert is copied on demand into a staging buffer and
dropped after use (the on-demand loading baseline)."""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.moe._params import NoParams
from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import AllocationView, CacheDecision, CacheView


@policies.register("moe.cache", "none")
class NoCache:
    """Zero slots everywhere; nothing is ever admitted."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params

    def allocate(self, view: AllocationView) -> tuple[int, ...]:
        """No slots."""
        return (0,) * view.layers

    def observe(self, layer: int, probs: np.ndarray, selected: np.ndarray, step: int) -> None:
        """Nothing to learn."""

    def admit(self, view: CacheView) -> CacheDecision:
        """Admit nothing."""
        return CacheDecision((), ())
