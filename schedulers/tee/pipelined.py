"""DAC'23 (Li et al., "Privacy-Preserving DNN Training with Prefetched Meta-Keys on
Heterogeneous Neural Network Accelerators"): masked offload with pipelined prefetch.

The TEE prepares the meta-keys and masked inputs of the next ``depth`` layers while the
NNA computes the current one, so TEE-side work (type conversion, masking, interaction)
overlaps NNA and link time, and splits the batch into micro-batches so that the
conversion and interaction of one micro-batch overlap the NNA's work on another
(micro-batch interleaving). Placement as :mod:`schedulers.tee.offload`. The paper's
prefetch distance and micro-batch count are not given in its abstract: ``depth`` is a
parameter (default 1, reconstruction); ``micro_batches`` is fixed by the scenario or,
by default, the count of the view's options with the lowest estimated step time (the
mechanism's estimator, ``view.estimate_s``).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.schedulers.tee.offload import offload_placement
from hetsim.simulator.registry import policies
from hetsim.workloads.tee.view import ExecutionPlan, ExecutionView, best_micro_batches


class PipelinedParams(BaseModel):
    """``depth``: layers the TEE may prepare ahead; ``nna`` as in ``offload``;
    ``micro_batches``: micro-batches interleaved (None: the best estimated option)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    depth: int = Field(
        default=1,
        ge=1,
        description="Layers ahead whose meta-keys and masked inputs the TEE "
        "prepares (not in the abstract: reconstruction).",
    )
    nna: int | None = Field(
        default=None,
        ge=0,
        description="Index of the NNA every linear op runs on (null: "
        "each op's fastest estimated NNA).",
    )
    micro_batches: int | None = Field(
        default=None,
        ge=1,
        description="Micro-batches interleaved, one of the workload's options "
        "(null: the option with the lowest estimated step time).",
    )


@policies.register("tee.execution", "pipelined")
class PipelinedExecution:
    """Masked offload with meta-key prefetch ``depth`` layers ahead (DAC'23)."""

    Params = PipelinedParams

    def __init__(self, params: PipelinedParams, rng: np.random.Generator) -> None:
        self.params = params

    def plan(self, view: ExecutionView) -> ExecutionPlan:
        """Offload every linear op; prefetch ``depth`` layers ahead; interleave
        ``micro_batches`` (or the best estimated option)."""
        p = self.params
        placement = offload_placement(view, p.nna)
        m = p.micro_batches
        if m is None:
            m = best_micro_batches(view, placement, p.depth)[1]
        elif m not in view.micro_batch_options:
            raise ValueError(
                f"policies.execution.micro_batches: {m} is not among the workload's "
                f"micro_batch_options "
                f"{view.micro_batch_options}"
            )
        return ExecutionPlan(placement, p.depth, m)
