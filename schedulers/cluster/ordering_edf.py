"""Earliest deadline first; best-effort jobs (no deadline) after all deadline jobs."""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.cluster._common import NoParams
from hetsim.simulator.registry import policies
from hetsim.workloads.cluster.view import OrderingView


@policies.register("cluster.ordering", "edf")
class EdfOrdering:
    """Earliest absolute deadline first; best-effort jobs FIFO after them."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params

    def order(self, view: OrderingView) -> np.ndarray:
        """Positions sorted by (deadline_s, submit_s, job); inf deadlines last."""
        return np.lexsort((view.job, view.submit_s, view.deadline_s))
