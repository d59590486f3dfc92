"""Gavel-like heterogeneity-aware allocation (OSDI'20), greedy and without the LP.

SIMPLIFICATION: Gavel solves an LP over time fractions of each job on each GPU type
(max-min fairness of normalised effective throughput) and dispatches in rounds. Here
each group, in the ordering policy's priority order, takes the free GPU type on which
its normalised throughput (fastest-type iteration time / this type's) is highest, i.e.
the type that serves it best among those with room; no time-sharing across types.
"""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.cluster._common import NoParams, greedy_allocate
from hetsim.simulator.registry import policies
from hetsim.workloads.cluster.view import AllocationView


@policies.register("cluster.allocation", "gavel-like")
class GavelLikeAllocation:
    """Each group takes its highest-throughput GPU type that has room."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params

    def allocate(self, view: AllocationView) -> list[int | None]:
        """Type index per group, or None."""
        return greedy_allocate(
            view.groups, view.free_gpus, lambda g, ok: min(ok, key=lambda t: (g.iter_s[t], t))
        )
