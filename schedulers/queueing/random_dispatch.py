"""Random dispatch: each request to a server drawn uniformly (splits Poisson streams)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.queueing.view import DispatchView


class RandomParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("queueing.dispatch", "random")
class RandomDispatch:
    """Uniformly random server: c independent M/M/1 queues under Poisson arrivals."""

    Params = RandomParams
    central_queue = False

    def __init__(self, params: RandomParams, rng: np.random.Generator) -> None:
        self.params = params
        self._rng = rng

    def choose(self, view: DispatchView) -> int:
        """A uniformly random server index (from the policy's own random stream)."""
        return int(self._rng.integers(len(view.servers)))
