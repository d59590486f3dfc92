"""No packing: every job runs alone on its GPUs (FIFO, SRTF, EDF, Tiresias, Gavel)."""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.cluster._common import NoParams
from hetsim.simulator.registry import policies
from hetsim.workloads.cluster.view import PackingView


@policies.register("cluster.packing", "none")
class NoPacking:
    """Never interleave: each job gets its GPUs exclusively."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params

    def pack(self, view: PackingView) -> list[tuple[int, ...]]:
        """No merges."""
        return []
