"""Tiresias (NSDI'19) discretised two-dimensional least-attained-service ordering."""

from __future__ import annotations

import itertools

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from hetsim.simulator.limits import Seconds
from hetsim.simulator.registry import policies
from hetsim.workloads.cluster.view import OrderingView


class TiresiasParams(BaseModel):
    """Queue thresholds in attained GPU-seconds (Muri's Tiresias code: 3250/7200/18000) and
    the starvation limit (Tiresias's STARVELIMIT; None: no promotion, as Muri's and the
    Tiresias simulator's default runs, ``solve_starvation=0``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    thresholds_gpu_s: list[Seconds] = Field(
        default_factory=lambda: [3250.0, 7200.0, 18000.0],
        description="Queue thresholds in attained GPU-seconds, increasing "
        "(Muri's Tiresias code: 3250, 7200, 18000).",
    )
    starve_limit: float | None = Field(
        None, gt=0.0, description="promote a job waiting >= starve_limit x its last run"
    )
    preemptive: bool = Field(
        True,
        description="preempt at the instant a running job's attained service crosses a queue "
        "threshold, and at arrivals and completions (Tiresias's event-driven 2D-LAS); false: "
        "order only (preemption only at the mechanism's rounds, if on)",
    )

    @field_validator("thresholds_gpu_s")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if any(b <= a for a, b in itertools.pairwise(v)) or any(x <= 0 for x in v):
            raise ValueError("thresholds must be positive and strictly increasing")
        return v


@policies.register("cluster.ordering", "tiresias")
class TiresiasOrdering:
    """2D-LAS: a job's queue is the number of thresholds its attained GPU-service (since its
    last promotion) reached.

    Lower queues first; FIFO (submit time) within a queue. A job moves down exactly when
    attained GPU-seconds reach a threshold. Starvation promotion (with ``starve_limit``):
    a job that has run and has waited at least ``starve_limit`` x the length of its last
    run goes back to the top queue, its attained service counted from zero again (as the
    promotion in Muri's copy of the Tiresias simulator resets ``executed_time``).
    With ``preemptive`` (default, as Tiresias runs) the mechanism preempts at every
    arrival, completion and threshold crossing: ``next_change_gpu_s`` gives, per running
    job, the attained service at which its queue next changes. Starvation promotion is
    checked at those passes only (no timer of its own).
    Simplified: no placement-consolidation profiling (Tiresias's other component).
    """

    Params = TiresiasParams

    def __init__(self, params: TiresiasParams, rng: np.random.Generator) -> None:
        self.params = params
        self._thr = np.array(params.thresholds_gpu_s)
        self._base = np.zeros(0)  # per job id: attained GPU-s at its last promotion

    #: attained service counted as having reached a threshold within this many GPU-s
    #: (the pass armed at a crossing time sees the float sum a hair below it)
    TOLERANCE_GPU_S = 1e-6

    @property
    def preemptive(self) -> bool:
        """Whether the mechanism should preempt at this policy's priority changes."""
        return self.params.preemptive

    def queue_of(self, attained_gpu_s: np.ndarray) -> np.ndarray:
        """Queue index (0 = highest priority) of each attained service."""
        return np.searchsorted(self._thr, attained_gpu_s + self.TOLERANCE_GPU_S, side="right")

    def next_change_gpu_s(self, view: OrderingView) -> np.ndarray:
        """Per job of ``view``, the attained GPU-seconds (as ``attained_gpu_s`` counts
        them) at which its queue next changes: its next threshold above the service since
        its last promotion, plus that promotion's base (inf: already in the last queue)."""
        base = self._base_of(view)
        q = self.queue_of(view.attained_gpu_s - base)
        thr = np.append(self._thr, np.inf)
        return thr[q] + base

    def promote(self, view: OrderingView) -> None:
        """Reset the service count of starving jobs (idempotent while they wait)."""
        if self.params.starve_limit is None or view.waiting_s is None or view.last_run_s is None:
            return
        if len(view.job) and view.job.max() >= len(self._base):
            grown = np.zeros(max(2 * len(self._base), int(view.job.max()) + 1))
            grown[: len(self._base)] = self._base
            self._base = grown
        starving = (view.last_run_s > 0) & (
            view.waiting_s >= self.params.starve_limit * view.last_run_s
        )
        self._base[view.job[starving]] = view.attained_gpu_s[starving]

    def order(self, view: OrderingView) -> np.ndarray:
        """Positions sorted by (queue, submit_s, job)."""
        self.promote(view)
        service = view.attained_gpu_s - self._base_of(view)
        return np.lexsort((view.job, view.submit_s, self.queue_of(service)))

    def _base_of(self, view: OrderingView) -> np.ndarray:
        """Attained service at each job's last promotion (0: never promoted)."""
        base = np.zeros(len(view.job))
        if len(self._base):
            known = view.job < len(self._base)
            base[known] = self._base[view.job[known]]
        return base
