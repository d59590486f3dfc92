"""GPU-centric placement: every activated expert runs on the GPU (on-demand loading,
LRU caching, Mixtral-offloading and AdapMoE all compute experts only on the GPU).

Cached experts run first (earliest-ready first), then the uncached ones, copied over
PCIe in descending order of load so the GPU can start the heaviest one first.
"""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.moe._params import NoParams
from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import Placement, PlacementView


@policies.register("moe.placement", "gpu")
class GpuPlacement:
    """All experts on the GPU; uncached ones are copied on demand."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params

    def place(self, view: PlacementView) -> Placement:
        """Cached experts by ready time, then uncached ones by load (descending)."""
        n = len(view.experts)
        hot = sorted((i for i in range(n) if view.cached[i]), key=lambda i: (view.ready_s[i], i))
        cold = sorted(
            (i for i in range(n) if not view.cached[i]), key=lambda i: (-view.loads[i], i)
        )
        return Placement(gpu=tuple(int(view.experts[i]) for i in hot + cold), cpu=())
