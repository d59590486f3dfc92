"""HybriMoE (DAC'25) intra-layer hybrid CPU/GPU/PCIe scheduling.

Runs the greedy simulation of :mod:`schedulers.moe.hss` on the mechanism's per-expert
estimates (GPU time and CPU time at each expert's load, the PCIe copy time, when the
GPU, CPU and copy engine are free, when prefetched experts arrive) and places each
expert where the simulation put it. Uncached experts the simulation gives the GPU are
copied over PCIe in GPU order.
"""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.moe._params import NoParams
from hetsim.schedulers.moe.hss import hss
from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import Placement, PlacementView


@policies.register("moe.placement", "hybrimoe")
class HybriMoEPlacement:
    """HybriMoE: greedy split minimising the layer's CPU/GPU makespan."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params

    def place(self, view: PlacementView) -> Placement:
        """The HSS assignment of this layer's experts."""
        r = hss(
            view.gpu_s,
            view.cpu_s,
            view.cached,
            view.ready_s,
            view.loads,
            view.copy_s,
            view.gpu_free_s,
            view.cpu_free_s,
            view.pcie_free_s,
            view.cpu_first_s,
        )
        at = view.experts.__getitem__
        return Placement(tuple(map(at, r.gpu)), tuple(map(at, r.cpu)))
