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

The layer ends at the barrier ``max(GPU end, CPU end)`` (the partial outputs are summed);
copies still in flight (prefetches) continue into later layers. With
``dense_on_cpu`` (llama.cpp CPU layers) attention and shared experts run on the CPU.
The whole layer is computed with numpy/Python arithmetic at its start; the caller
advances simulated time with one timeout to the barrier.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetsim.simulator.engine import InvariantViolation
from hetsim.workloads.moe.costs import StepCosts, read_only, unit_loads
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


def check_placement(
    p: Placement, experts: np.ndarray, layer: int, experts_list: list[int] | None = None
) -> None:
    """Every activated expert placed exactly once (conservation); ``experts_list``:
    ``experts`` as a list where the caller has it."""
    placed = [*p.gpu, *p.cpu]
    ids = experts.tolist() if experts_list is None else experts_list
    if len(placed) != len(ids) or set(placed) != set(ids):
        raise InvariantViolation(
            f"placement at layer {layer} placed {sorted(placed)}, activated {experts.tolist()}"
        )


def route(gating: Any, view: GatingView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gating decision -> (mask, activated ids, tokens per activated expert)."""
    tokens, experts = view.probs.shape
    mask = check_mask(gating.select(view), tokens, experts, view.top_k, view.layer)
    if tokens == 1:  # decode: the row's experts, one token each (shared read-only loads)
        ids = read_only(mask[0].nonzero()[0])
        return mask, ids, unit_loads(len(ids))
    loads_all = mask.sum(axis=0)
    ids = read_only(loads_all.nonzero()[0])
    return mask, ids, read_only(loads_all[ids])


def route_token(gating: Any, view: TokenGatingView) -> tuple[np.ndarray, list[np.ndarray]]:
    """A decode token's gating decision at every layer, checked as :func:`check_mask`
    checks each layer's -> (mask (layers, experts), each layer's read-only activated ids,
    ascending: the same ids :func:`route` finds layer by layer)."""
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
    return mask, [cols[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def placement_view(
    layer: int,
    phase: Phase,
    ids: np.ndarray,
    loads: np.ndarray,
    res: Any,
    costs: Any,
    step: StepCosts,
    router_abs: float,
    lists: list[Any] | None = None,
) -> PlacementView:
    """The placement policy's snapshot of one layer (times relative to the router).
    ``lists``, if given, receives the view's experts, cached and ready_s as lists."""
    cached = res.cached[layer][ids]  # (a row, then its items: cheaper than [layer, ids])
    cached_l = cached.tolist()
    # max(ready - router, 0) where cached, else 0 (Python floats: the same IEEE results
    # as the array operations, cheaper on a layer's few experts)
    ready_l = [
        max(r - router_abs, 0.0) if c else 0.0
        for r, c in zip(res.ready_at_s[layer][ids].tolist(), cached_l, strict=True)
    ]
    ready = np.array(ready_l, dtype=float)
    if lists is not None:
        lists[:] = [ids.tolist(), cached_l, ready_l]
    gpu_s, cpu_s = costs.expert_times(loads)
    row = res.cached[layer]
    return PlacementView(
        layer=layer,
        phase=phase,
        experts=read_only(ids),
        loads=read_only(loads),
        cached=read_only(cached),
        ready_s=read_only(ready),
        gpu_s=gpu_s,
        cpu_s=cpu_s,
        cpu_first_s=costs.cpu_first_s + step.handoff_s,
        copy_s=costs.copy_s,
        gpu_free_s=step.shared_gpu_s,
        cpu_free_s=0.0,
        pcie_free_s=max(res.pcie_free_s - router_abs, 0.0),
        # a layer with fewer slots than experts is never wholly cached (the residency
        # never holds more experts than slots), so the count is skipped there
        layer_resident=bool(
            res.slot_counts[layer] >= len(row)
            and np.count_nonzero(row) == len(row)
            and (res.ready_at_s[layer] <= router_abs).all()
        ),
        dense_gpu_s=step.attention_gpu_s + step.shared_gpu_s,
        dense_cpu_s=step.attention_cpu_s + step.shared_cpu_s,
    )


def timeline(
    view: PlacementView,
    p: Placement,
    res: Any,
    layer_start: float,
    step: StepCosts,
    spans: bool,
    lists: tuple[list[int], list[bool], list[float]] | None = None,
) -> tuple[float, float, float, float, float, int, list[tuple[str, str, float, float]]]:
    """Run the placement on GPU, CPU and PCIe. Returns (router, end, gpu busy, cpu busy,
    stall, copies, spans); spans are (resource, name, start, end). ``lists``: the view's
    experts, cached and ready_s as lists where the caller has them."""
    out: list[tuple[str, str, float, float]] = []
    if lists is None:
        lists = (view.experts.tolist(), view.cached.tolist(), view.ready_s.tolist())
    experts, cached, ready_s = lists
    pos = {e: i for i, e in enumerate(experts)}
    gpu_s, cpu_s = view.gpu_s.tolist(), view.cpu_s.tolist()
    if p.dense_on_cpu:
        router = layer_start + step.attention_cpu_s
        gpu_t, cpu_t = router, router + step.shared_cpu_s
        cpu_busy, gpu_busy = step.attention_cpu_s + step.shared_cpu_s, 0.0
    else:
        router = layer_start + step.attention_gpu_s
        gpu_t, cpu_t = router + step.shared_gpu_s, router
        gpu_busy, cpu_busy = step.attention_gpu_s + step.shared_gpu_s, 0.0
    stall, copies = 0.0, 0
    for e in p.gpu:
        i = pos[e]
        if cached[i]:
            ready = router + ready_s[i]
        else:
            c0, ready = res.copy(router)
            copies += 1
            if spans:
                out.append(("pcie", f"copy L{view.layer}E{e}", c0, ready))
        start = max(gpu_t, ready)
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
    for e in p.cpu:
        i = pos[e]
        t = cpu_s[i]
        if spans:
            out.append(("cpu", f"L{view.layer}E{e}", cpu_t, cpu_t + t))
        cpu_t += t
        cpu_busy += t
    return router, max(gpu_t, cpu_t), gpu_busy, cpu_busy, stall, copies, out
