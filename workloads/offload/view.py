"""What an offload placement policy sees and returns (the domain's contract).

A policy decides, once before the run, where each kind of tensor lives and where the
attention runs; the mechanism runs the plan and checks it fits in memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class OffloadPlan:
    """Placement of one run (FlexGen's policy vector, plus llama.cpp's layer split).

    - ``weights_gpu`` / ``weights_cpu``: fractions of every streamed layer's weights
      resident on the GPU / in host memory; the rest is read from SSD.
    - ``cpu_layers``: the last ``cpu_layers`` layers run on the CPU from host memory
      (llama.cpp ``-ngl``; all layers = CPU-only inference).
    - ``kv_gpu``: fraction of the KV cache on the GPU; ``kv_disk``: fraction on the disk
      tier (FlexGen's cg / cd; the rest, cc, in host memory).
    - ``attention_on_cpu``: attention over host-resident KV runs on the CPU (FlexGen's
      CPU delegation, llama.cpp ``-nkvo``) instead of copying the KV to the GPU.
    - ``overlap``: copy the next layer's weights while this layer computes (double
      buffering); off = accelerate-style streaming (copy, then compute).
    - ``gpu_batches``: micro-batches per block (FlexGen ``num_gpu_batches``); the batch
      is split into this many GPU batches, run layer by layer in zig-zag order.
    - ``pinned``: host buffers pinned (DMA at link rate) or pageable (staged by a CPU
      memcpy into a pinned bounce buffer).
    """

    weights_gpu: float = 1.0
    weights_cpu: float = 0.0
    cpu_layers: int = 0
    kv_gpu: float = 1.0
    attention_on_cpu: bool = False
    overlap: bool = True
    gpu_batches: int = 1
    pinned: bool = True
    kv_disk: float = 0.0


@dataclass(frozen=True)
class OffloadView:
    """The run a placement policy plans for, and an estimator of a plan's run time."""

    layers: int
    layer_weight_bytes: int
    kv_bytes_per_token_layer: int
    batch: int
    prompt_tokens: int
    output_tokens: int
    gpu_free_bytes: int
    cpu_free_bytes: int
    estimate_s: Callable[[OffloadPlan], float]
    fits: Callable[[OffloadPlan], bool]
    disk_free_bytes: int = 0  # 0: no disk tier named (KV cannot go to disk)
