"""Sarathi-Serve-like chunked prefill: decodes first, prompts in chunks under a budget."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from hetsim.schedulers.serving._admit import admit
from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import BatchPlan, BatchView


class SarathiBatchParams(BaseModel):
    """``token_budget``: tokens per iteration (Sarathi-Serve uses 512 under strict
    TBT SLOs and 2048 under relaxed ones); ``max_num_seqs`` as in vLLM."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    token_budget: PositiveInt = Field(
        default=512,
        description="Tokens per iteration: all running decodes, then prefill chunks up to it "
        "(Sarathi-Serve: 512 under strict TBT SLOs, 2048 relaxed).",
    )
    max_num_seqs: PositiveInt = Field(
        default=256, description="Most sequences per iteration (vLLM's default 256)."
    )


@policies.register("serving.batching", "sarathi")
class SarathiBatching:
    """Sarathi-Serve (Agrawal et al., OSDI'24): stall-free batching with chunked prefill.

    Every iteration carries all running decodes (one token each) and fills the rest of
    the token budget with prefill chunks taken FCFS from the queue, so no decode ever
    waits for a whole prompt. Simplified: a fixed budget (no tile-size quantisation).
    """

    Params = SarathiBatchParams

    def __init__(self, params: SarathiBatchParams, rng: np.random.Generator) -> None:
        self.params = params

    def plan(self, view: BatchView) -> BatchPlan:
        """All decodes plus prefill chunks up to the budget."""
        budget = max(self.params.token_budget - view.running, 0)
        chunks = admit(view, budget, self.params.max_num_seqs, chunked=True) if budget else ()
        return BatchPlan(chunks, with_decodes=True)
