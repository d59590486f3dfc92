"""The static arbiter: the scenario's partition, held for the whole run (the baseline)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.colocate.view import ArbiterDecision, ArbiterView


class StaticParams(BaseModel):
    """No parameters: each workload keeps the devices its ``devices:`` names."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("colocate.arbiter", "static")
class StaticArbiter:
    """Fixed partition from the scenario (the usual practice of separate serving and
    training pools; baseline of docs/colocate.md). Never moves a GPU."""

    Params = StaticParams
    period_s: float | None = None

    def __init__(self, params: StaticParams, rng: np.random.Generator) -> None:
        self.params = params

    def decide(self, view: ArbiterView) -> ArbiterDecision:
        """Nothing moves."""
        return ArbiterDecision()
