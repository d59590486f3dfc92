"""FIFO ordering: jobs in submission order (the classic baseline)."""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.cluster._common import NoParams
from hetsim.simulator.registry import policies
from hetsim.workloads.cluster.view import OrderingView


@policies.register("cluster.ordering", "fifo")
class FifoOrdering:
    """First come, first served: earliest submit time first, ties by job id."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params

    def order(self, view: OrderingView) -> np.ndarray:
        """Positions sorted by (submit_s, job)."""
        return np.lexsort((view.job, view.submit_s))
