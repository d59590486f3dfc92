"""Whole-layer streaming as Hugging Face accelerate's CPU offload runs it: every layer's
weights sit in ordinary (pageable) host memory and are moved to the GPU by the layer's
pre-forward hook, synchronously, so a layer's copy and its compute never overlap."""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.offload.placement_fixed import FixedParams
from hetsim.simulator.registry import policies
from hetsim.workloads.offload.view import OffloadPlan, OffloadView


@policies.register("offload.placement", "layer-stream")
class LayerStreamPlacement:
    """accelerate ``cpu_offload``: all weights on the host, pageable, no overlap, KV on GPU."""

    Params = FixedParams

    def __init__(self, params: FixedParams, rng: np.random.Generator) -> None:
        self.params = params

    def place(self, view: OffloadView) -> OffloadPlan:
        """Stream every layer from pageable host memory, copy then compute."""
        return OffloadPlan(weights_gpu=0.0, weights_cpu=1.0, kv_gpu=self.params.kv_gpu,
                           overlap=False, pinned=False)  # fmt: skip
