"""Kale (SoCC'24): forecast-driven, throughput-model-based, stabilised GPU autoscaling.

Kale's paper text and code are not public (elastic-observability.md, section 0); this
policy is a **reconstruction** from the abstract and a third-party review, following
the notes' section 1.3. Every constant below is a guess exposed as a parameter.

Decision each ``sync_period_s`` (reconstruction)::

    peak = max_{t in [now, now + H]} lambda_hat(t)
    need = peak * (1 + margin) + L(now) / drain_s
    n*   = n                                           if rho * mu_est(n) >= need
           min{ n : rho * mu_est(n) >= need + peak * downtime_up / drain_s }  otherwise

``lambda_hat`` is the forecaster's path over ``H = max(horizon_s, downtime_up +
sync)`` (the horizon covers the scale latency); ``mu_est`` is the mechanism's cost
model table; ``rho`` is the throughput model fitted online: least squares through
the origin of observed vs estimated throughput on backlogged windows (the paper fits
a resource-throughput model; FEDformer and the exact model family are not public).
A scale-up pauses the job for ``downtime_up``, so its target also drains the backlog
that pause will add; without that term each scale-up's own backlog asks for the next.

Stabilisation (reconstruction): scale up at once when ``n* - n >= min_step``; scale
down only when ``n - n* >= max(min_step, tolerance * n)`` has held for ``persistence``
consecutive decisions and ``cooldown_s`` has passed since the last change; the new
size then is the largest ``n*`` of those decisions (never below any of them).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveInt

from hetsim.simulator.limits import PositiveSeconds, Seconds
from hetsim.simulator.registry import policies
from hetsim.workloads.elastic.view import ScaleView


class KaleParams(BaseModel):
    """Kale's constants (all reconstructed; none is published)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    sync_period_s: PositiveSeconds = Field(
        default=60.0, description="Seconds between scaling decisions (reconstruction)."
    )
    horizon_s: PositiveSeconds = Field(
        default=900.0,
        description="Forecast horizon H whose peak rate is provisioned for, in seconds (at "
        "least the scale-up latency plus one sync; reconstruction).",
    )
    margin: NonNegativeFloat = Field(
        default=0.1,
        description="Headroom over the forecast peak rate: need = peak x (1 + "
        "margin) + backlog / drain_s (reconstruction).",
    )
    drain_s: PositiveSeconds = Field(
        default=600.0,
        description="Seconds in which the current backlog should be drained (reconstruction).",
    )
    min_step: PositiveInt = Field(
        default=1, description="Smallest replica change acted on (reconstruction)."
    )
    tolerance: NonNegativeFloat = Field(
        default=0.1,
        description="A scale-down needs at least this share of the "
        "current replicas to drop (reconstruction).",
    )
    persistence: PositiveInt = Field(
        default=5,
        description="Consecutive decisions a scale-down must hold "
        "before it happens (reconstruction).",
    )
    cooldown_s: Seconds = Field(
        default=1800.0,
        description="Seconds after the last change before a scale-down (reconstruction).",
    )
    fit_window: PositiveInt = Field(default=120, description="observations kept for rho")


@policies.register("elastic.autoscaler", "kale")
class KaleAutoscaler:
    """Kale: forecast max over the scale latency + backlog drain, fitted throughput model,
    scale up at once, scale down after persistence and cooldown (reconstruction)."""

    Params = KaleParams

    def __init__(self, params: KaleParams, rng: np.random.Generator) -> None:
        self.params = params
        self.sync_period_s = params.sync_period_s
        self.horizon_s = params.horizon_s
        self.fit: deque[tuple[float, float]] = deque(maxlen=params.fit_window)
        self.down_streak: list[int] = []
        self.last_change_s = -math.inf

    def correction(self, view: ScaleView) -> float:
        """rho = sum(o e) / sum(e^2) over backlogged windows (1 before any)."""
        if not math.isnan(view.observed_throughput_per_s):
            est = float(view.throughput_est_per_s[view.replicas])
            self.fit.append((view.observed_throughput_per_s, est))
        if not self.fit:
            return 1.0
        obs, est = np.array(self.fit).T
        return float((obs * est).sum() / (est * est).sum())

    def peak_rate(self, view: ScaleView) -> float:
        """Peak forecast over the horizon (at least the scale-up latency + one sync)."""
        reach = max(self.params.horizon_s, view.downtime_up_s + self.params.sync_period_s)
        steps = max(1, math.ceil(reach / view.step_s))
        path = view.forecast_per_s
        return float(path[:steps].max()) if path is not None else view.arrival_rate_per_s

    def size_for(self, view: ScaleView, rate_per_s: float, rho: float) -> int:
        """Smallest replica count whose fitted throughput covers ``rate_per_s``."""
        mu = rho * view.throughput_est_per_s
        ok = np.nonzero(mu[view.min_replicas : view.max_replicas + 1] >= rate_per_s)[0]
        return int(ok[0]) + view.min_replicas if len(ok) else view.max_replicas

    def decide(self, view: ScaleView) -> int:
        """The stabilised target (module doc)."""
        if view.forecast_per_s is None and view.arrival_rate_per_s == 0.0:
            return view.target  # t = 0: nothing observed yet
        p, rho = self.params, self.correction(view)
        peak = self.peak_rate(view)
        need = peak * (1 + p.margin) + view.lag_samples / p.drain_s
        wanted = self.size_for(view, need, rho)
        if wanted > view.replicas:  # a scale-up: also drain what its pause adds
            wanted = self.size_for(view, need + peak * view.downtime_up_s / p.drain_s, rho)
        return self.stabilise(view, wanted)

    def stabilise(self, view: ScaleView, wanted: int) -> int:
        """Up at once; down after ``persistence`` decisions and the cooldown."""
        p, current = self.params, view.target
        if wanted - current >= p.min_step:
            self.down_streak.clear()
            self.last_change_s = view.now_s
            return wanted
        if current - wanted >= max(p.min_step, p.tolerance * current):
            self.down_streak.append(wanted)
        else:
            self.down_streak.clear()
        cooled = view.now_s - self.last_change_s >= p.cooldown_s
        if len(self.down_streak) >= p.persistence and cooled:
            new = max(self.down_streak[-p.persistence :])
            self.down_streak.clear()
            self.last_change_s = view.now_s
            return new
        return current
