"""Consolidated first-fit allocation (heterogeneity-blind), as in FIFO/Tiresias/Muri."""

from __future__ import annotations

import numpy as np

from schedulers.cluster._common import NoParams
from schedulers.cluster.view import AllocationView
from simulator.registry import policies


@policies.register("cluster.allocation", "first-fit")
class FirstFitAllocation:
    """Each group in priority order takes the first allowed GPU type (inventory order)
    with enough free GPUs; the mechanism then packs it onto the fewest nodes."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params

    def allocate(self, view: AllocationView) -> list[int | None]:
        """Type index per group, or None."""
        free = list(view.free_gpus)
        out: list[int | None] = []
        for g in view.groups:
            t = next((t for t in range(len(free)) if g.allowed[t] and free[t] >= g.gpus), None)
            if t is not None:
                free[t] -= g.gpus
            out.append(t)
        return out
