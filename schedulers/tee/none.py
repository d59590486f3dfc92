"""No protection: the non-secure reference of every TEE comparison."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.tee.view import ProtectionPlan, ProtectionView


class NoneParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("tee.protection", "none")
class NoProtection:
    """Non-secure training: plain memory, plain DMA, nothing verified."""

    Params = NoneParams

    def __init__(self, params: NoneParams, rng: np.random.Generator) -> None:
        self.params = params

    def plan(self, view: ProtectionView) -> ProtectionPlan:
        """Every stream unprotected, transfers plain."""
        return ProtectionPlan(None, None, (None,) * len(view.streams), "plain", "none")
