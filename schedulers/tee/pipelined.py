"""DAC'23 (Li et al., "Privacy-Preserving DNN Training with Prefetched Meta-Keys on
Heterogeneous Neural Network Accelerators"): masked offload with pipelined prefetch.

The TEE prepares the meta-keys and masked inputs of the next ``depth`` layers while the
NNA computes the current one, so TEE-side work (type conversion, masking, interaction)
overlaps NNA and link time. Placement as :mod:`schedulers.tee.offload`. The paper's
prefetch distance is not given in its abstract: ``depth`` is a parameter (default 1,
reconstruction).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.schedulers.tee.offload import offload_placement
from hetsim.simulator.registry import policies
from hetsim.workloads.tee.view import ExecutionPlan, ExecutionView


class PipelinedParams(BaseModel):
    """``depth``: layers the TEE may prepare ahead; ``nna`` as in ``offload``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    depth: int = Field(default=1, ge=1)
    nna: int | None = Field(default=None, ge=0)


@policies.register("tee.execution", "pipelined")
class PipelinedExecution:
    """Masked offload with meta-key prefetch ``depth`` layers ahead (DAC'23)."""

    Params = PipelinedParams

    def __init__(self, params: PipelinedParams, rng: np.random.Generator) -> None:
        self.params = params

    def plan(self, view: ExecutionView) -> ExecutionPlan:
        """Offload every linear op; prefetch ``depth`` layers ahead."""
        return ExecutionPlan(offload_placement(view, self.params.nna), self.params.depth)
