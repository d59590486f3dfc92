"""vLLM-like continuous batching: prefill-prioritised, whole prompts, FCFS."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from hetsim.schedulers.serving._admit import admit
from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import BatchPlan, BatchView


class VllmBatchParams(BaseModel):
    """vLLM v0 scheduler limits: ``max_num_seqs`` 256 (its default) and
    ``max_num_batched_tokens`` 8192 (its default for an 8k-context model)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_num_seqs: PositiveInt = Field(
        default=256, description="Most sequences per iteration (vLLM v0 default 256)."
    )
    max_num_batched_tokens: PositiveInt = Field(
        default=8192,
        description="Most prompt tokens in one prefill iteration (vLLM v0 "
        "default 8192 for an 8k-context model).",
    )


@policies.register("serving.batching", "vllm")
class VllmBatching:
    """vLLM (Kwon et al., SOSP'23) iteration scheduling, simplified.

    If waiting prompts fit (token budget, sequence cap, free KV blocks), the iteration
    is a prefill of as many whole prompts as fit, in FCFS order, and running decodes
    pause (prefill prioritised: the interference that disaggregation removes);
    otherwise every running sequence decodes one step. Not modelled: the free-block
    watermark, swapping (preemption is by recompute).
    """

    Params = VllmBatchParams

    def __init__(self, params: VllmBatchParams, rng: np.random.Generator) -> None:
        self.params = params

    def plan(self, view: BatchView) -> BatchPlan:
        """Prefill the admissible head of the queue, else decode."""
        p = self.params
        chunks = admit(view, p.max_num_batched_tokens, p.max_num_seqs, chunked=False)
        return BatchPlan(chunks, with_decodes=not chunks)
