"""Prefetch requests of one MoE layer: the lookahead view and the issued copies.

At a layer's router time the hidden state is fed to the gates of the next
``depth`` layers (gate reuse); the trace's predicted probabilities of layer ``l + d``
stand for that prediction. Each later layer's predicted activated experts are the
per-token top-k of the predicted vector (counts give predicted loads). The prefetch
policy returns ``(layer, expert)`` pairs; each gets a slot from the cache policy and is
queued on the FIFO copy engine behind the layer's demand copies.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetsim.simulator.engine import InvariantViolation
from hetsim.workloads.moe.costs import read_only, unit_loads
from hetsim.workloads.moe.routing import predicted_block_depths
from hetsim.workloads.moe.view import LookaheadLayer, Phase, PrefetchView

BLOCK_TOKENS = 32
"""Decode tokens whose predictions are computed together (one numpy call per operation
for the block instead of per token; each row's numbers are the same either way)."""


class PredictionBlock:
    """The predictions of decode tokens ``t0 .. t1 - 1`` of every layer at every depth
    up to ``depth``, computed at once.

    Row ``r = ((t - t0) * depth + d - 1) * layers + l`` of ``flat`` (read-only) is
    token ``t``'s prediction of layer ``l`` made ``d`` layers earlier; ``ids[r]`` its
    top-k ids, most probable first, and ``top_probs[r]`` their probabilities (tuples).
    ``gather[(t - t0) * layers + l]``: the flat (layer x experts) indices of token
    ``t``'s predicted experts of the layers after ``l`` (depth 1 first), to read their
    residency in one step (rows past the last layer are clipped to it, and ignored)."""

    def __init__(self, trace: Any, t0: int, t1: int, depth: int, k: int, experts: int) -> None:
        self.t0, self.t1, self.depth = t0, t1, depth
        pred = predicted_block_depths(trace, t0, t1, depth)  # (tokens, depth, layers, experts)
        tokens, _, layers, _ = pred.shape
        self.layers = layers
        self.flat = read_only(pred.reshape(-1, experts))
        top, top_p = _top_ids(self.flat, k)
        self.ids = [tuple(r) for r in top.tolist()]
        self.top_probs = [tuple(r) for r in top_p.tolist()]
        rows = np.arange(layers)
        # each predicted id as a flat residency index of its own layer, then row l of
        # depth d moved to layer l + d's (clipped), the depths side by side
        flat_ids = top.reshape(tokens, depth, layers, k) + (rows * experts)[:, None]
        later = np.minimum(rows[None, :] + np.arange(1, depth + 1)[:, None], layers - 1)
        full = np.concatenate([flat_ids[:, d, later[d]] for d in range(depth)], axis=2)
        self.gather = list(full.reshape(tokens * layers, depth * k))
        # loads of the predicted experts (one token each) and their costs, set by the user
        self.costs: tuple[tuple[int, ...], tuple[float, ...], tuple[float, ...]] | None = None


def _top_ids(p: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` largest entries' ids, most probable first, ties in the order of
    the introselect (argpartition) output, and those entries (``p`` at the ids). Where
    a row has no tie (or NaN) among its k + 1 largest values, its ids and their order
    are unique: they are found from the sorted values (numpy's vectorised sort of values,
    the entries at or above the row's k-th largest, ordered by one argsort of k), about
    half the introselect's time, and the entries are the sorted values negated back
    (exact). The rows with a tie take the introselect path as they always did. Each
    row's answer depends on that row alone, either way."""
    rows, n = p.shape
    if 0 < k < n:
        neg = -p
        s = np.sort(neg, axis=1)[:, : k + 1]
        exact = (s[:, :-1] < s[:, 1:]).all(axis=1)  # strict: k entries <= s[:, k - 1]
        if exact.all():
            return _by_value(neg, s, k)
        if exact.any():  # the tie-free rows by their values, the others as always
            ids = np.empty((rows, k), dtype=np.intp)
            top_p = np.empty((rows, k), dtype=p.dtype)
            ids[exact], top_p[exact] = _by_value(neg[exact], s[exact], k)
            tied = ~exact
            ids[tied], top_p[tied] = _introselect(p[tied], k)
            return ids, top_p
    return _introselect(p, k)


def _by_value(neg: np.ndarray, s: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_top_ids` of tie-free rows from ``neg = -p`` and its sorted first k + 1."""
    rows, n = neg.shape
    ids = (np.flatnonzero(neg <= s[:, k - 1 : k]) % n).reshape(rows, k)
    r = np.arange(rows)[:, None]
    ranked: np.ndarray = ids[r, np.argsort(neg[r, ids], axis=1)]
    return ranked, -s[:, :k]


def _introselect(p: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_top_ids` by the introselect: argpartition, then a stable ranking."""
    top = np.argpartition(-p, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(p, top, axis=1), axis=1, kind="stable")
    out: np.ndarray = np.take_along_axis(top, order, axis=1)
    return out, np.take_along_axis(p, out, axis=1)


def lookahead_layer(wl: Any, t0: int, t1: int, layer: int, depth: int) -> LookaheadLayer:
    """The prediction of MoE layer ``layer`` made ``depth`` layers earlier."""
    k = wl.model.top_k
    if t1 - t0 == 1:  # one decode token: its views of every layer are built at once
        return token_lookahead(wl, t0, layer - depth, depth)[-1]
    pred = wl.trace.predicted(t0, t1, layer, depth)
    mean = read_only(pred.mean(axis=0))
    top = np.argpartition(-pred, k - 1, axis=1)[:, :k]
    counts = np.bincount(top.ravel(), minlength=pred.shape[1])
    ids = np.flatnonzero(counts)
    ids = ids[np.argsort(-mean[ids], kind="stable")]
    loads = tuple(counts[ids].tolist())
    gpu_s, cpu_s = wl.costs.expert_times(loads)
    return LookaheadLayer(
        layer=layer,
        depth=depth,
        probs=mean,
        predicted=tuple(ids.tolist()),
        predicted_probs=tuple(mean[ids].tolist()),
        loads=loads,
        cached=tuple(wl.res.cached[layer, ids].tolist()),
        gpu_s=gpu_s,
        cpu_s=cpu_s,
    )


def token_lookahead(wl: Any, t: int, layer: int, depth: int) -> tuple[LookaheadLayer, ...]:
    """:func:`lookahead_layer` of decode token ``t`` for the ``depth`` layers after
    ``layer`` at once (the same views; the loads and their costs fetched once; the
    predictions of a block of tokens computed together)."""
    k = wl.model.top_k
    block = wl.predictions
    if block is None or not block.t0 <= t < block.t1:
        t1 = min(t + BLOCK_TOKENS, wl.trace.tokens)
        block = wl.predictions = PredictionBlock(
            wl.trace, t, t1, wl.prefetcher.lookahead_layers, k, wl.model.routed_experts
        )
    if block.costs is None:
        loads = unit_loads(k)
        block.costs = (loads, *wl.costs.expert_times(loads))
    loads, gpu_s, cpu_s = block.costs
    layers, i = block.layers, t - block.t0
    # the residency of every predicted expert of the next layers, read at once
    cached = tuple(wl.res.cached_flat[block.gather[i * layers + layer]].tolist())
    new = tuple.__new__
    flat, ids, top = block.flat, block.ids, block.top_probs
    # depth d's row, layer + d of depth d: r + d * (layers + 1)
    r, step = (i * block.depth - 1) * layers + layer, layers + 1
    # positional tuple construction (the hot path: one per lookahead layer and step)
    return tuple([
        new(LookaheadLayer, (layer + d, d, flat[r + d * step], ids[r + d * step],
                             top[r + d * step], loads, cached[(d - 1) * k : d * k],
                             gpu_s, cpu_s))
        for d in range(1, depth + 1)
    ])  # fmt: skip


def issue_prefetches(
    wl: Any, phase: Phase, t0: int, t1: int, layer: int, depth: int, router: float,
    end: float, out: list[tuple[str, str, float, float]],
) -> None:  # fmt: skip
    """Ask the prefetch policy at ``layer`` and queue the copies it chooses."""
    res = wl.res
    if t1 - t0 == 1:
        lookahead = token_lookahead(wl, t0, layer, depth)
    else:
        lookahead = tuple([lookahead_layer(wl, t0, t1, layer + d, d) for d in range(1, depth + 1)])
    # positional construction, in PrefetchView's field order (one per MoE layer-step)
    view = tuple.__new__(PrefetchView, (
        layer, phase, wl.costs.copy_s, wl.costs.cpu_first_s,
        max(res.pcie_free_s - router, 0.0), end - router, lookahead,
    ))  # fmt: skip
    experts = wl.model.routed_experts
    for target, expert in wl.prefetcher.prefetch(view):
        if not (layer < target <= layer + depth and 0 <= expert < experts):
            raise InvariantViolation(
                f"prefetch at layer {layer} asked for layer {target} expert {expert}"
            )
        copy = res.prefetch(wl.cache, int(target), int(expert), router)
        if copy is not None and wl.sim.recorder.record_spans:
            out.append(("pcie", f"prefetch L{target}E{expert}", copy[0], copy[1]))
