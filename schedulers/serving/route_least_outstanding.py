"""Least-outstanding-requests routing (Vidur's LOR global scheduler)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import RouteView


class LeastOutstandingParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("serving.routing", "least-outstanding")
class LeastOutstandingRouting:
    """Send the request to the candidate with the fewest requests assigned and not yet
    finished (ties to the lowest number); heterogeneity-blind."""

    Params = LeastOutstandingParams

    def __init__(self, params: LeastOutstandingParams, rng: np.random.Generator) -> None:
        pass

    def route(self, view: RouteView) -> int:
        """Fewest outstanding requests."""
        return min(view.instances, key=lambda s: (s.outstanding, s.number)).number
