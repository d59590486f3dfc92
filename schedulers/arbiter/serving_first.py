"""Serving-first harvesting: training runs on the GPUs serving does not need."""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveFloat

from hetsim.simulator.limits import PositiveSeconds
from hetsim.simulator.registry import policies
from hetsim.workloads.colocate.view import ArbiterDecision, ArbiterView, Estimator


class EstimatorConfig(BaseModel):
    """The serving-load estimator the arbiter sees (workloads.colocate.estimators)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Estimator = Field(default="ewma", description="last-window or ewma of the arrival rate")
    window_s: PositiveSeconds = Field(default=60.0, description="last-window: window length (s)")
    alpha: float = Field(
        default=0.5, gt=0.0, le=1.0, description="ewma: weight of the newest period"
    )
    forecast_error: float = Field(
        default=0.0, gt=-1.0, description="relative bias of the estimate (0.2: 20% high)"
    )


class ServingFirstParams(BaseModel):
    """``period_s`` between decisions; serving keeps ``need - busy + reserve_gpus`` free
    GPUs, where ``need = ceil(estimate x (1 + headroom) / goodput per GPU)``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    period_s: PositiveSeconds = Field(default=30.0, description="seconds between decisions")
    headroom: float = Field(default=0.25, ge=0.0, description="load margin over the estimate")
    reserve_gpus: NonNegativeInt = Field(
        default=2, description="free GPUs always kept for serving's scale-out (one unit's worth)"
    )
    min_lend_gpus: PositiveFloat = Field(
        default=1, description="lend only when at least this many GPUs are spare (avoids churn)"
    )
    estimator: EstimatorConfig = Field(
        default_factory=EstimatorConfig, description="the serving-load estimator it sees"
    )


@policies.register("colocate.arbiter", "serving-first")
class ServingFirstArbiter:
    """Harvesting in the manner of serving-first co-location (serving keeps priority;
    training takes the GPUs the serving autoscaler released and is preempted, paying its
    checkpoint, when the load estimate says serving needs them back). A reconstruction
    of the common practice, not of one paper's algorithm."""

    Params = ServingFirstParams

    def __init__(self, params: ServingFirstParams, rng: np.random.Generator) -> None:
        self.params = params
        self.period_s: float | None = params.period_s
        self.estimator = params.estimator

    def decide(self, view: ArbiterView) -> ArbiterDecision:
        """See the class docstring."""
        p = self.params
        if view.serving_rate_per_s is None or view.serving_rps_per_gpu <= 0:
            return ArbiterDecision()
        need = math.ceil(view.serving_rate_per_s * (1 + p.headroom) / view.serving_rps_per_gpu)
        keep = max(need - view.serving_busy_gpus, 0) + p.reserve_gpus
        coming = view.serving_free_gpus + view.returning_gpus
        if coming < keep:
            return ArbiterDecision(reclaim=keep - coming)
        spare = min(view.serving_free_gpus - keep, view.lendable_gpus)
        if spare >= p.min_lend_gpus and view.harvest_waiting_jobs > 0:
            return ArbiterDecision(lend=spare)
        return ArbiterDecision()
