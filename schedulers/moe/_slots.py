"""Slot-allocation helpers shared by the cache policies (uniform and whole-layer splits)."""

from __future__ import annotations

from hetsim.workloads.moe.view import AllocationView


def uniform_slots(view: AllocationView) -> tuple[int, ...]:
    """``total // layers`` slots per layer, the remainder one each to the first layers,
    at most ``experts`` per layer (the per-layer ``--cache_size`` of both papers' code)."""
    base, extra = divmod(view.total_slots, view.layers)
    return tuple(min(view.experts, base + (1 if i < extra else 0)) for i in range(view.layers))


def whole_layer_slots(view: AllocationView) -> tuple[int, ...]:
    """Every slot of the first ``total // experts`` layers, none elsewhere (llama.cpp's
    whole-layer offload; the remainder of the budget stays unused)."""
    full = min(view.layers, view.total_slots // view.experts)
    return tuple(view.experts if i < full else 0 for i in range(view.layers))
