"""No sample balancing: partitions stay on ``partition mod n`` (a static assignor)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.elastic.view import BalanceView


class NoBalanceParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("elastic.balance", "none")
class NoBalance:
    """Partition p goes to worker ``p mod n`` whatever its rate (Kafka's round-robin
    assignor over partition ids), so skewed partitions make a most-loaded worker that
    paces the synchronous job. No extra downtime."""

    Params = NoBalanceParams
    extra_downtime_s = 0.0

    def __init__(self, params: NoBalanceParams, rng: np.random.Generator) -> None:
        self.params = params

    def assign(self, view: BalanceView) -> np.ndarray:
        """Each worker's share: the sum of its ``p mod n`` partitions' shares."""
        shares = view.partition_share
        owner = np.arange(len(shares)) % view.replicas
        return np.bincount(owner, weights=shares, minlength=view.replicas)
