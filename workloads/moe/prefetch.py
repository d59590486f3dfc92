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
from hetsim.workloads.moe.routing import predicted_token
from hetsim.workloads.moe.view import LookaheadLayer, Phase, PrefetchView


class TokenPredictions:
    """One decode token's predictions of every layer at every depth, computed at once.

    ``probs[d - 1]`` is (layers, experts); ``ids[d - 1]`` the top-k ids per layer, most
    probable first. Both are read-only, so their rows go into views as they are."""

    def __init__(self, trace: Any, t: int, depth: int, k: int) -> None:
        self.t = t
        self.probs = [read_only(predicted_token(trace, t, d)) for d in range(1, depth + 1)]
        self.ids = []
        for p in self.probs:
            top = np.argpartition(-p, k - 1, axis=1)[:, :k]
            order = np.argsort(-np.take_along_axis(p, top, axis=1), axis=1, kind="stable")
            self.ids.append(read_only(np.take_along_axis(top, order, axis=1)))


def lookahead_layer(wl: Any, t0: int, t1: int, layer: int, depth: int) -> LookaheadLayer:
    """The prediction of MoE layer ``layer`` made ``depth`` layers earlier."""
    k = wl.model.top_k
    if t1 - t0 == 1:
        cache = wl.predictions
        if cache is None or cache.t != t0:
            cache = wl.predictions = TokenPredictions(
                wl.trace, t0, wl.prefetcher.lookahead_layers, k
            )
        mean = cache.probs[depth - 1][layer]  # read-only views of read-only arrays
        ids = cache.ids[depth - 1][layer]
        loads = unit_loads(k)
    else:
        pred = wl.trace.predicted(t0, t1, layer, depth)
        mean = read_only(pred.mean(axis=0))
        top = np.argpartition(-pred, k - 1, axis=1)[:, :k]
        counts = np.bincount(top.ravel(), minlength=pred.shape[1])
        ids = np.flatnonzero(counts)
        ids = read_only(ids[np.argsort(-mean[ids], kind="stable")])
        loads = read_only(counts[ids])
    gpu_s, cpu_s = wl.costs.expert_times(loads)
    return LookaheadLayer(
        layer=layer,
        depth=depth,
        probs=mean,
        predicted=ids,
        loads=loads,
        cached=read_only(wl.res.cached[layer, ids]),
        gpu_s=gpu_s,
        cpu_s=cpu_s,
    )


def issue_prefetches(
    wl: Any, phase: Phase, t0: int, t1: int, layer: int, depth: int, router: float,
    end: float, out: list[tuple[str, str, float, float]],
) -> None:  # fmt: skip
    """Ask the prefetch policy at ``layer`` and queue the copies it chooses."""
    res = wl.res
    view = PrefetchView(
        layer=layer,
        phase=phase,
        copy_s=wl.costs.copy_s,
        cpu_first_s=wl.costs.cpu_first_s,
        pcie_free_s=max(res.pcie_free_s - router, 0.0),
        layer_end_s=end - router,
        lookahead=tuple(lookahead_layer(wl, t0, t1, layer + d, d) for d in range(1, depth + 1)),
    )
    experts = wl.model.routed_experts
    for target, expert in wl.prefetcher.prefetch(view):
        if not (layer < target <= layer + depth and 0 <= expert < experts):
            raise InvariantViolation(
                f"prefetch at layer {layer} asked for layer {target} expert {expert}"
            )
        copy = res.prefetch(wl.cache, int(target), int(expert), router)
        if copy is not None and wl.sim.recorder.record_spans:
            out.append(("pcie", f"prefetch L{target}E{expert}", copy[0], copy[1]))
