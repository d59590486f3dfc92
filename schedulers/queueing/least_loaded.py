"""Least-loaded dispatch: send each request where it will finish first."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.queueing.view import DispatchView


class LeastLoadedParams(BaseModel):
    """``count_service``: add this request's own service time on each server (so a
    fast idle device beats a slow idle one); False compares committed backlog only."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    count_service: bool = Field(
        default=True,
        description="Add this request's own service time on each server, so a fast idle "
        "device beats a slow idle one; false: committed backlog only.",
    )


@policies.register("queueing.dispatch", "least-loaded")
class LeastLoadedDispatch:
    """Route on arrival to the server with the least committed work (in seconds).

    Heterogeneity-aware: backlog is measured in each device's own seconds, so a
    slow device with a short queue can lose to a fast one with a longer queue.
    """

    Params = LeastLoadedParams
    central_queue = False

    def __init__(self, params: LeastLoadedParams, rng: np.random.Generator) -> None:
        self.params = params

    def choose(self, view: DispatchView) -> int:
        """Server minimising backlog (+ this request's service time), ties to lowest index."""
        add = self.params.count_service
        best = min(
            view.servers,
            key=lambda s: (s.backlog_s + (s.est_service_s if add else 0.0), s.number),
        )
        return best.number
