"""Rebalance on rescale: spread samples evenly over workers (Kale's data shuffler)."""

from __future__ import annotations

import heapq
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.limits import Seconds
from hetsim.simulator.registry import policies
from hetsim.workloads.elastic.view import BalanceView


class RebalanceParams(BaseModel):
    """``granularity``: reshuffle single samples (even split) or whole partitions (LPT);
    ``shuffle_s``: extra downtime of each rescale to move data (assumption)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    granularity: Literal["sample", "partition"] = Field(
        default="sample",
        description="Reshuffle single samples (an even split over "
        "workers) or whole partitions (LPT placement).",
    )
    shuffle_s: Seconds = Field(
        default=5.0,
        description="Extra downtime of each rescale to move data, in seconds (assumption).",
    )


@policies.register("elastic.balance", "rebalance")
class Rebalance:
    """Kale's data shuffler rebalances uneven samples across workers (abstract); how is
    not public. ``sample``: the shuffler splits every partition's samples evenly, so each
    of n workers reads 1/n. ``partition``: longest-processing-time-first placement of
    whole partitions, each to the least loaded worker (Graham: the most loaded worker
    carries at most 4/3 - 1/(3n) of the optimum). Both are reconstructions."""

    Params = RebalanceParams

    def __init__(self, params: RebalanceParams, rng: np.random.Generator) -> None:
        self.params = params
        self.extra_downtime_s = params.shuffle_s

    def assign(self, view: BalanceView) -> np.ndarray:
        """Each worker's share of the stream."""
        n = view.replicas
        if self.params.granularity == "sample":
            return np.full(n, 1.0 / n)
        shares = view.partition_share
        heap = [(0.0, w) for w in range(n)]
        loads = np.zeros(n)
        for p in np.argsort(-shares, kind="stable").tolist():
            load, w = heapq.heappop(heap)
            loads[w] = load + float(shares[p])
            heapq.heappush(heap, (loads[w], w))
        return loads
