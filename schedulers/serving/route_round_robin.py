"""Round-robin routing over the candidate instances of each stage."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import RouteView


class RoundRobinParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("serving.routing", "round-robin")
class RoundRobinRouting:
    """Cycle through the candidates (separate counters for entry and decode stages);
    blind to load and to GPU speed (Splitwise-sim's and Vidur's round-robin baseline)."""

    Params = RoundRobinParams

    def __init__(self, params: RoundRobinParams, rng: np.random.Generator) -> None:
        self._next = {"entry": 0, "decode": 0}

    def route(self, view: RouteView) -> int:
        """The next candidate in turn."""
        k = self._next[view.stage]
        self._next[view.stage] = k + 1
        return view.instances[k % len(view.instances)].number
