"""Tiresias (NSDI'19) discretised two-dimensional least-attained-service ordering."""

from __future__ import annotations

import itertools

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from schedulers.cluster.view import OrderingView
from simulator.registry import policies


class TiresiasParams(BaseModel):
    """Queue thresholds in attained GPU-seconds (Muri's Tiresias code: 3250/7200/18000)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    thresholds_gpu_s: list[float] = Field(default_factory=lambda: [3250.0, 7200.0, 18000.0])

    @field_validator("thresholds_gpu_s")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if any(b <= a for a, b in itertools.pairwise(v)) or any(x <= 0 for x in v):
            raise ValueError("thresholds must be positive and strictly increasing")
        return v


@policies.register("cluster.ordering", "tiresias")
class TiresiasOrdering:
    """2D-LAS: a job's queue is the number of thresholds its attained GPU-service reached.

    Lower queues first; FIFO (submit time) within a queue. A job moves down exactly
    when attained GPU-seconds reach a threshold. Simplified: no starvation promotion
    and no placement-consolidation profiling (Tiresias's other components).
    """

    Params = TiresiasParams

    def __init__(self, params: TiresiasParams, rng: np.random.Generator) -> None:
        self.params = params
        self._thr = np.array(params.thresholds_gpu_s)

    def queue_of(self, attained_gpu_s: np.ndarray) -> np.ndarray:
        """Queue index (0 = highest priority) of each attained service."""
        return np.searchsorted(self._thr, attained_gpu_s, side="right")

    def order(self, view: OrderingView) -> np.ndarray:
        """Positions sorted by (queue, submit_s, job)."""
        return np.lexsort((view.job, view.submit_s, self.queue_of(view.attained_gpu_s)))
