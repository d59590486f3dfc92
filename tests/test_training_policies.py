"""Training policies on hand-built views (no simulation running) and pipeline schedules."""

from __future__ import annotations

import numpy as np
import pytest

from hetsim.schedulers.training.chameleon import STABLE, WARMUP, Chameleon, ChameleonParams
from hetsim.schedulers.training.gpipe import GPipe, GPipeParams
from hetsim.schedulers.training.interleaved import Interleaved, InterleavedParams
from hetsim.schedulers.training.one_f_one_b import OneFOneB, OneFOneBParams
from hetsim.schedulers.training.slimpipe import SlimPipe, SlimPipeParams, equal_cost_bounds
from hetsim.schedulers.training.static_swap import StaticSwap, StaticSwapParams
from hetsim.workloads.training.pipeline_sim import bubble_fraction, peak_in_flight, run_schedule
from hetsim.workloads.training.view import PipelineView, ProfileView, StepReport

GB = 1 << 30


def _stable_chameleon() -> Chameleon:
    pol = Chameleon(ChameleonParams(), rng=np.random.default_rng(0))
    assert pol.decide(None).profile
    for k in range(6):  # ref, 2nd similar -> SEARCHING, 3 searched steps -> STABLE
        pol.decide(StepReport(k, 1000, 1.0, 0))
    assert pol.state == STABLE
    return pol


@pytest.mark.parametrize("ops, reprofile", [(1049, False), (951, False), (1051, True), (949, True)])
def test_chameleon_reprofiles_beyond_op_diff_threshold(ops: int, reprofile: bool) -> None:
    # threshold 0.05 of the 1000-op reference: 49 ops away stays, 51 ops away restarts
    pol = _stable_chameleon()
    d = pol.decide(StepReport(6, ops, 1.0, 0))
    assert d.profile is reprofile and pol.reprofiles == int(reprofile)
    assert pol.state == (WARMUP if reprofile else STABLE)


def test_chameleon_forced_swap_in_stable_restarts_with_more_headroom() -> None:
    pol = _stable_chameleon()
    d = pol.decide(StepReport(6, 1000, 1.0, forced_swaps=3))
    assert d.profile and pol.state == WARMUP
    assert pol.redundant == (2 << 30) + (300 << 20)


def _view() -> ProfileView:
    # 6 ops in 4 stages: F0 (ops 0,1), F1 (2,3), B1 (4), B0 (5); step 6 s, so 1 s per op
    # slot (uniform). Tensors: A (layer 0, 40 GB, fwd 1 -> bwd 5), B (layer 1, 30 GB,
    # fwd 3 -> bwd 4), C (10 MB, below the 20 MB filter). Capacity 64 GB, memory peak 90 GB
    # at ops 3-4, so the need there is 90 - (64 - 2) = 28 GB.
    # Both links at 100 GB/s: the mechanism's copy time of a tensor is size / 100e9.
    ro = lambda a: np.asarray(a)  # noqa: E731
    mem = ro([10, 50, 60, 90, 90, 50]) * GB
    size = ro([40 * GB, 30 * GB, 10 << 20])
    return ProfileView(
        6, ro([0, 0, 0, 0, 1, 1]), ro([0, 0, 1, 1, 1, 0]), ro([0, 0, 1, 1, 2, 3]),
        ro([0, 1, 2, 3, 4, 5.0]), ro([1, 2, 3, 4, 5, 6.0]), mem, ((0, "A"), (1, "B"), (0, "C")),
        size, ro([1, 3, 1]), ro([5, 4, 5]), ro([0.5, 0.5, 0.1]), size / 100e9, size / 100e9,
        64 * GB, 6.0,
    )  # fmt: skip


def test_chameleon_plan_covers_the_peak_with_the_spanning_tensor() -> None:
    from hetsim.schedulers.training._chameleon_plan import generate

    orders = generate(_view(), 2 * GB, 20 << 20, 2.0)
    # only A spans the peak (out in stage F0); its 40 GB clear the 28 GB need at op 3
    # (stage F1; its copy, 0.4 s from t = 2 s, ends before op 3 starts at 3 s). Prefetched
    # one stage before B0 (= B1) its buffer would be back for op 4, whose need is 28 GB
    # too: late mode moves its swap-in to B0, the stage of its use (swap-in buffers count)
    assert [(o.key, o.in_at_stage) for o in orders] == [((0, "A"), (1, 0))]


def test_chameleon_keeps_the_warmup_plan_when_it_measured_faster() -> None:
    pol = Chameleon(ChameleonParams(), rng=np.random.default_rng(0))
    pol.decide(None)
    pol.decide(StepReport(0, 1000, 10.0, 5))  # reference
    pol.decide(StepReport(1, 1000, 10.0, 5))  # second warm-up step: SEARCHING
    for k in range(2, 6):  # every generated plan measures slower than the warm-up plan
        d = pol.decide(StepReport(k, 1000, 12.0, 0))
    assert pol.state == STABLE and not d.plan.swaps and d.plan.forced_swap_on_oom
    # its 5 forced swaps are its design: STABLE holds; a sixth restarts
    assert pol.decide(StepReport(6, 1000, 10.0, 5)).profile is False
    assert pol.decide(StepReport(7, 1000, 10.0, 6)).profile and pol.state == WARMUP


def test_static_swap_orders_by_free_time_and_pins_op_indices() -> None:
    pol = StaticSwap(StaticSwapParams(margin_bytes=2 * GB), rng=np.random.default_rng(0))
    plan = pol.make_plan(_view())
    # FreeTime C = (5 - 1e-4) - (2 + 1e-4) ~ 3 s (no size filter in Capuchin), A = (5 - 0.4)
    # - (2 + 0.4) = 2.2 s, B = (4 - 0.3) - (4 + 0.3) < 0: C then A; in-trigger: the last op
    # starting before 4.6 s is op 4; excess 28 GB <= 40 GB + 10 MB: no recompute
    got = [(o.key, o.out_after_op, o.in_at_op) for o in plan.swaps]
    assert got == [((0, "C"), 1, 4), ((0, "A"), 1, 4)]
    assert plan.recompute == ()


def _run(policy: object, p: int, m: int) -> tuple[list[list[float]], list[list[float]], object]:
    sched = policy.schedule(PipelineView(p, m))  # type: ignore[attr-defined]
    starts, ends = run_schedule(sched, p, lambda d, u: 1.0 if u.kind == "F" else 2.0, 0.0)
    return starts, ends, sched


@pytest.mark.parametrize("policy", [GPipe(GPipeParams(), None), OneFOneB(OneFOneBParams(), None)])  # type: ignore[arg-type]
@pytest.mark.parametrize("p, m", [(4, 6), (8, 8), (4, 1)])
def test_bubble_gpipe_1f1b_closed_form(policy: object, p: int, m: int) -> None:
    # F = 1, B = 2, no P2P: makespan (m + p - 1) * 3, every stage busy 3m
    starts, ends, _ = _run(policy, p, m)
    assert max(max(e) for e in ends) == pytest.approx(3 * (m + p - 1))
    assert bubble_fraction(starts, ends) == pytest.approx((p - 1) / (m + p - 1))


def test_peak_in_flight_per_schedule() -> None:
    one = lambda u: 1.0  # noqa: E731
    p, m = 4, 6
    g = GPipe(GPipeParams(), None).schedule(PipelineView(p, m))  # type: ignore[arg-type]
    f = OneFOneB(OneFOneBParams(), None).schedule(PipelineView(p, m))  # type: ignore[arg-type]
    s = SlimPipe(SlimPipeParams(slices=5), None).schedule(PipelineView(p, m))  # type: ignore[arg-type]
    assert [peak_in_flight(o, one) for o in g.order] == [6] * 4  # all m microbatches
    assert [peak_in_flight(o, one) for o in f.order] == [4, 3, 2, 1]  # p - i
    assert [peak_in_flight(o, one) for o in s.order] == [8, 7, 6, 5]  # n + p - 1 - i slices


def test_sliced_and_interleaved_bubbles() -> None:
    # uniform slices: SlimPipe is 1F1B over m n units: (p-1)/(m n + p - 1)
    starts, ends, _ = _run(SlimPipe(SlimPipeParams(slices=3), None), 4, 2)  # type: ignore[arg-type]
    assert bubble_fraction(starts, ends) == pytest.approx(3 / (6 + 3))
    # interleaved, v = 2 chunks of half the work (F = 0.5, B = 1): Megatron's bubble
    # (p-1)(F+B)/v over the ideal m(F+B): makespan = m*3 + (p-1)*1.5
    sched = Interleaved(InterleavedParams(chunks=2), None).schedule(PipelineView(4, 8))  # type: ignore[arg-type]
    _, en = run_schedule(sched, 4, lambda d, u: 0.5 if u.kind == "F" else 1.0, 0.0)
    assert max(max(e) for e in en) == pytest.approx(8 * 3 + 3 * 1.5)


def test_interleaved_rejects_uneven_microbatches() -> None:
    with pytest.raises(ValueError, match="divisible"):
        Interleaved(InterleavedParams(chunks=2), None).schedule(PipelineView(4, 6))  # type: ignore[arg-type]


def test_equal_cost_bounds_by_hand() -> None:
    # attention only, slice cost ~ end^2 - start^2: equal shares at x_i = sqrt(i/n)
    assert equal_cost_bounds(4, 0.0, 1.0) == pytest.approx([0, 0.5, 0.5**0.5, 0.75**0.5, 1])
    # linear G = 1 and attention A = 1, n = 2: x + x^2 = (1/2)(1 + 1) -> x = (sqrt(5) - 1) / 2
    assert equal_cost_bounds(2, 1.0, 1.0) == pytest.approx([0, (5**0.5 - 1) / 2, 1])
    # no attention: uniform
    assert equal_cost_bounds(3, 2.0, 0.0) == pytest.approx([0, 1 / 3, 2 / 3, 1])


@pytest.mark.parametrize("balance, balanced", [("equal-cost", True), ("none", False)])
def test_balanced_slices_restore_sliced_bubble(balance: str, balanced: bool) -> None:
    # causal attention only: F of slice [a, b] costs b^2 - a^2, B twice that. Balanced
    # slices all cost 1/n, so the schedule is 1F1B over m n equal units: bubble
    # (p-1)/(m n + p - 1) = 3 / (2*3 + 3); uniform slices (1/9, 3/9, 5/9) do worse.
    pol = SlimPipe(SlimPipeParams(slices=3, balance=balance), None)  # type: ignore[arg-type]
    sched = pol.schedule(PipelineView(4, 2, linear_flops=0.0, causal_attn_flops=1.0))
    x = sched.bounds or tuple(j / 3 for j in range(4))
    cost = [x[j + 1] ** 2 - x[j] ** 2 for j in range(3)]
    starts, ends = run_schedule(
        sched, 4, lambda d, u: cost[u.slice] * (1 if u.kind == "F" else 2), 0.0
    )
    bubble = float(bubble_fraction(starts, ends).mean())
    if balanced:
        assert bubble == pytest.approx(3 / (6 + 3))
    else:
        assert bubble > 3 / (6 + 3) + 0.05
