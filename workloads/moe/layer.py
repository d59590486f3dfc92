"""One MoE layer of one step: routing, placement, and the GPU/CPU/PCIe timeline.

The layer starts at the previous layer's barrier ``B``. The GPU runs attention (and the
router) until ``B + attention``; then the gating policy picks each token's experts, the
placement policy assigns each activated expert to the GPU (copied over PCIe first when
not cached) or the CPU, and three resources run concurrently:

- the GPU runs the shared experts, then its routed experts in the policy's order, each
  starting when the GPU is free and its weights are there (resident, prefetched, or
  copied);
- the copy engine (FIFO, carrying over prefetches from earlier layers) copies the
  uncached GPU experts in GPU order;
- the CPU runs its experts back to back from the router time.

With ``after_all_copies`` (kt-kernel's layerwise GPU prefill: the layer's experts are
copied, then one fused MoE call runs over them) no routed expert starts on the GPU
before the last of the layer's copies has landed; with load stages as well, each copy
waits for the CPU's write of the expert into a pinned buffer and the experts are
repacked on the GPU after their copies (:mod:`workloads.moe.layer_load`).
The layer ends at the barrier ``max(GPU end, CPU end)`` (the partial outputs are summed);
copies still in flight (prefetches) continue into later layers. With
``dense_on_cpu`` (llama.cpp CPU layers) attention and shared experts run on the CPU.
The whole layer is computed with numpy/Python arithmetic at its start; the caller
advances simulated time with one timeout to the barrier.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hetsim.simulator.engine import InvariantViolation
from hetsim.workloads.moe.costs import StepCosts, read_only, unit_loads
from hetsim.workloads.moe.layer_load import LayerLoadStages, load_layer
from hetsim.workloads.moe.view import GatingView, Phase, Placement, PlacementView, TokenGatingView


def check_mask(mask: Any, tokens: int, experts: int, top_k: int, layer: int) -> np.ndarray:
    """The gating decision, checked: bool (tokens, experts), 1..top_k experts per token."""
    mask = np.asarray(mask)
    if mask.dtype != bool or mask.shape != (tokens, experts):
        raise InvariantViolation(
            f"gating at layer {layer} returned {mask.dtype} {mask.shape}, "
            f"expected bool {(tokens, experts)}"
        )
    if tokens == 1:  # decode: one row, counted without a ufunc reduction
        lo = hi = np.count_nonzero(mask)
    else:
        per_token = mask.sum(axis=1)
        lo, hi = per_token.min(), per_token.max()
    if lo < 1 or hi > top_k:
        raise InvariantViolation(f"gating at layer {layer}: a token has 0 or > {top_k} experts")
    return mask


def check_placement(p: Placement, experts: tuple[int, ...], layer: int) -> None:
    """Every activated expert placed exactly once (conservation)."""
    placed = [*p.gpu, *p.cpu]
    if len(placed) != len(experts) or set(placed) != set(experts):
        raise InvariantViolation(
            f"placement at layer {layer} placed {sorted(placed)}, activated {list(experts)}"
        )


Routed = tuple[np.ndarray, np.ndarray, tuple[int, ...], tuple[int, ...]]
"""A layer's routing: (mask, activated ids as a read-only array, the same ids as a
tuple, tokens per activated expert as a tuple)."""


def route(gating: Any, view: GatingView) -> Routed:
    """Gating decision -> (mask, activated ids (array, tuple), tokens per activated expert)."""
    tokens, experts = view.probs.shape
    mask = check_mask(gating.select(view), tokens, experts, view.top_k, view.layer)
    if tokens == 1:  # decode: the row's experts, one token each (shared loads)
        ids = read_only(mask[0].nonzero()[0])
        return mask, ids, tuple(ids.tolist()), unit_loads(len(ids))
    loads_all = mask.sum(axis=0)
    ids = read_only(loads_all.nonzero()[0])
    return mask, ids, tuple(ids.tolist()), tuple(loads_all[ids].tolist())


def route_token(
    gating: Any, view: TokenGatingView
) -> tuple[np.ndarray, list[np.ndarray], list[tuple[int, ...]]]:
    """A decode token's gating decision at every layer, checked as :func:`check_mask`
    checks each layer's -> (mask (layers, experts), each layer's read-only activated ids,
    ascending: the same ids :func:`route` finds layer by layer, and the same as tuples)."""
    layers, experts = view.probs.shape
    mask = np.asarray(gating.select_token(view))
    if mask.dtype != bool or mask.shape != (layers, experts):
        raise InvariantViolation(
            f"gating of a token returned {mask.dtype} {mask.shape}, "
            f"expected bool {(layers, experts)}"
        )
    counts = np.count_nonzero(mask, axis=1)
    bad = ((counts < 1) | (counts > view.top_k)).nonzero()[0]
    if len(bad):
        raise InvariantViolation(
            f"gating at layer {int(bad[0])}: a token has 0 or > {view.top_k} experts"
        )
    cols = read_only(mask.nonzero()[1])  # row-major: each layer's ids ascending, in turn
    ends = np.cumsum(counts).tolist()
    spans = list(zip([0, *ends[:-1]], ends, strict=True))
    flat = cols.tolist()
    return mask, [cols[a:b] for a, b in spans], [tuple(flat[a:b]) for a, b in spans]


def placement_view(
    layer: int,
    phase: Phase,
    ids: np.ndarray,
    ids_t: tuple[int, ...],
    loads: tuple[int, ...],
    res: Any,
    costs: Any,
    step: StepCosts,
    router_abs: float,
) -> PlacementView:
    """The placement policy's snapshot of one layer (times relative to the router);
    ``ids`` and ``ids_t``: the activated ids as an array and as a tuple."""
    # the residency's row views of the layer (a row, then its items)
    row, ready_row = res.cached_rows[layer], res.ready_rows[layer]
    cached = tuple(row[ids].tolist())
    # max(ready - router, 0) where cached, else 0 (Python floats: the same IEEE results
    # as the array operations, cheaper on a layer's few experts; the times are finite,
    # so r - router is positive exactly where r > router)
    times = ready_row[ids].tolist()
    if max(times, default=0.0) <= router_abs:  # none in flight (the usual case): all 0
        ready = (0.0,) * len(times)
    else:
        ready = tuple([
            r - router_abs if c and r > router_abs else 0.0
            for r, c in zip(times, cached, strict=True)
        ])  # fmt: skip
    gpu_s, cpu_s = costs.expert_times(loads)
    # a layer with fewer slots than experts is never wholly cached (the residency never
    # holds more experts than slots), so the count is skipped there
    resident = bool(
        res.slot_counts[layer] >= len(row)
        and np.count_nonzero(row) == len(row)
        and (ready_row <= router_abs).all()
    )
    # positional construction, in PlacementView's field order (the hot path: one per
    # MoE layer-step)
    return tuple.__new__(PlacementView, (
        layer, phase, ids_t, loads, cached, ready, gpu_s, cpu_s,
        costs.cpu_first_s + step.handoff_s,  # cpu_first_s
        costs.copy_s,
        step.shared_gpu_s,  # gpu_free_s
        0.0,  # cpu_free_s
        max(res.pcie_free_s - router_abs, 0.0),  # pcie_free_s
        resident,  # layer_resident
        step.attention_gpu_s + step.shared_gpu_s,  # dense_gpu_s
        step.attention_cpu_s + step.shared_cpu_s,  # dense_cpu_s
    ))  # fmt: skip


def timeline(
    view: PlacementView,
    p: Placement,
    res: Any,
    layer_start: float,
    step: StepCosts,
    spans: bool,
    lists: tuple[Sequence[int], Sequence[bool], Sequence[float]] | None = None,
    after_all_copies: bool = False,
    load_stages: LayerLoadStages | None = None,
    shared_after_cpu: bool = False,
) -> tuple[float, float, float, float, float, int, list[tuple[str, str, float, float]]]:
    """Run the placement on GPU, CPU and PCIe. Returns (router, end, gpu busy, cpu busy,
    stall, copies, spans); spans are (resource, name, start, end). ``lists``: the view's
    experts, cached and ready_s where the caller has them in another form (default: the
    view's own); ``after_all_copies``: the GPU experts wait for every copy of the layer
    (module doc); ``load_stages``: with ``after_all_copies``, the copies go through
    kt-kernel's write / copy / repack pipeline (:mod:`workloads.moe.layer_load`);
    ``shared_after_cpu``: in a layer with CPU experts the GPU's shared expert starts only
    when the CPU experts return (ggml's scheduler runs its graph splits in order, and
    llama.cpp / ik_llama.cpp build the shared expert after the routed ones), instead of
    overlapping them."""
    out: list[tuple[str, str, float, float]] = []
    experts, cached, ready_s = (view.experts, view.cached, view.ready_s) if lists is None else lists
    pos = dict(zip(experts, range(len(experts)), strict=True))
    gpu_s, cpu_s = view.gpu_s, view.cpu_s
    if p.dense_on_cpu:
        router = layer_start + step.attention_cpu_s
        gpu_t, cpu_t = router, router + step.shared_cpu_s
        cpu_busy, gpu_busy = step.attention_cpu_s + step.shared_cpu_s, 0.0
    else:
        router = layer_start + step.attention_gpu_s
        gpu_t, cpu_t = router + step.shared_gpu_s, router
        gpu_busy, cpu_busy = step.attention_gpu_s + step.shared_gpu_s, 0.0
    stall, copies = 0.0, 0
    gate = router  # with after_all_copies: when the layer's last copy has landed
    if after_all_copies and load_stages is not None:
        missing = []
        for e in p.gpu:
            i = pos[e]
            if cached[i]:
                gate = max(gate, router + ready_s[i])
            else:
                missing.append(e)
        loaded, spans_c = load_layer(res, router, len(missing), load_stages)
        copies += len(missing)
        gate = max(gate, loaded)
        if spans:
            for e, (c0, c1) in zip(missing, spans_c, strict=True):
                out.append(("pcie", f"copy L{view.layer}E{e}", c0, c1))
    elif after_all_copies:
        for e in p.gpu:
            i = pos[e]
            if cached[i]:
                gate = max(gate, router + ready_s[i])
                continue
            c0, ready = res.copy(router)
            copies += 1
            gate = max(gate, ready)
            if spans:
                out.append(("pcie", f"copy L{view.layer}E{e}", c0, ready))
    for e in p.gpu:
        i = pos[e]
        if after_all_copies:
            ready = gate
        elif cached[i]:
            ready = router + ready_s[i]
        else:
            c0, ready = res.copy(router)
            copies += 1
            if spans:
                out.append(("pcie", f"copy L{view.layer}E{e}", c0, ready))
        start = ready if ready > gpu_t else gpu_t  # max(gpu_t, ready) without the call
        stall += start - gpu_t
        gpu_t = start + gpu_s[i]
        gpu_busy += gpu_s[i]
        if spans:
            out.append(("gpu", f"L{view.layer}E{e}", start, gpu_t))
    if p.cpu:  # cpu_first_s holds the hand-off copies too; the CPU is busy for the rest
        # a layer wholly on the CPU (llama.cpp CPU layers) hands nothing back per layer
        handoff = 0.0 if p.dense_on_cpu else step.handoff_s
        cpu_t += view.cpu_first_s - step.handoff_s + handoff
        cpu_busy += view.cpu_first_s - step.handoff_s
    if not spans:  # the same sums without the span checks
        for t in map(cpu_s.__getitem__, map(pos.__getitem__, p.cpu)):
            cpu_t += t
            cpu_busy += t
    for e in p.cpu if spans else ():
        i = pos[e]
        t = cpu_s[i]
        out.append(("cpu", f"L{view.layer}E{e}", cpu_t, cpu_t + t))
        cpu_t += t
        cpu_busy += t
    if shared_after_cpu and p.cpu and not p.dense_on_cpu:
        shared = step.shared_gpu_s
        return router, max(gpu_t - shared, cpu_t) + shared, gpu_busy, cpu_busy, stall, copies, out
    return router, max(gpu_t, cpu_t), gpu_busy, cpu_busy, stall, copies, out
