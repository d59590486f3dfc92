"""A decode token decided at every layer at once equals the layer-by-layer decisions:
top-k gating (value sort with the introselect fallback on ties), MRS top-p scores,
and a whole run with and without the token hooks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hetsim.schedulers.moe.cache_mrs import MrsCache, MrsParams
from hetsim.schedulers.moe.gating_topk import TopKGating, TopKParams, topk_mask
from hetsim.workloads.moe.view import AllocationView, GatingView, TokenGatingView
from tests.moe_helpers import hybrimoe_mixtral

RNG = np.random.default_rng(0)


def _probs(rng: np.random.Generator, layers: int, experts: int, ties: bool) -> np.ndarray:
    p = rng.random((layers, experts)).astype(np.float32)
    if ties:  # few distinct values: ties at the k-th largest in most rows
        p = (np.round(p * 4) / 4).astype(np.float32)
    return p


@pytest.mark.parametrize("ties", [False, True])
def test_topk_rows_at_once_equal_row_by_row(ties: bool) -> None:
    rng = np.random.default_rng(1)
    gating = TopKGating(TopKParams(), RNG)
    for k in (1, 2, 8, 31, 32):
        p = _probs(rng, 20, 32, ties)
        token = gating.select_token(TokenGatingView("decode", k, p, None, False))
        for layer in range(len(p)):
            one = gating.select(GatingView(layer, "decode", k, p[layer : layer + 1], None, False))
            assert np.array_equal(token[layer], one[0]), (k, layer)
        # the multi-token (prefill) mask is the same rows
        assert np.array_equal(topk_mask(p, k), token)


@pytest.mark.parametrize("ties", [False, True])
def test_mrs_scores_with_the_token_hook_equal_layer_by_layer(ties: bool) -> None:
    rng = np.random.default_rng(2)
    layers, experts = 6, 16
    view = AllocationView(
        layers, experts, 2, 12, np.zeros(layers), np.zeros(layers), np.zeros((layers, experts))
    )
    plain, hooked = MrsCache(MrsParams(p_factor=3), RNG), MrsCache(MrsParams(p_factor=3), RNG)
    plain.allocate(view)
    hooked.allocate(view)
    for step in range(5):
        p = _probs(rng, layers, experts, ties)
        sel = np.zeros((layers, experts), dtype=bool)
        for layer in range(layers):  # 1 or 2 experts: p differs by layer
            sel[layer, rng.choice(experts, 1 + layer % 2, replace=False)] = True
        sel[0] = True  # p = 3 x 16 >= experts: every expert
        hooked.observe_token(p, sel, step)
        for layer in range(layers):
            plain.observe(layer, p[layer : layer + 1], sel[layer : layer + 1], step)
            hooked.observe(layer, p[layer : layer + 1], sel[layer : layer + 1], step)
            assert np.array_equal(plain.score, hooked.score)  # bit for bit, layer by layer


def _run(hooks: bool) -> tuple[list[list[Any]], dict[str, Any]]:
    sim, wl = hybrimoe_mixtral("token-batch", 3, 16)
    assert wl._select_token is not None and wl._observe_token is not None
    if not hooks:  # the layer-by-layer path
        wl._select_token = None
        wl._observe_token = None
    wl.start()
    sim.run(until=wl.done)
    wl.check()
    tables = wl._layers.column_lists() + wl._steps_tbl.column_lists()
    return tables, wl.summary(sim.now)


def test_a_run_with_the_token_hooks_is_the_layer_by_layer_run() -> None:
    assert _run(True) == _run(False)


@pytest.mark.parametrize("ties", [False, True])
def test_block_predictions_of_all_depths_equal_token_by_token(ties: bool) -> None:
    """The predictions of a block of tokens at every depth are bit for bit those of
    each token and depth alone, and their top-k ids and probabilities are the
    introselect's, ranked (tie-free rows: the unique answer; rows with ties: the
    fallback path, row by row); the residency gather indices name the next layers'
    predicted experts."""
    from hetsim.workloads.moe.prefetch import PredictionBlock
    from hetsim.workloads.moe.routing import RoutingTrace, predicted_token

    rng = np.random.default_rng(7)
    tokens, layers, experts, k, depth = 6, 12, 32, 4, 3
    logits = rng.standard_normal((tokens, layers, experts)).astype(np.float32)
    eps = rng.standard_normal((tokens, layers, experts)).astype(np.float32)
    if ties:  # equal logits and no noise in every other layer: tied probabilities
        logits = np.round(logits).astype(np.float32)
        eps[:, ::2] = 0.0
    trace = RoutingTrace(logits, eps, rng.random(layers))
    block = PredictionBlock(trace, 1, 5, depth, k, experts)
    assert not block.flat.flags.writeable
    for t in range(1, 5):
        for d in range(1, depth + 1):
            alone = predicted_token(trace, t, d)
            for layer in range(layers):
                r = (((t - 1) * depth + d - 1) * layers) + layer
                assert block.flat[r].tobytes() == alone[layer].tobytes()
                row = alone[layer]
                top = np.argpartition(-row, k - 1)[:k]
                ranked = top[np.argsort(-row[top], kind="stable")]
                assert block.ids[r] == tuple(ranked.tolist())
                assert block.top_probs[r] == tuple(row[ranked].tolist())
                if layer >= d:  # layer - d's gather holds this layer's ids at depth d
                    g = block.gather[(t - 1) * layers + layer - d][(d - 1) * k : d * k]
                    assert (g // experts == layer).all()
                    assert tuple((g % experts).tolist()) == block.ids[r]
