"""MoE policies on hand-built snapshots (no simulation running)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hetsim.schedulers.moe._params import NoParams
from hetsim.schedulers.moe.cache_adapmoe import AdapMoECache, dp_allocate, expected_misses
from hetsim.schedulers.moe.cache_lru import LruCache
from hetsim.schedulers.moe.cache_mrs import MrsCache, MrsParams
from hetsim.schedulers.moe.gating_adapmoe import AdapMoEGating, AdapMoEGatingParams
from hetsim.schedulers.moe.gating_topk import TopKGating, TopKParams
from hetsim.schedulers.moe.hss import hss
from hetsim.schedulers.moe.placement_hybrimoe import HybriMoEPlacement
from hetsim.schedulers.moe.placement_ktransformers import KTransformersPlacement
from hetsim.schedulers.moe.placement_llamacpp import LlamaCppPlacement
from hetsim.schedulers.moe.prefetch_gate import GatePrefetch, GatePrefetchParams
from hetsim.schedulers.moe.prefetch_impact import ImpactPrefetch, ImpactPrefetchParams
from hetsim.workloads.moe.view import (
    AllocationView,
    CacheView,
    GatingView,
    LookaheadLayer,
    PlacementView,
    PrefetchView,
)

RNG = np.random.default_rng(0)
A = np.asarray


def test_hss_four_experts_by_hand() -> None:
    # loads (3, 1, 2, 1); experts 0 and 3 cached; GPU 1 s each, CPU 1 s per token, copy 2 s.
    # queue = cached by load desc (0, 3) + uncached by load desc (2, 1) = [0, 3, 2, 1]
    # 1: front 0 GPU ends 1 <= back 1 CPU ends 1   -> GPU takes 0 (g = 1)
    # 2: front 3 GPU ends 2 >  back 1 CPU ends 1   -> CPU takes 1 (c = 1)
    # 3: front 3 GPU ends 2 <= back 2 CPU ends 3   -> GPU takes 3 (g = 2)
    # 4: front 2 copy ends 2, GPU ends 3 <= CPU 3  -> GPU takes 2 (copied; g = 3)
    r = hss([1.0] * 4, [3.0, 1.0, 2.0, 1.0], [True, False, False, True], [0.0] * 4,
            [3, 1, 2, 1], copy_s=2.0)  # fmt: skip
    assert r.gpu == (0, 3, 2) and r.cpu == (1,) and r.makespan_s == 3.0
    # brute force over every GPU/CPU split (GPU: cached first, then copies in order)
    best = min(
        max(_gpu_time(g, [True, False, False, True], 2.0), sum([3, 1, 2, 1][i] for i in range(4) if i not in g))
        for n in range(5) for g in itertools.combinations(range(4), n)
    )  # fmt: skip
    assert r.makespan_s == best


def _gpu_time(gpu: tuple[int, ...], cached: list[bool], copy_s: float) -> float:
    t = p = 0.0
    for i in sorted(gpu, key=lambda i: not cached[i]):
        if not cached[i]:
            p += copy_s
            t = max(t, p)
        t += 1.0
    return t


def test_hss_cpu_intercept_moves_work_to_gpu() -> None:
    # two uncached experts, GPU 1 s, CPU 1 s, copy 0.5 s; a 10 s CPU intercept makes the
    # CPU never worth it: GPU runs both, copies at 0.5 and 1.0, ends max(0.5,0)+1 -> 1.5,
    # then max(1.5, 1.0) + 1 = 2.5.
    r = hss([1.0, 1.0], [1.0, 1.0], [False, False], [0.0, 0.0], [1, 1], 0.5, cpu_first_s=10.0)
    assert r.cpu == () and r.makespan_s == 2.5


def _placement_view(cached: list[bool], layer_resident: bool = False) -> PlacementView:
    n = len(cached)
    return PlacementView(
        layer=0, phase="decode", experts=(2, 5, 7, 9)[:n], loads=(3, 1, 2, 1)[:n],
        cached=tuple(cached), ready_s=(0.0,) * n, gpu_s=(1.0,) * n,
        cpu_s=(3.0, 1.0, 2.0, 1.0)[:n], cpu_first_s=0.0, copy_s=2.0, gpu_free_s=0.0,
        cpu_free_s=0.0, pcie_free_s=0.0, layer_resident=layer_resident,
        dense_gpu_s=0.1, dense_cpu_s=1.0,
    )  # fmt: skip


def test_hybrimoe_placement_maps_hss_indices_to_expert_ids() -> None:
    p = HybriMoEPlacement(NoParams(), RNG).place(_placement_view([True, False, False, True]))
    assert p.gpu == (2, 9, 7) and p.cpu == (5,) and not p.dense_on_cpu


def test_ktransformers_and_llamacpp_placements() -> None:
    kt = KTransformersPlacement(NoParams(), RNG).place(_placement_view([True, False, False, True]))
    assert kt.gpu == (2, 9) and kt.cpu == (5, 7)  # CPU by ascending load: 1 then 2
    lc = LlamaCppPlacement(NoParams(), RNG)
    assert lc.place(_placement_view([True] * 4, layer_resident=True)).gpu == (2, 5, 7, 9)
    cpu_layer = lc.place(_placement_view([True, False, False, True]))
    assert cpu_layer.cpu == (2, 5, 7, 9) and cpu_layer.dense_on_cpu


def _gating(probs: list[list[float]], sens: float, phase: str = "decode") -> GatingView:
    return GatingView(0, phase, 2, A(probs), sens, True)  # type: ignore[arg-type]


def test_topk_and_adapmoe_gating_rule() -> None:
    probs = [[0.6, 0.3, 0.1, 0.0], [0.4, 0.35, 0.15, 0.1]]
    assert TopKGating(TopKParams(), RNG).select(_gating(probs, 1.0)).sum(axis=1).tolist() == [2, 2]
    # renormalised w2: 0.3/0.9 = 1/3 and 0.35/0.75 = 7/15.
    # F = 0.04, T = 0.005: 0.04/9 = 0.0044 < T -> drop; 0.04*(7/15)^2 = 0.0087 >= T -> keep
    g = AdapMoEGating(AdapMoEGatingParams(threshold=0.005), RNG)
    mask = g.select(_gating(probs, 0.04))
    assert mask.tolist() == [[True, False, False, False], [True, True, False, False]]
    assert g.select(_gating(probs, 0.04, "prefill")).sum() == 4  # decode only
    with pytest.raises(ValueError, match="sensitivity"):
        g.select(_gating(probs, None))  # type: ignore[arg-type]


def test_expected_misses_closed_forms() -> None:
    # nothing cached, top-2 of 8, no prefetch: both selected experts miss -> 2
    assert expected_misses(8, 2, 0, 0.0, 0.0) == pytest.approx(2.0)
    assert expected_misses(8, 2, 8, 0.3, 0.5) == pytest.approx(0.0)
    # top-1 tokens only, 2 of 8 cached, accuracy 0.5: (1 - 2/8) * 0.5
    assert expected_misses(8, 2, 2, 1.0, 0.5) == pytest.approx(0.375)
    # papers/moe.md formula at s = 3, r1 = 0.25, a = 0.8:
    # P2 = C(5,2)/28 = 10/28, P1 = 3*5/28 = 15/28 (the one-uncached term unweighted)
    want = 0.25 * (5 / 8) * 0.2 + 0.75 * (10 / 28 * (2 * 0.2 + 0.8) + 15 / 28 * 0.2)
    assert expected_misses(8, 2, 3, 0.25, 0.8) == pytest.approx(want)


def test_dp_allocation_matches_brute_force() -> None:
    top1, acc = [0.0, 0.5, 0.9], [0.0, 0.8, 0.9]
    cost = np.array(
        [[expected_misses(4, 2, s, top1[i], acc[i]) for s in range(5)] for i in range(3)]
    )
    for total in (3, 6, 9):
        dp = dp_allocate(cost, total, 1)
        best = min(
            (c for c in itertools.product(range(1, 5), repeat=3) if sum(c) == total),
            key=lambda c: sum(cost[i, c[i]] for i in range(3)),
        )
        assert sum(dp) == total
        assert sum(cost[i, dp[i]] for i in range(3)) == pytest.approx(
            sum(cost[i, best[i]] for i in range(3))
        )
    # the unprefetchable, top-2-only layer 0 gets the most slots
    view = AllocationView(3, 4, 2, 6, A(top1), A(acc), np.zeros((3, 4)))
    slots = AdapMoECache(AdapMoECache.Params(), RNG).allocate(view)
    assert sum(slots) == 6 and slots[0] == max(slots)


def _cache_view(
    cached: list[int], incoming: list[int], protected: list[int] = (), prefetch: bool = False
) -> CacheView:  # type: ignore[assignment]
    mask = np.zeros(4, dtype=bool)
    mask[cached] = True
    guard = np.zeros(4, dtype=bool)
    guard[list(protected)] = True
    return CacheView(0, 3, len(cached), mask, mask & ~guard, tuple(incoming), prefetch)


def test_mrs_scores_and_eviction_order() -> None:
    mrs = MrsCache(MrsParams(alpha=0.5, p_factor=1), RNG)
    mrs.allocate(AllocationView(1, 4, 1, 3, A([0.0]), A([0.0]), np.zeros((1, 4))))
    for probs, chosen in (
        ([0.4, 0.3, 0.2, 0.1], 0),
        ([0.1, 0.2, 0.3, 0.4], 3),
        ([0.1, 0.5, 0.3, 0.1], 1),
    ):
        sel = np.zeros((1, 4), dtype=bool)
        sel[0, chosen] = True
        mrs.observe(0, A([probs]), sel, 0)
    # top-1 each time: S = [0.2,0,0,0] -> [0.1,0,0,0.2] -> [0.05,0.25,0,0.1]
    assert mrs.score[0].tolist() == pytest.approx([0.05, 0.25, 0.0, 0.1])
    # public-code admission: a demand load enters even with score 0 < lowest 0.05
    assert mrs.admit(_cache_view([0, 1, 3], [2])).evict == (0,)
    assert mrs.admit(_cache_view([0, 1, 3], [2], prefetch=True)).evict == (0,)
    assert mrs.admit(_cache_view([0, 1, 3], [2], [0], prefetch=True)).evict == (3,)
    # a multi-token step equals token-by-token updates
    two = MrsCache(MrsParams(alpha=0.5, p_factor=1), RNG)
    two.allocate(AllocationView(1, 4, 1, 3, A([0.0]), A([0.0]), np.zeros((1, 4))))
    sel = np.zeros((3, 4), dtype=bool)
    sel[[0, 1, 2], [0, 3, 1]] = True
    two.observe(0, A([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.1, 0.5, 0.3, 0.1]]), sel, 0)
    assert two.score[0].tolist() == pytest.approx([0.05, 0.25, 0.0, 0.1])


def test_lru_evicts_least_recent_unprotected() -> None:
    lru = LruCache(NoParams(), RNG)
    lru.allocate(AllocationView(1, 4, 1, 3, A([0.0]), A([0.0]), np.zeros((1, 4))))
    for e in (1, 0, 3):
        sel = np.zeros((1, 4), dtype=bool)
        sel[0, e] = True
        lru.observe(0, A([[0.25] * 4]), sel, 0)
    assert lru.admit(_cache_view([0, 1, 3], [2])) == ((2,), (1,))
    assert lru.admit(_cache_view([0, 1, 3], [2], [1])).evict == (0,)


def _lookahead(cached: list[bool]) -> LookaheadLayer:
    return LookaheadLayer(
        layer=4, depth=1, probs=A([0.0, 0.2, 0.0, 0.5]), predicted=(3, 1),
        predicted_probs=(0.5, 0.2), loads=(1, 1), cached=tuple(cached), gpu_s=(1.0, 1.0),
        cpu_s=(5.0, 5.0),
    )  # fmt: skip


def test_impact_prefetch_by_hand() -> None:
    # both predicted experts uncached, GPU 1 s, CPU 5 s, copy 2 s: the HSS makespan is 5
    # (copies end at 2 and 4, GPU ends 3 and 5); with one cached it is 3; with both, 2.
    # Impacts 2 (tie, the more probable expert 3 first), then 1. Copies end at 2 and 4,
    # before the layer starts (1 x 10 s ahead).
    view = PrefetchView(3, "decode", 2.0, 0.0, 0.0, 10.0, (_lookahead([False, False]),))
    pf = ImpactPrefetch(ImpactPrefetchParams(), RNG)
    assert pf.makespan(view.lookahead[0], [False, False], view) == 5.0
    assert pf.prefetch(view) == ((4, 3), (4, 1))
    late = view._replace(layer_end_s=1.5)  # a copy would land after the layer starts
    assert pf.prefetch(late) == ()


def test_gate_prefetch_takes_first_uncached_predicted() -> None:
    view = PrefetchView(3, "decode", 2.0, 0.0, 0.0, 10.0, (_lookahead([True, False]),))
    assert GatePrefetch(GatePrefetchParams(), RNG).prefetch(view) == ((4, 1),)
    assert GatePrefetch(GatePrefetchParams(), RNG).prefetch(view._replace(phase="prefill")) == ()


def _hss_reference(gpu_s, cpu_s, cached, ready_s, loads, copy_s, g, c, p, first):  # type: ignore[no-untyped-def]
    """The greedy as the module docstring states it, both sides priced afresh each step."""
    hot = sorted((i for i in range(len(gpu_s)) if cached[i]), key=lambda i: -loads[i])
    cold = sorted((i for i in range(len(gpu_s)) if not cached[i]), key=lambda i: -loads[i])
    queue, gpu, cpu = hot + cold, [], []
    while queue:
        f, b = queue[0], queue[-1]
        arrive = ready_s[f] if cached[f] else p + copy_s
        gf = max(g, arrive) + gpu_s[f]
        cf = c + cpu_s[b] + (first if not cpu else 0.0)
        if gf <= cf:
            gpu.append(queue.pop(0))
            g, p = gf, (p if cached[f] else p + copy_s)
        else:
            cpu.append(queue.pop())
            c = cf
    return tuple(gpu), tuple(cpu), max(g, c)


def test_hss_matches_the_greedy_priced_afresh_ties_included() -> None:
    # few distinct values, so ties between the sides and between loads are common
    rng = np.random.default_rng(21)
    values = [0.25, 0.5, 1.0, 1.5, 2.0]
    for _ in range(3000):
        n = int(rng.integers(0, 10))
        pick = lambda m: tuple(float(x) for x in rng.choice(values, m))  # noqa: E731
        cached = tuple(bool(x) for x in rng.random(n) < 0.5)
        ready = tuple(
            r if c and rng.random() < 0.3 else 0.0 for r, c in zip(pick(n), cached, strict=True)
        )
        loads = tuple(int(x) for x in rng.integers(1, 3, n)) if rng.random() < 0.5 else (1,) * n
        args = (pick(n), pick(n), cached, ready, loads, *pick(5))
        r = hss(*args)
        assert (r.gpu, r.cpu, r.makespan_s) == _hss_reference(*args)
