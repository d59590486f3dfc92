"""Round-robin dispatch: a heterogeneity-blind baseline."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.queueing.view import DispatchView


class RoundRobinParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("queueing.dispatch", "round-robin")
class RoundRobinDispatch:
    """Send request i to server i mod c, whatever the servers' state or speed."""

    Params = RoundRobinParams
    central_queue = False

    def __init__(self, params: RoundRobinParams, rng: np.random.Generator) -> None:
        self.params = params
        self._next = 0

    def choose(self, view: DispatchView) -> int:
        """The next server in cyclic order."""
        index = self._next % len(view.servers)
        self._next += 1
        return index
