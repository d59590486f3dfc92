"""Cauchy's hierarchical routing: goodput-weighted smooth round-robin across combos,
opportunistic placement inside a combo (RECONSTRUCTION)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import InstanceView, RouteView


class GoodputWrrParams(BaseModel):
    """``fallback``: on a decode hand-off, leave the combo when none of its decode
    instances has free KV for the prompt (the work-conserving fallback)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    fallback: bool = Field(
        default=True,
        description="On a decode hand-off, leave the combo when none of its decode "
        "instances has free KV for the prompt (work-conserving).",
    )


def smooth_wrr(scores: dict[int, float], weights: dict[int, float]) -> int:
    """One step of smooth weighted round-robin (nginx): add each weight to its score,
    pick the largest score (lowest key on ties), subtract the total weight from it."""
    total = 0.0
    for k, w in weights.items():
        scores[k] = scores.get(k, 0.0) + w
        total += w
    best = min(weights, key=lambda k: (-scores[k], k))
    scores[best] -= total
    return best


@policies.register("serving.routing", "goodput-wrr")
class GoodputWrrRouting:
    """Cauchy (SoCC'25) hierarchical scheduling as reconstructed in
    ``../shared/papers/serving.md`` §1.2 step 7-8; the paper's exact rule is not public.

    Entry: smooth WRR over groups (combos) with weight = the group's estimated goodput
    (the sum over its entry instances, capped by the sum over its decode instances,
    ``RouteView.group_decode_rps``: a combo's goodput is ``min(n_P G_P, n_D G_D)``),
    then inside the group the instance with the earliest
    estimated start (fewest queued prompt tokens per unit of goodput). Decode hand-off:
    the group's decode instance with free KV for the prompt and the smallest batch;
    if none has room and ``fallback``, the same rule over every decode instance.

    When the deployment planned size buckets per instance (``RouteView.planned_rps``,
    Melange), the entry WRR runs over the instances planned for the request's bucket,
    weighted by their planned rate for it (one score table per bucket): Melange's
    routing by size bucket. A request of a bucket nobody was planned for (absent from
    the estimate sample) goes by goodput as above.
    """

    Params = GoodputWrrParams

    def __init__(self, params: GoodputWrrParams, rng: np.random.Generator) -> None:
        self.params = params
        self._scores: dict[int, float] = {}
        self._bucket_scores: dict[int, dict[int, float]] = {}

    def route(self, view: RouteView) -> int:
        """See the class docstring."""
        if view.stage == "decode":
            return self._decode(view)
        if any(r > 0 for r in view.planned_rps):
            planned = {
                s.number: r for s, r in zip(view.instances, view.planned_rps, strict=True) if r > 0
            }
            return smooth_wrr(self._bucket_scores.setdefault(view.bucket, {}), planned)
        weights: dict[int, float] = {}
        for s in view.instances:
            weights[s.group] = weights.get(s.group, 0.0) + max(s.goodput_rps, 1e-9)
        for g, rps in view.group_decode_rps:
            if g in weights:
                weights[g] = min(weights[g], max(rps, 1e-9))
        group = smooth_wrr(self._scores, weights)
        members = [s for s in view.instances if s.group == group]
        return min(members, key=_start_key).number

    def _decode(self, view: RouteView) -> int:
        fits = [s for s in view.instances if s.free_kv_tokens >= view.prompt_tokens]
        own = [s for s in fits if s.group == view.from_group]
        pool = own or (fits if self.params.fallback else [])
        if not pool:
            pool = [s for s in view.instances if s.group == view.from_group] or list(view.instances)
        return min(pool, key=lambda s: (s.running, -s.free_kv_tokens, s.number)).number


def _start_key(s: InstanceView) -> tuple[float, int]:
    return (s.queued_tokens / max(s.goodput_rps, 1e-9), s.number)
