"""LeMix-style arbiter: lend serving's idle GPUs to training where the prediction says it
pays, take them back before serving's predicted response time passes its bound.

LeMix (Li, Li, Zhu, Liu, "LeMix: Unified Scheduling for LLM Training and Inference on
Multi-GPU Systems", arXiv 2507.21276, RTSS 2025; artifact github.com/pejoule/LeMix)
co-locates serving and retraining on the same nodes. Its runtime scheduler predicts each
task's execution on every node from offline-profiled latency coefficients (forward and
backward time growing with batch x length^2, delayed by the training work already
placed on the node), scores the nodes by the idleness the task fills against its
predicted response time, places the task greedily on the best node, and defers a
training task whose predicted response time passes a bound (5x the profiled unloaded
response time in the artifact's scheduler) until serving's load allows it.

Here the unit of placement is a gang of GPUs over an arbiter period, not one batch
(the engine lends whole GPUs over time: docs/colocate.md). What maps:

* the *prediction from an offline profile*: serving's capacity per GPU is the goodput
  estimate of its instances (the sizing profile), training's moving cost is the job's
  ``checkpoint`` profile (:meth:`TrainingJobsWorkload.predicted_move_s`), and the load
  comes from the named past-arrivals estimator, never the trace;
* the *response-time bound*: serving keeps the GPUs that hold its predicted response
  time within ``rt_bound`` x its unloaded response time;
* the *deferral of training*: lent GPUs are reclaimed when the bound would be passed
  within the time a reclaim takes (the predicted checkpoint plus one period);
* the *idleness profit*: a gang is lent only when it is predicted to stay lent at least
  ``payback`` x (restore + checkpoint) seconds (the time it fills minus the time the
  move wastes);
* *node consolidation*: GPUs are lent and reclaimed in whole gangs (the mechanism lends
  whole nodes' worth first), so no lent GPU is left idle below a gang;
* *co-execution on shared nodes*: on GPUs serving shares with training (``sharing:``),
  training computes on as many (whole gangs) as keep serving's predicted response time,
  slowed by the sharing model's factor, within the bound one period on; on the rest it
  is paused (:mod:`workloads.colocate.deferral`: no move, the step in flight lost).

Reconstructions (the paper's per-batch trace prediction has no counterpart at this
level; each is a named parameter, swept in ``scenarios/colocate-robustness.yaml``):

* the response-time prediction: mean response time inflates as ``1 / (1 - rho)`` with
  utilisation ``rho`` (M/M/1), so the bound allows ``rho <= 1 - 1 / rt_bound``; on
  shared GPUs the sharing slowdown multiplies it;
* the load trend: the least-squares slope of the estimate over ``trend_window_s``,
  extrapolated linearly (a rising load shortens the predicted hold; a falling one is
  not trusted: serving is planned for the current estimate at least);
* ``payback`` 1: break-even between the GPU time a lent gang fills and the time its
  move wastes;
* ``reserve_gpus`` 0: LeMix keeps no spare capacity; the look-ahead replaces it.

Not expressible (docs/colocate.md): LeMix interleaves serving batches and training
micro-batches of one model copy on the same GPUs batch by batch, so a deferral is free
and nothing moves; here a lent GPU is training's alone (a move costs restore and
checkpoint) and a shared GPU is priced by the sharing model over whole periods, so its
per-batch node choice and length-consistency term have no counterpart.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from hetsim.schedulers.arbiter.serving_first import EstimatorConfig
from hetsim.simulator.limits import PositiveSeconds
from hetsim.simulator.registry import policies
from hetsim.workloads.colocate.view import ArbiterDecision, ArbiterView


class LeMixParams(BaseModel):
    """The LeMix-style arbiter's parameters (module doc: which are reconstructions)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    period_s: PositiveSeconds = Field(default=30.0, description="seconds between decisions")
    rt_bound: float = Field(
        default=5.0,
        gt=1.0,
        description="bound on serving's predicted mean response time, as a multiple of "
        "its unloaded response time (LeMix's deferral bound, 5x); utilisation kept at "
        "most 1 - 1/rt_bound (M/M/1, a reconstruction)",
    )
    trend_window_s: PositiveSeconds = Field(
        default=60.0,
        description="seconds of past load estimates the trend is fitted over (reconstruction)",
    )
    payback: float = Field(
        default=1.0,
        ge=0.0,
        description="lend a gang only if its predicted hold is at least payback x "
        "(predicted restore + checkpoint) s (reconstruction; 1: break-even)",
    )
    reserve_gpus: NonNegativeInt = Field(
        default=0, description="free GPUs always kept for serving beyond the prediction"
    )
    estimator: EstimatorConfig = Field(
        default_factory=EstimatorConfig, description="the serving-load estimator it sees"
    )


@policies.register("colocate.arbiter", "lemix")
class LeMixArbiter:
    """A reconstruction of LeMix's runtime scheduling (Li et al., arXiv 2507.21276,
    RTSS 2025) at the granularity of GPU lending: serving keeps what its predicted
    response-time bound needs over the time a reclaim takes; training gets the rest in
    whole gangs, where the predicted hold pays for the move (module doc)."""

    Params = LeMixParams

    def __init__(self, params: LeMixParams, rng: np.random.Generator) -> None:
        self.params = params
        self.period_s: float | None = params.period_s
        self.estimator = params.estimator
        #: (time, load estimate) of the decisions within the trend window
        self.history: deque[tuple[float, float]] = deque()
        #: time of the first estimate recorded (the trend is trusted a window after it)
        self.first_s: float | None = None

    # ---- prediction ------------------------------------------------------------------
    def trend_per_s2(self) -> float:
        """Least-squares slope of the load estimate over the trend window (req/s per s);
        0 until a whole window has passed since the first estimate (a shorter fit is
        noise)."""
        if len(self.history) < 2 or self.first_s is None:
            return 0.0
        if self.history[-1][0] - self.first_s < self.params.trend_window_s - 1e-9:
            return 0.0
        t = np.array([h[0] for h in self.history])
        r = np.array([h[1] for h in self.history])
        dt = t - t.mean()
        den = float((dt * dt).sum())
        return float((dt * (r - r.mean())).sum() / den) if den > 0 else 0.0

    def gpus_for(self, rate_per_s: float, rps_per_gpu: float) -> int:
        """GPUs that keep the predicted response time within the bound at ``rate_per_s``."""
        rho = 1.0 - 1.0 / self.params.rt_bound
        return math.ceil(rate_per_s / (rho * rps_per_gpu) - 1e-9)

    def hold_s(self, own_gpus: int, rate: float, slope: float, rps_per_gpu: float,
               lead_s: float) -> float:  # fmt: skip
        """Predicted seconds until serving, holding ``own_gpus``, would need a reclaim."""
        if slope <= 0:
            return math.inf
        rho = 1.0 - 1.0 / self.params.rt_bound
        limit = (own_gpus - self.params.reserve_gpus) * rho * rps_per_gpu
        return (limit - rate) / slope - lead_s

    # ---- decision --------------------------------------------------------------------
    def decide(self, view: ArbiterView) -> ArbiterDecision:
        """See the module doc."""
        p, v = self.params, view
        if v.serving_rate_per_s is None or v.serving_rps_per_gpu <= 0:
            return ArbiterDecision()
        rate = v.serving_rate_per_s
        if v.now_s > 0:  # at time 0 the estimate has measured nothing
            self.history.append((v.now_s, rate))
            self.first_s = v.now_s if self.first_s is None else self.first_s
        while self.history and self.history[0][0] < v.now_s - p.trend_window_s - 1e-9:
            self.history.popleft()
        slope = self.trend_per_s2()
        lead_s = v.harvest_checkpoint_s + p.period_s  # a reclaim's predicted latency
        ahead = max(rate, rate + slope * lead_s)
        gang = max(1, v.harvest_gang_gpus)
        shared = self.shared_train(v, max(rate, rate + slope * p.period_s), gang)
        return self.lending(v, rate, slope, ahead, gang)._replace(shared_train_gpus=shared)

    def shared_train(self, v: ArbiterView, ahead: float, gang: int) -> int | None:
        """Shared GPUs training may compute on: the most, in whole gangs, that keep
        serving's predicted mean response time within the bound at the load ``ahead``
        one period on. A shared GPU counts ``1 / slowdown`` of one (training running or
        paused there); with the load spread in proportion to speed, the mean response
        time over the ``n`` GPUs worth ``e`` is ``n / e / (1 - rho)`` times the unloaded
        one alone, so the bound holds while ``ahead <= goodput x (e - n / rt_bound)``
        (a reconstruction: LeMix's prediction delays a request by the co-located
        training work)."""
        if v.shared_gpus <= 0:
            return None
        if v.shared_paused_slowdown >= v.shared_slowdown:  # a pause would free nothing
            return v.shared_gpus
        n = v.serving_busy_gpus + v.serving_free_gpus
        run, paused = 1.0 - 1.0 / v.shared_slowdown, 1.0 - 1.0 / v.shared_paused_slowdown
        for k in range(v.shared_gpus // gang * gang, 0, -gang):
            e = n - self.params.reserve_gpus - k * run - (v.shared_gpus - k) * paused
            if ahead <= v.serving_rps_per_gpu * (e - n / self.params.rt_bound):
                return k
        return 0

    def lending(self, v: ArbiterView, rate: float, slope: float, ahead: float,
                gang: int) -> ArbiterDecision:  # fmt: skip
        """Lend or reclaim serving's exclusive GPUs (module doc)."""
        p = self.params
        lead_s = v.harvest_checkpoint_s + p.period_s
        keep = max(self.gpus_for(ahead, v.serving_rps_per_gpu) - v.serving_busy_gpus, 0)
        keep += p.reserve_gpus
        coming = v.serving_free_gpus + v.returning_gpus
        if coming < keep:  # defer training: whole gangs back (a gang stops as a whole)
            want = math.ceil((keep - coming) / gang) * gang
            return ArbiterDecision(reclaim=min(want, v.lent_gpus - v.returning_gpus))
        if v.harvest_waiting_jobs <= 0:
            return ArbiterDecision()
        spare = min(v.serving_free_gpus - keep, v.lendable_gpus)
        whole = (v.lent_gpus + spare) // gang * gang - v.lent_gpus  # complete gangs only
        whole = min(whole, v.harvest_waiting_jobs * gang)
        cost_s = p.payback * (v.harvest_restore_s + v.harvest_checkpoint_s)
        lend, own = 0, v.serving_busy_gpus + v.serving_free_gpus
        while lend < whole:
            step = min(gang - (v.lent_gpus + lend) % gang, whole - lend)
            if self.hold_s(own - lend - step, rate, slope, v.serving_rps_per_gpu,
                           lead_s) < cost_s:  # fmt: skip
                break
            lend += step
        return ArbiterDecision(lend=lend) if lend > 0 else ArbiterDecision()
