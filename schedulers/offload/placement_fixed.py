"""A placement given in full by the scenario (llama.cpp ``-ngl``/``-nkvo``, ZeRO-Inference,
or any hand-chosen FlexGen policy vector)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.errors import FieldError
from hetsim.simulator.registry import policies
from hetsim.workloads.offload.view import OffloadPlan, OffloadView


class FixedParams(BaseModel):
    """The fields of :class:`OffloadPlan`; ``cpu_layers: -1`` means every layer (CPU-only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    weights_gpu: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Fraction of every streamed layer's weights resident on the GPU.",
    )
    weights_cpu: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Fraction of every streamed layer's weights in host memory "
        "(the rest after weights_gpu is read from SSD).",
    )
    cpu_layers: int = Field(
        0,
        ge=-1,
        description="The last this-many layers run on the CPU from host memory "
        "(llama.cpp -ngl; -1: every layer, CPU-only).",
    )
    kv_gpu: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Fraction of the KV cache on the GPU (the rest in "
        "host memory, or on disk per kv_disk).",
    )
    attention_on_cpu: bool = Field(
        default=False,
        description="Attention over host-resident KV runs on the CPU (FlexGen's CPU "
        "delegation, llama.cpp -nkvo) instead of copying the KV to the GPU.",
    )
    overlap: bool = Field(
        default=True,
        description="Copy the next layer's weights while this layer computes (double "
        "buffering); false: copy, then compute (accelerate-style).",
    )
    gpu_batches: int = Field(
        1,
        ge=1,
        description="Micro-batches per block (FlexGen num_gpu_batches), run "
        "layer by layer in zig-zag order; at most the batch.",
    )
    pinned: bool = Field(
        default=True,
        description="Host buffers pinned (DMA at link rate); false: pageable, "
        "staged through a pinned bounce buffer by a CPU memcpy.",
    )
    kv_disk: float = Field(0.0, ge=0, le=1, description="KV fraction on the disk tier (cd)")


@policies.register("offload.placement", "fixed")
class FixedPlacement:
    """The plan the scenario gives (default: everything resident on the GPU)."""

    Params = FixedParams

    def __init__(self, params: FixedParams, rng: np.random.Generator) -> None:
        self.params = params

    def place(self, view: OffloadView) -> OffloadPlan:
        """The configured plan (``cpu_layers: -1`` -> all layers); a field the model
        or batch rules out is a :class:`FieldError` naming it (bad input, not a bug)."""
        d = self.params.model_dump()
        if d["cpu_layers"] == -1:
            d["cpu_layers"] = view.layers
        where = "policies.placement"
        if d["cpu_layers"] > view.layers:
            raise FieldError(f"{where}.cpu_layers", f"{d['cpu_layers']} is more than the "
                             f"model's {view.layers} layers (-1: every layer)")  # fmt: skip
        if d["weights_gpu"] + d["weights_cpu"] > 1 + 1e-9:
            raise FieldError(f"{where}.weights_cpu", f"weights_gpu + weights_cpu = "
                             f"{d['weights_gpu'] + d['weights_cpu']:.6g} exceeds 1")  # fmt: skip
        if d["gpu_batches"] > view.batch:
            raise FieldError(f"{where}.gpu_batches", f"{d['gpu_batches']} is more than the "
                             f"batch of {view.batch} requests")  # fmt: skip
        return OffloadPlan(**d)
