"""Consolidated first-fit allocation (heterogeneity-blind), as in FIFO/Tiresias/Muri."""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.cluster._common import NoParams, greedy_allocate
from hetsim.simulator.registry import policies
from hetsim.workloads.cluster.view import AllocationView


@policies.register("cluster.allocation", "first-fit")
class FirstFitAllocation:
    """Each group in priority order takes the first allowed GPU type (inventory order)
    with enough free GPUs; the mechanism then packs it onto the fewest nodes."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params

    def allocate(self, view: AllocationView) -> list[int | None]:
        """Type index per group, or None."""
        return greedy_allocate(view.groups, view.free_gpus, lambda g, ok: ok[0])
