"""Prefix-affinity routing: send a request where its prompt's prefix is cached."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import RouteView


class PrefixAffinityParams(BaseModel):
    """``min_hit``: the least cached share of the prompt worth following;
    ``max_imbalance``: how many more outstanding requests than the least loaded
    candidate an instance may have and still be chosen for its cache."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    min_hit: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Least cached share of the prompt worth following; "
        "below it, route to the least loaded instance.",
    )
    max_imbalance: NonNegativeInt = Field(
        default=8,
        description="Most extra outstanding requests, over the least loaded candidate, "
        "an instance may have and still be chosen for its cache.",
    )


@policies.register("serving.routing", "prefix-affinity")
class PrefixAffinityRouting:
    """Cache-aware routing, **reconstruction** in the spirit of SGLang's cache-aware
    router (route to the longest prefix match unless the load is imbalanced; its real
    thresholds and radix-tree approximation are not modelled). Among candidates with
    at most ``max_imbalance`` more outstanding requests than the least loaded one,
    take the one whose prefix cache holds the most of the request's prompt
    (``RouteView.cached_tokens``, computed by the mechanism); if that share of the
    prompt is below ``min_hit`` (or the cache is off), fall back to least outstanding
    requests. Ties go to fewer outstanding requests, then the lowest number."""

    Params = PrefixAffinityParams

    def __init__(self, params: PrefixAffinityParams, rng: np.random.Generator) -> None:
        self.params = params

    def route(self, view: RouteView) -> int:
        """Longest cached prefix among the not-overloaded candidates, else least loaded."""
        least = min(view.instances, key=lambda s: (s.outstanding, s.number))
        if not view.cached_tokens or view.stage != "entry":
            return least.number
        cap = least.outstanding + self.params.max_imbalance
        pairs = [
            (c, s) for c, s in zip(view.cached_tokens, view.instances, strict=True)
            if s.outstanding <= cap
        ]  # fmt: skip
        hit, best = max(pairs, key=lambda p: (p[0], -p[1].outstanding, -p[1].number))
        if hit < self.params.min_hit * view.prompt_tokens or hit == 0:
            return least.number
        return best.number
