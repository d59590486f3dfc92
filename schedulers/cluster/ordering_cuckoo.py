"""Cuckoo's deadline-aware ordering: least slack among still-feasible deadline jobs.

RECONSTRUCTION (only Cuckoo's abstract is public, see ../shared/papers/cluster.md §3):
deadline jobs that can still finish in time on their fastest allowed type come first,
least slack (deadline - now - best remaining time) first; then every other job
(best-effort, or already unable to meet its deadline) by remaining GPU-time (Muri-S).
"""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.cluster._common import NoParams
from hetsim.simulator.registry import policies
from hetsim.workloads.cluster.view import OrderingView


@policies.register("cluster.ordering", "cuckoo")
class CuckooOrdering:
    """Feasible deadline jobs by least slack, then the rest by remaining GPU-time."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params

    def order(self, view: OrderingView) -> np.ndarray:
        """Positions sorted by (class, key, submit_s, job)."""
        slack = view.deadline_s - view.now_s - view.best_remaining_s
        feasible = np.isfinite(view.deadline_s) & (slack >= 0)
        key = np.where(feasible, slack, view.remaining_solo_s * view.gpus)
        return np.lexsort((view.job, view.submit_s, key, ~feasible))
