"""Mitigation: do nothing (a detector run for reporting only, or the no-remedy baseline)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.observability.view import Action, MitigationView


class IgnoreParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("observability.mitigation", "ignore")
class Ignore:
    """Tolerate the straggler until its fault ends by itself."""

    Params = IgnoreParams

    def __init__(self, params: IgnoreParams, rng: np.random.Generator) -> None:
        self.params = params

    def decide(self, view: MitigationView) -> Action:
        """Always ``ignore``."""
        return "ignore"
