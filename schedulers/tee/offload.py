"""Masked offload without pipelining: DAC'23's design with its prefetch switched off.

Every linear op (one private operand) is masked in the TEE, computed by an untrusted
NNA and unmasked in the TEE; meta-keys are made on demand, so the TEE and the NNA
alternate and their times add. Ops with two private operands stay in the TEE.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.tee.view import TEE, ExecutionPlan, ExecutionView, fastest_nna


class OffloadParams(BaseModel):
    """``nna``: index of the NNA to use (None: the fastest estimate per op)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    nna: int | None = Field(
        default=None,
        ge=0,
        description="Index of the NNA every linear op runs on (null: "
        "each op's fastest estimated NNA).",
    )


def offload_placement(view: ExecutionView, nna: int | None) -> tuple[int, ...]:
    """Linear ops on ``nna`` (or each op's fastest NNA), the others in the TEE."""
    if nna is not None and nna >= len(view.nnas):
        raise ValueError(f"nna index {nna} but the view has {len(view.nnas)} NNAs")
    out = []
    for op in view.ops:
        if not op.offloadable:
            out.append(TEE)
            continue
        k = fastest_nna(op) if nna is None else nna
        out.append(k if np.isfinite(op.nna_s[k]) else TEE)
    return tuple(out)


@policies.register("tee.execution", "offload")
class OffloadExecution:
    """Masked linear ops on an NNA, TEE and NNA in series (no prefetch)."""

    Params = OffloadParams

    def __init__(self, params: OffloadParams, rng: np.random.Generator) -> None:
        self.params = params

    def plan(self, view: ExecutionView) -> ExecutionPlan:
        """Offload every linear op; depth 0."""
        return ExecutionPlan(offload_placement(view, self.params.nna), 0)
