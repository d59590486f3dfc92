"""Interleaved 1F1B (Narayanan et al., SC'21): v model chunks per device.

Megatron-LM's order: microbatches in groups of p; forward k runs chunk (k // p) % v of
microbatch (k // (p v)) p + k % p, backward k the chunk v-1-((k // p) % v); stage i warms
up with (p-i-1)*2 + (v-1)*p forwards. Bubble about (p-1)/(v m + p - 1) at the price of v
times more P2P transfers and more warm-up activations. Needs m to be a multiple of p.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.schedulers.training._orders import one_f_one_b
from hetsim.simulator.registry import policies
from hetsim.workloads.training.view import PipelineView, Schedule, Unit


class InterleavedParams(BaseModel):
    """Virtual stages (model chunks) per device."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    chunks: int = Field(2, ge=1, description="Virtual stages (model chunks) per device, v.")


@policies.register("training.schedule", "interleaved")
class Interleaved:
    """Megatron's interleaved 1F1B."""

    Params = InterleavedParams

    def __init__(self, params: InterleavedParams, rng: np.random.Generator) -> None:
        self.params = params

    def schedule(self, view: PipelineView) -> Schedule:
        """Per stage: the interleaved order (ValueError if m is not a multiple of p)."""
        p, m, v = view.stages, view.micro_batches, self.params.chunks
        if m % p:
            raise ValueError(f"interleaved 1F1B needs micro_batches ({m}) divisible by {p}")
        total = m * v

        def unit(kind: str, k: int) -> Unit:
            chunk = (k // p) % v
            micro = (k // (p * v)) * p + k % p
            return Unit(kind, micro, chunk if kind == "F" else v - 1 - chunk)  # type: ignore[arg-type]

        fwd = [unit("F", k) for k in range(total)]
        bwd = [unit("B", k) for k in range(total)]
        order = tuple(one_f_one_b(fwd, bwd, (p - i - 1) * 2 + (v - 1) * p) for i in range(p))
        return Schedule(order, chunks=v)
