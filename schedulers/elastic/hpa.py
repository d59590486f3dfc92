"""Kubernetes Horizontal Pod Autoscaler (autoscaling/v2) with its documented defaults.

The algorithm of ``pkg/controller/podautoscaler`` (horizontal.go, replica_calculator.go)
and the Kubernetes HPA docs, reproduced step by step each sync period:

1. ``ratio = metric / target``; if ``|ratio - 1| <= tolerance`` the recommendation is
   the current spec replicas, else ``ceil(ratio * ready_replicas)``. Metric
   ``utilisation``: busy fraction of the workers (target 0.8, the default 80% CPU
   target); metric ``lag``: backlog per replica, an AverageValue external metric
   (KEDA's Kafka-lag scaler style).
2. Stabilisation: the recommendation is stored with its time; the result is the current
   replicas raised to the min of recommendations inside the scale-up window (0 s) and
   lowered to the max of those inside the scale-down window (300 s).
3. Rate limits over the policies' periods (scale events of the last period count):
   up to ``max(periodStart + 4, ceil(periodStart * 2))`` per 15 s; down to
   ``int(periodStart * (1 - 100%)) = 0`` per 15 s (selectPolicy Max); then
   [min, max] replicas.

Missing metrics and readiness (kube-controller-manager flags, defaults as shipped):
while the job is in a rescale downtime the controller has no metric and skips the sync.
After the job comes up, pods count as not yet ready for
``initial_readiness_delay_s`` (``--horizontal-pod-autoscaler-initial-readiness-delay``,
30 s): no sample, no sync. Within ``cpu_initialization_period_s``
(``--horizontal-pod-autoscaler-cpu-initialization-period``, 300 s) a sample counts only
once a full ``metric_window_s`` has passed since the pods turned ready (the metric's
collection window; 0: any sample). In Kubernetes these readiness rules gate the CPU
resource metric; they are applied here to the GPU-utilisation and lag metrics too,
because an operator scaling a restart-heavy job on them would set the same hold, and
without it HPA chases the post-restart backlog (docs/elastic.md). Set both to 0 for the
bare custom-metric behaviour.
Simplification: every pod restarts together at a rescale (a synchronous job), so
"some pods unready" never arises.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat

from hetsim.simulator.limits import PositiveSeconds, Seconds
from hetsim.simulator.registry import policies
from hetsim.workloads.elastic.view import ScaleView


class HpaParams(BaseModel):
    """Kubernetes defaults (kube-controller-manager flags and the v2 behaviour API)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    metric: Literal["utilisation", "lag"] = Field(
        default="utilisation",
        description="Scaling metric: the workers' busy fraction (utilisation) or "
        "backlog per replica (lag, as KEDA's Kafka-lag scaler).",
    )
    target: PositiveFloat = Field(default=0.8, description="utilisation, or lag samples/replica")
    sync_period_s: PositiveSeconds = Field(
        default=15.0,
        description="Seconds between HPA syncs (kube-controller-manager default 15 s).",
    )
    initial_readiness_delay_s: Seconds = Field(
        default=30.0, description="after the job comes up, no sample for this long (k8s 30 s)"
    )
    cpu_initialization_period_s: Seconds = Field(
        default=300.0, description="window after readiness in which metric_window_s applies"
    )
    metric_window_s: Seconds = Field(
        default=0.0,
        description="a sample needs this long since readiness (within the initialization period)",
    )
    tolerance: NonNegativeFloat = Field(
        default=0.1,
        description="No change while |metric / target - 1| is "
        "within this (Kubernetes default 0.1).",
    )
    scale_up_window_s: Seconds = Field(
        default=0.0,
        description="Scale-up stabilisation window, in seconds: the lowest "
        "recommendation inside it bounds a scale-up (default 0).",
    )
    scale_down_window_s: Seconds = Field(
        default=300.0,
        description="Scale-down stabilisation window, in seconds: the highest "
        "recommendation inside it bounds a scale-down (default 300).",
    )
    up_percent: NonNegativeFloat = Field(
        default=100.0,
        description="Scale-up policy: add at most this percent of the "
        "replicas per up_period_s (default 100).",
    )
    up_pods: int = Field(
        default=4,
        ge=0,
        description="Scale-up policy: add at most this many pods per up_period_s; "
        "the larger of the two limits applies (default 4).",
    )
    up_period_s: PositiveSeconds = Field(
        default=15.0, description="Period of the scale-up policies, in seconds (default 15)."
    )
    down_percent: NonNegativeFloat = Field(
        default=100.0,
        le=100.0,
        description="Scale-down policy: remove at most this percent of the "
        "replicas per down_period_s (default 100).",
    )
    down_period_s: PositiveSeconds = Field(
        default=15.0, description="Period of the scale-down policy, in seconds (default 15)."
    )


@policies.register("elastic.autoscaler", "hpa")
class HpaAutoscaler:
    """Kubernetes HPA: metric/target ratio, tolerance, stabilisation windows, rate limits."""

    Params = HpaParams
    horizon_s = 0.0

    def __init__(self, params: HpaParams, rng: np.random.Generator) -> None:
        self.params = params
        self.sync_period_s = params.sync_period_s
        self.recommendations: deque[tuple[float, int]] = deque()
        self.events: deque[tuple[float, int]] = deque()  # (time, replicas added; < 0 removed)

    def recommend(self, view: ScaleView) -> int | None:
        """Step 1: the raw recommendation (None when the metric is missing)."""
        p = self.params
        if p.metric == "utilisation":
            metric = view.utilisation
        else:
            metric = view.lag_samples / max(view.replicas, 1)
        if not view.ready or math.isnan(metric) or not self.sampled(view.ready_for_s):
            return None
        ratio = metric / p.target
        if abs(ratio - 1.0) <= p.tolerance:
            return view.target
        return math.ceil(ratio * view.replicas)

    def sampled(self, ready_for_s: float) -> bool:
        """Whether pods up for ``ready_for_s`` give a usable sample: past the initial
        readiness delay, and past a full metric window if still initialising."""
        p = self.params
        if ready_for_s < p.initial_readiness_delay_s:
            return False
        return ready_for_s >= p.cpu_initialization_period_s or ready_for_s >= p.metric_window_s

    def stabilise(self, now_s: float, current: int, desired: int) -> int:
        """Step 2: clamp between the scale-up and scale-down window bounds."""
        p = self.params
        keep = max(p.scale_up_window_s, p.scale_down_window_s)
        while self.recommendations and self.recommendations[0][0] <= now_s - keep:
            self.recommendations.popleft()
        up = down = desired
        for t, rec in self.recommendations:
            if t > now_s - p.scale_up_window_s:
                up = min(up, rec)
            if t > now_s - p.scale_down_window_s:
                down = max(down, rec)
        self.recommendations.append((now_s, desired))
        return min(max(current, up), down)

    def _changed(self, now_s: float, period_s: float) -> tuple[int, int]:
        added = sum(d for t, d in self.events if t > now_s - period_s and d > 0)
        removed = -sum(d for t, d in self.events if t > now_s - period_s and d < 0)
        return added, removed

    def rate_limit(self, now_s: float, current: int, desired: int, view: ScaleView) -> int:
        """Step 3: the behaviour policies' limits, then [min, max] replicas."""
        p = self.params
        if desired > current:
            added, removed = self._changed(now_s, p.up_period_s)
            start = current - added + removed
            limit = max(start + p.up_pods, math.ceil(start * (1 + p.up_percent / 100)))
            return min(desired, max(limit, current), view.max_replicas)
        if desired < current:
            added, removed = self._changed(now_s, p.down_period_s)
            start = current - added + removed
            limit = int(start * (1 - p.down_percent / 100))
            return max(desired, min(limit, current), view.min_replicas)
        return desired

    def decide(self, view: ScaleView) -> int:
        """One HPA sync: recommend, stabilise, rate-limit; record the scale event."""
        desired = self.recommend(view)
        if desired is None:
            return view.target
        current, now = view.target, view.now_s
        final = self.rate_limit(now, current, self.stabilise(now, current, desired), view)
        if final != current:
            self.events.append((now, final - current))
        while self.events and self.events[0][0] <= now - max(
            self.params.up_period_s, self.params.down_period_s
        ):
            self.events.popleft()
        return final
