"""Gavel's max-min fairness LP and round dispatch (schedulers/cluster/allocation_gavel_lp.py):
the LP on a 2-job, 2-type instance solved by hand, priorities and dispatch on hand-built
views, round re-decisions of running groups, and the paper's direction on a short run."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import hetsim
from hetsim.schedulers.cluster.allocation_gavel_lp import (
    GavelLPAllocation,
    GavelParams,
    dispatch,
    max_min_lp,
    priorities,
)
from hetsim.workloads.cluster.view import AllocationView, GroupView
from tests.conftest import SCENARIOS

RNG = np.random.default_rng(0)
INF = float("inf")


def test_max_min_lp_two_jobs_two_types_by_hand() -> None:
    # Types: 1 fast GPU, 2 slow GPUs (N = [1, 2]); 1-GPU jobs A: T = [4, 1], B: T = [2, 1]
    # iterations/s. Equal share: x = N / sum N = [1/3, 2/3], so T_eq(A) = 4/3 + 2/3 = 2,
    # T_eq(B) = 2/3 + 2/3 = 4/3. Normalised coefficients: A [2, 0.5], B [1.5, 0.75].
    # The slow type never binds (each job uses at most 1 of its 2 GPUs), rows are full:
    # A = 2 a + 0.5 (1 - a) = 0.5 + 1.5 a, B = 1.5 b + 0.75 (1 - b) with b = 1 - a on the
    # fast GPU: B = 1.5 - 0.75 a. Equal at a = 4/9: min = 7/6 (equal share gives 1 each).
    x, z = max_min_lp(np.array([[4.0, 1.0], [2.0, 1.0]]), np.ones(2), np.array([1.0, 2.0]))
    assert z == pytest.approx(7 / 6, abs=1e-7)
    assert x == pytest.approx(np.array([[4 / 9, 5 / 9], [5 / 9, 4 / 9]]), abs=1e-7)


def test_max_min_lp_scale_factor_and_forbidden_type() -> None:
    # One type with 4 GPUs; A needs 1 GPU, B needs 4, equal throughput 1 (T_eq = 1).
    # Objective terms sf x: A = x_A, B = 4 x_B; capacity x_A + 4 x_B <= 4, rows <= 1.
    # min(x_A, 4 x_B) <= x_A <= 1 and x_A = 1, x_B = 3/4 reaches 1: optimum 1.
    x, z = max_min_lp(np.array([[1.0], [1.0]]), np.array([1.0, 4.0]), np.array([4.0]))
    assert z == pytest.approx(1.0, abs=1e-7)
    assert x[0, 0] == pytest.approx(1.0, abs=1e-7) and x[1, 0] >= 0.25 - 1e-7
    assert x[0, 0] + 4 * x[1, 0] <= 4 + 1e-7
    # A job that may not use type 1 gets no time there; one with no usable type gets 0.
    x, _ = max_min_lp(np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]), np.ones(3),
                      np.array([1.0, 1.0]))  # fmt: skip
    assert x[0, 1] == 0 and x[2].sum() == 0


def group(members: tuple[int, ...], iter_s: tuple[float, ...], gpus: int = 1,
          received: tuple[float, ...] = (), active: float = 0.0, on: int = -1) -> GroupView:  # fmt: skip
    allowed = tuple(np.isfinite(iter_s))
    return GroupView(members, gpus, allowed, iter_s, iter_s, (True,) * len(iter_s), False, 0.0,
                     received or (0.0,) * len(iter_s), active, on)  # fmt: skip


def test_priorities_formula() -> None:
    # X / (received / active); unserved with X > 0: X * 1e9; X = 0: 0.
    x = np.array([[0.5, 0.0], [0.5, 0.2]])
    recv = np.array([[300.0, 0.0], [100.0, 0.0]])
    p = priorities(x, recv, np.array([400.0, 400.0]))
    assert p == pytest.approx(np.array([[0.5 / 0.75, 0.0], [0.5 / 0.25, 0.2e9]]))


def test_dispatch_gives_the_gpu_to_the_least_served_job() -> None:
    # Two identical 1-GPU jobs, one type with 1 GPU (both waiting): the LP splits it
    # 1/2 : 1/2 (max-min of x_A, x_B with x_A + x_B <= 1). A has held the GPU 300 s of its
    # 400 s in the system (priority 0.5 / 0.75 = 0.67), B 100 s (0.5 / 0.25 = 2): B runs.
    a = group((0,), (1.0,), received=(300.0,), active=400.0)
    b = group((1,), (1.0,), received=(100.0,), active=400.0)
    view = AllocationView(10.0, ("v100",), (1,), (a, b), (), (1,))
    assert GavelLPAllocation(GavelParams(), RNG).allocate(view) == [None, 0]


def test_dispatch_places_by_type_order_and_fit() -> None:
    # Types fast (2 GPUs) then slow (2 GPUs). Priorities per type (hand-set): on fast
    # B 3 > A 2 > C 0; on slow C 5 > A 1 > B 0. Fast first: B takes 1 GPU, A (2 GPUs) no
    # longer fits, C may not use fast. Slow: C takes 1 GPU, A (2) does not fit in the 1
    # left; without work conservation nothing else; with it, nothing fits either.
    a = group((0,), (1.0, 1.0), gpus=2)
    b = group((1,), (1.0, 1.0))
    c = group((2,), (INF, 1.0))
    x = np.array([[0.5, 0.5], [0.5, 0.0], [0.0, 1.0]])
    prio = np.array([[2.0, 1.0], [3.0, 0.0], [0.0, 5.0]])
    assert dispatch((a, b, c), x, prio, [2, 2], True) == [None, 0, 1]
    # With 3 slow GPUs A fits after C; a zero-priority job fills only if work conserving.
    assert dispatch((a, b, c), x, prio, [2, 3], True) == [1, 0, 1]
    assert dispatch((a, c), x[[0, 2]], np.array([[0.0, 0.0], [0.0, 5.0]]), [2, 0], False) == [
        None,
        None,
    ]
    assert dispatch((a, c), x[[0, 2]], np.array([[0.0, 0.0], [0.0, 5.0]]), [2, 0], True) == [
        0,
        None,
    ]


def test_round_preempts_an_overserved_running_job() -> None:
    # Round view (every GPU counted free): A runs on the only GPU and has held it all of its
    # 1000 s, B waited 1000 s. X = 1/2 each; priorities 0.5 / 1 vs 0.5 * 1e9: B takes the
    # GPU, A is not given its own type again (the mechanism stops it).
    a = group((0,), (1.0,), received=(1000.0,), active=1000.0, on=0)
    b = group((1,), (1.0,), active=1000.0)
    view = AllocationView(1000.0, ("v100",), (1,), (a, b), (a,), (1,))
    assert GavelLPAllocation(GavelParams(), RNG).allocate(view) == [None, 0]


def test_running_groups_take_capacity_in_the_lp() -> None:
    # Fill between rounds: r (2 GPUs) runs on type a (2 GPUs); w (1 GPU) waits; type b has
    # 1 GPU, free. Both run at T = [1, 0.5]; share N / sum N = [2/3, 1/3], T_eq = 5/6;
    # coefficients r: 2 x [1.2, 0.6], w: [1.2, 0.6]. w is worth at most 1.2 (all its time
    # on a), and r reaches 1.2 with x_r = [1/2, 1/2] (capacity a: 2 x 1/2 + 1 = 2), so
    # the optimum 1.2 needs X_w = [1, 0]: priority 0 on b. Type a is full, so w runs on b
    # only because dispatch is work conserving.
    r = group((0,), (1.0, 2.0), gpus=2, received=(50.0, 0.0), active=50.0, on=0)
    w = group((1,), (1.0, 2.0), active=5.0)
    view = AllocationView(50.0, ("a", "b"), (0, 1), (w,), (r,), (2, 1))
    policy = GavelLPAllocation(GavelParams(), RNG)
    assert policy.allocate(view) == [1]
    assert policy.lp_solves == 1
    policy.allocate(view)
    assert policy.lp_solves == 1  # same active set: the LP is not solved again
    lazy = GavelLPAllocation(GavelParams(work_conserving=False), RNG)
    assert lazy.allocate(view) == [None]


def gavel_run(allocation: Any, **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"workload.jobs.num_jobs": 60, "workload.jobs.arrival_rate_per_s":
                            0.01, "policies.allocation": allocation}  # fmt: skip
    base.update(over)
    return dict(hetsim.run(SCENARIOS / "gavel.yaml", overrides=base).summary.iloc[0])


@pytest.mark.slow
def test_gavel_beats_agnostic_lp_and_first_fit_on_mean_jct() -> None:
    # Paper's direction (heterogeneity-aware max-min fairness lowers average JCT versus
    # heterogeneity-agnostic policies) on 60 jobs of Gavel's types arriving at 36 jobs/h
    # on 36 V100 + 36 P100 + 36 K80, FIFO order, 360 s preemptive rounds. Measured
    # gavel / first-fit = 0.39, 0.47, 0.39 and gavel / agnostic LP = 0.69, 0.67, 0.69 for
    # seeds 1-3; asserted with margins: < 0.8 and < 0.85.
    gavel, first_fit = gavel_run("gavel"), gavel_run("first-fit")
    agnostic = gavel_run({"name": "gavel", "heterogeneity_aware": False})
    assert gavel["completed"] == first_fit["completed"] == agnostic["completed"] == 60
    assert gavel["preemptions"] > 0
    assert gavel["mean_jct_s"] < 0.8 * first_fit["mean_jct_s"]
    assert gavel["mean_jct_s"] < 0.85 * agnostic["mean_jct_s"]
