"""Serving policies on hand-built views (no simulation running)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hetsim.schedulers.serving._milp import min_cost_counts
from hetsim.schedulers.serving._pools import pools
from hetsim.schedulers.serving.batch_sarathi import SarathiBatching, SarathiBatchParams
from hetsim.schedulers.serving.batch_vllm import VllmBatching, VllmBatchParams
from hetsim.schedulers.serving.deploy_cauchy import CauchyDeployment, CauchyParams
from hetsim.schedulers.serving.deploy_colocated import ColocatedDeployment, ColocatedParams
from hetsim.schedulers.serving.route_goodput_wrr import (
    GoodputWrrParams,
    GoodputWrrRouting,
    smooth_wrr,
)
from hetsim.schedulers.serving.route_jsq import JsqParams, JsqRouting
from hetsim.workloads.serving.view import (
    BatchView,
    ConfigView,
    DeploymentView,
    InstanceView,
    RouteView,
)

RNG = np.random.default_rng(0)


def test_smooth_wrr_sequence_for_weights_5_1_1() -> None:
    # nginx's smooth WRR with weights a=5, b=1, c=1 yields a a b a c a a (by hand:
    # scores after adding weights 5,1,1 -> pick a, a -= 7; 3,2,2 -> a; 1,3,3 -> b; ...)
    scores: dict[int, float] = {}
    seq = [smooth_wrr(scores, {0: 5.0, 1: 1.0, 2: 1.0}) for _ in range(7)]
    assert seq == [0, 0, 1, 0, 2, 0, 0]
    assert all(abs(v) < 1e-12 for v in scores.values())  # back to zero after a full cycle


def test_milp_matches_brute_force() -> None:
    cost = np.array([3.0, 5.0, 2.0])
    goodput = np.array([4.0, 7.0, 2.5])
    use = np.array([[1, 0, 2], [1, 2, 0]], dtype=float)  # GPUs of type 0 / type 1 per unit
    avail = np.array([5.0, 6.0])
    for demand in (1.0, 9.0, 14.0, 20.0, 26.0):
        best = None
        for x in itertools.product(range(6), repeat=3):
            xa = np.array(x)
            if goodput @ xa >= demand and (use @ xa <= avail).all():
                c = cost @ xa
                best = c if best is None or c < best else best
        got = min_cost_counts(cost, goodput, use, avail, demand)
        if best is None:
            assert got is None
        else:
            assert got is not None and cost @ got == best
    assert min_cost_counts(cost, goodput, use, avail, 1000.0) is None


def _batch_view(running: int, waiting: tuple[tuple[int, int], ...], free: int) -> BatchView:
    return BatchView(0.0, "mixed", running, waiting, free, 16)


def test_vllm_admits_whole_prompts_until_a_limit() -> None:
    pol = VllmBatching(VllmBatchParams(max_num_batched_tokens=1000), RNG)
    # 400 + 500 fit the 1000-token budget, 300 more would not
    plan = pol.plan(_batch_view(3, ((400, 0), (500, 0), (300, 0)), 10_000))
    assert plan.chunks == (400, 500) and not plan.with_decodes
    # KV: 400 tokens need 25 blocks; only 24 free -> nothing admitted, decodes run
    plan = pol.plan(_batch_view(3, ((400, 0),), 24 * 16))
    assert plan.chunks == () and plan.with_decodes


def test_sarathi_chunks_prefill_under_the_budget() -> None:
    pol = SarathiBatching(SarathiBatchParams(token_budget=512), RNG)
    # 12 decodes take 12 tokens; 500 remain: 300 finishes a partial prompt (200 done),
    # then a 200-token chunk of the next 1000-token prompt
    plan = pol.plan(_batch_view(12, ((300, 200), (1000, 0)), 10_000))
    assert plan.chunks == (300, 200) and plan.with_decodes


def _configs() -> tuple[ConfigView, ...]:
    # (type, tp, gpus, $/h, kv, G_P, G_D, G_colo): "fast" is compute-rich, "cheap"
    # bandwidth-per-dollar rich
    return (
        ConfigView("fast", 1, 1, 8.0, 10**6, 20.0, 4.0, 3.5),
        ConfigView("cheap", 1, 1, 2.0, 10**6, 2.0, 3.0, 1.0),
    )


def test_cauchy_pairs_fast_prefill_with_cheap_decode() -> None:
    view = DeploymentView(12.0, 1000.0, 200.0, 1.0, 0.05, (("fast", 4), ("cheap", 8)), _configs())
    pol = CauchyDeployment(CauchyParams(pd_ratios=[(1, 1), (1, 4)]), RNG)
    got = pol.deploy(view)
    # combos (goodput min(n_p G_P, n_d G_D), $/h): fast+4 cheap: min(20, 12) = 12 at
    # 8 + 8 = 16 $/h -> 0.75 req/s per $/h, the best; one replica meets 12 req/s.
    # Homogeneous alternatives cost more: colocated fast needs 4 x 8 = 32 $/h.
    roles = sorted((s.role, s.gpu_type) for s in got)
    assert roles == [("decode", "cheap")] * 4 + [("prefill", "fast")]
    assert {s.group for s in got} == {0}
    colo = ColocatedDeployment(ColocatedParams(), RNG).deploy(view)
    assert [s.gpu_type for s in colo] == ["fast"] * 4  # ceil(12 / 3.5) = 4 < 8 x 1.0 cheap


def _fleet_cost(specs: tuple, configs: tuple[ConfigView, ...]) -> tuple[float, float]:
    """($/h, W at goodput) of a deployment, from the configs its instances run."""
    by_key = {(c.gpu_type, c.tp, c.power_cap_w): c for c in configs}
    chosen = [by_key[(s.gpu_type, s.tp, s.power_cap_w)] for s in specs]
    return sum(c.usd_per_hour for c in chosen), sum(c.colocated_W for c in chosen)


def test_colocated_energy_objective_picks_the_least_power_fleet() -> None:
    # (type, tp, gpus, $/h, kv, G_P, G_D, G_colo, buckets, cap W, colocated W)
    configs = (
        ConfigView("fast", 1, 1, 8.0, 10**6, 20.0, 4.0, 3.5, (), None, 600.0),
        ConfigView("fast", 1, 1, 8.0, 10**6, 14.0, 3.0, 2.5, (), 350.0, 330.0),
        ConfigView("cheap", 1, 1, 2.0, 10**6, 2.0, 3.0, 1.0, (), None, 300.0),
    )
    view = DeploymentView(7.0, 1000.0, 200.0, 1.0, 0.05, (("fast", 4), ("cheap", 8)), configs)
    # by hand: fast 2 x (8 $/h, 600 W) = 16 $/h, 1200 W; fast@350 3 x = 24 $/h, 990 W;
    # cheap 7 x = 14 $/h, 2100 W
    usd = ColocatedDeployment(ColocatedParams(), RNG).deploy(view)
    watts = ColocatedDeployment(ColocatedParams(objective="energy"), RNG).deploy(view)
    assert [(s.gpu_type, s.power_cap_w) for s in usd] == [("cheap", None)] * 7
    assert [(s.gpu_type, s.power_cap_w) for s in watts] == [("fast", 350.0)] * 3
    assert [s.group for s in watts] == [0, 1, 2]  # one routing group per instance
    assert _fleet_cost(usd, configs) == (14.0, 2100.0)
    assert _fleet_cost(watts, configs) == (24.0, 990.0)


def test_colocated_objectives_each_win_their_own_cost() -> None:
    """On random views: the energy objective's fleet draws no more W than the usd
    objective's, and the usd one costs no more $/h (both minimise over the same
    feasible homogeneous fleets)."""
    rng = np.random.default_rng(7)
    for _ in range(40):
        configs = tuple(
            ConfigView(
                t, tp, tp, float(rng.uniform(1, 10)) * tp, 10**6, 1.0, 1.0,
                float(rng.uniform(0.5, 6)), (), cap, float(rng.uniform(100, 900)) * tp,
            )
            for t in ("a", "b", "c") for tp in (1, 2) for cap in (None, 300.0)
        )  # fmt: skip
        view = DeploymentView(
            float(rng.uniform(1, 20)), 1000.0, 200.0, 1.0, 0.05,
            (("a", 16), ("b", 16), ("c", 16)), configs,
        )  # fmt: skip
        u = _fleet_cost(ColocatedDeployment(ColocatedParams(), RNG).deploy(view), configs)
        e = _fleet_cost(
            ColocatedDeployment(ColocatedParams(objective="energy"), RNG).deploy(view), configs
        )
        assert e[1] <= u[1] + 1e-9
        assert u[0] <= e[0] + 1e-9


def test_energy_objective_prices_colocated_pools_only() -> None:
    view = DeploymentView(1.0, 1000.0, 200.0, 1.0, 0.05, (("fast", 4),), _configs())
    with pytest.raises(ValueError, match="mixed"):
        pools(view, [("prefill", list(_configs()))], 0.0, "energy")


def _inst(n: int, group: int, queued: int, running: int, free: int, g: float) -> InstanceView:
    return InstanceView(n, group, "x", "prefill", 0, queued, running, free, g)


def test_goodput_wrr_splits_entry_by_group_goodput() -> None:
    pol = GoodputWrrRouting(GoodputWrrParams(), RNG)
    insts = (_inst(0, 0, 0, 0, 100, 3.0), _inst(1, 1, 0, 0, 100, 1.0))
    picks = [pol.route(RouteView(0.0, i, 10, "entry", -1, insts)) for i in range(8)]
    assert picks.count(0) == 6 and picks.count(1) == 2  # 3:1 weights


def test_goodput_wrr_caps_a_combo_at_its_decode_goodput() -> None:
    # Two combos with 10 req/s of prefill each; combo 1's decode instances carry only 5
    # req/s (RouteView.group_decode_rps), so its weight is min(10, 5): a 2:1 split.
    pol = GoodputWrrRouting(GoodputWrrParams(), RNG)
    insts = (_inst(0, 0, 0, 0, 100, 10.0), _inst(1, 1, 0, 0, 100, 10.0))
    view = RouteView(0.0, 0, 10, "entry", -1, insts, group_decode_rps=((0, 20.0), (1, 5.0)))
    picks = [pol.route(view) for _ in range(9)]
    assert picks.count(0) == 6 and picks.count(1) == 3


def test_goodput_wrr_routes_by_the_deployment_bucket_plan() -> None:
    # Melange plan: instances 0 and 1 planned for bucket 4 at 1 and 3 req/s, instance 2
    # not at all. Smooth WRR over {0: 1, 1: 3}: scores (1, 3) -> 1; (2, 2) tie -> 0;
    # (-1, 5) -> 1; (0, 4) -> 1: sequence 1, 0, 1, 1 and never instance 2, whatever its
    # goodput weight; bucket 7 (no plan) falls back to goodput weights.
    pol = GoodputWrrRouting(GoodputWrrParams(), RNG)
    insts = (_inst(0, 0, 0, 0, 100, 1.0), _inst(1, 1, 0, 0, 100, 1.0), _inst(2, 2, 0, 0, 100, 50.0))
    view = RouteView(0.0, 0, 10, "entry", -1, insts, bucket=4, planned_rps=(1.0, 3.0, 0.0))
    assert [pol.route(view) for _ in range(4)] == [1, 0, 1, 1]
    other = view._replace(bucket=7, planned_rps=(0.0, 0.0, 0.0))
    assert pol.route(other) == 2


def test_goodput_wrr_decode_stays_in_combo_unless_full() -> None:
    pol = GoodputWrrRouting(GoodputWrrParams(), RNG)
    dec = (_inst(2, 0, 0, 5, 50, 1.0), _inst(3, 1, 0, 1, 5000, 1.0))
    assert pol.route(RouteView(0.0, 0, 40, "decode", 0, dec)) == 2  # own combo has room
    assert pol.route(RouteView(0.0, 0, 400, "decode", 0, dec)) == 3  # fallback


def test_jsq_picks_fewest_queued_tokens_then_most_free_kv() -> None:
    pol = JsqRouting(JsqParams(), RNG)
    insts = (_inst(0, 0, 900, 0, 10, 1.0), _inst(1, 0, 100, 9, 20, 1.0))
    assert pol.route(RouteView(0.0, 0, 10, "entry", -1, insts)) == 1
    assert pol.route(RouteView(0.0, 0, 10, "decode", 0, insts)) == 1
