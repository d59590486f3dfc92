"""Orca-like iteration-level batching: whole prompts and decodes in one iteration."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from hetsim.schedulers.serving._admit import admit
from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import BatchPlan, BatchView


class OrcaBatchParams(BaseModel):
    """``max_batch_size``: sequences per iteration; ``max_tokens``: tokens per iteration."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_batch_size: PositiveInt = Field(default=256, description="Most sequences per iteration.")
    max_tokens: PositiveInt = Field(
        default=8192,
        description="Most tokens per iteration (running decodes count "
        "one each; whole prompts fill the rest).",
    )


@policies.register("serving.batching", "orca")
class OrcaBatching:
    """Orca (Yu et al., OSDI'22): selective batching at iteration level.

    Each iteration runs every running decode plus as many whole waiting prompts as
    fit (FCFS), so a long prompt stretches the decode steps that share its iteration.
    Simplified: no pipeline parallelism, KV in paged blocks as in vLLM.
    """

    Params = OrcaBatchParams

    def __init__(self, params: OrcaBatchParams, rng: np.random.Generator) -> None:
        self.params = params

    def plan(self, view: BatchView) -> BatchPlan:
        """Decodes plus the admissible whole prompts."""
        budget = max(self.params.max_tokens - view.running, 0)
        chunks = admit(view, budget, self.params.max_batch_size, chunked=False)
        return BatchPlan(chunks, with_decodes=True)
