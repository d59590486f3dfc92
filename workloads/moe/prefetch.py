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
from hetsim.workloads.moe.routing import predicted_token_depths
from hetsim.workloads.moe.view import LookaheadLayer, Phase, PrefetchView


class TokenPredictions:
    """One decode token's predictions of every layer at every depth, computed at once.

    ``probs[d - 1]`` is (layers, experts); ``ids[d - 1]`` the top-k ids per layer, most
    probable first; ``prob_rows``, ``id_tuples`` and ``top_probs`` hold each layer's
    probability row (a read-only view), predicted ids and their probabilities (tuples)
    by depth. ``gather[l]``: the flat (layer x experts) indices of the predicted experts
    of the layers after ``l`` (depth 1 first), to read their residency in one step."""

    def __init__(self, trace: Any, t: int, depth: int, k: int, experts: int) -> None:
        self.t = t
        # every depth at once: (depth x layers, experts) rows, depth 1's layers first
        flat = read_only(predicted_token_depths(trace, t, depth).reshape(-1, experts))
        top, top_p = _top_ids(flat, k)
        layers = len(flat) // depth
        spans = [(d * layers, (d + 1) * layers) for d in range(depth)]
        self.probs = [flat[a:b] for a, b in spans]  # read-only views of a read-only array
        self.ids = [read_only(top[a:b]) for a, b in spans]
        rows = np.arange(layers)
        row_views = list(flat)
        id_rows = [tuple(r) for r in top.tolist()]
        p_rows = [tuple(r) for r in top_p.tolist()]
        self.prob_rows = [row_views[a:b] for a, b in spans]
        self.id_tuples = [id_rows[a:b] for a, b in spans]
        self.top_probs = [p_rows[a:b] for a, b in spans]
        # flat[d - 1][l]: the flat indices of layer l's predicted experts at depth d;
        # gather[l]: those of layers l + 1 .. l + depth, in turn (rows past the last
        # layer are clipped to it, and ignored)
        offsets = (rows * experts)[:, None]
        last = layers - 1
        full = np.concatenate(
            [(i + offsets)[np.minimum(rows + d, last)] for d, i in enumerate(self.ids, start=1)],
            axis=1,
        )
        self.gather = list(full)


def _top_ids(p: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` largest entries' ids, most probable first, ties in the order of
    the introselect (argpartition) output, and those entries (``p`` at the ids). Where
    no row has a tie (or a NaN) among its k + 1 largest values, the ids and their order
    are unique: they are found from the sorted values (numpy's vectorised sort of values,
    the entries at or above each row's k-th largest, ordered by one argsort of k per
    row), about half the introselect's time, and the entries are the sorted values
    negated back (exact). Otherwise the introselect path runs as it always did. Each
    row's answer depends on that row alone, either way."""
    neg = -p
    rows, n = p.shape
    if 0 < k < n:
        s = np.sort(neg, axis=1)[:, : k + 1]
        if (s[:, :-1] < s[:, 1:]).all():  # strict: exactly k entries <= s[:, k - 1]
            ids = (np.flatnonzero(neg <= s[:, k - 1 : k]) % n).reshape(rows, k)
            r = np.arange(rows)[:, None]
            ranked: np.ndarray = ids[r, np.argsort(neg[r, ids], axis=1)]
            return ranked, -s[:, :k]
    top = np.argpartition(neg, k - 1, axis=1)[:, :k]
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
    ``layer`` at once (the same views; the loads and their costs fetched once)."""
    k = wl.model.top_k
    cache = wl.predictions
    if cache is None or cache.t != t:
        cache = wl.predictions = TokenPredictions(
            wl.trace, t, wl.prefetcher.lookahead_layers, k, wl.model.routed_experts
        )
    loads = unit_loads(k)
    gpu_s, cpu_s = wl.costs.expert_times(loads)
    # the residency of every predicted expert of the next layers, read at once
    cached = wl.res.cached_flat[cache.gather[layer]].tolist()
    new = tuple.__new__
    rows, ids, top = cache.prob_rows, cache.id_tuples, cache.top_probs
    # positional tuple construction (the hot path: one per lookahead layer and step)
    return tuple([
        new(LookaheadLayer, (layer + d, d, rows[d - 1][layer + d], ids[d - 1][layer + d],
                             top[d - 1][layer + d], loads, tuple(cached[(d - 1) * k : d * k]),
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
