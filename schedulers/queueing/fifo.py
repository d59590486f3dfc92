"""FIFO central queue: the textbook M/M/c discipline."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.queueing.view import DispatchView


class FifoParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("queueing.dispatch", "fifo")
class FifoDispatch:
    """One FIFO queue for all servers; a free server takes the oldest request.

    When several servers are idle the request goes to the one with the shortest
    service time for it (the fastest device), ties to the lowest index.
    """

    Params = FifoParams
    central_queue = True

    def __init__(self, params: FifoParams, rng: np.random.Generator) -> None:
        self.params = params

    def choose(self, view: DispatchView) -> int:
        """The fastest idle server."""
        best = min(view.servers, key=lambda s: (s.est_service_s, s.number))
        return best.number
