"""TEE-only training: every op inside the CPU enclave (DAC'23's baseline)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.tee.view import TEE, ExecutionPlan, ExecutionView


class TeeOnlyParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("tee.execution", "tee-only")
class TeeOnlyExecution:
    """Keep the private data and all the work inside the TEE; no NNA is used."""

    Params = TeeOnlyParams

    def __init__(self, params: TeeOnlyParams, rng: np.random.Generator) -> None:
        self.params = params

    def plan(self, view: ExecutionView) -> ExecutionPlan:
        """All ops on the TEE, nothing to prefetch."""
        return ExecutionPlan((TEE,) * len(view.ops), 0)
