"""No prefetching: experts are only loaded when a layer needs them."""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.moe._params import NoParams
from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import PrefetchView


@policies.register("moe.prefetch", "none")
class NoPrefetch:
    """Never copies ahead (on-demand loading, LRU, kTransformers, llama.cpp)."""

    Params = NoParams
    lookahead_layers = 0

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params

    def prefetch(self, view: PrefetchView) -> tuple[tuple[int, int], ...]:
        """Nothing."""
        return ()
