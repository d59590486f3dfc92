"""Cuckoo's packing on the per-type stage-grained estimate, on hand-built 2-type views.

Jobs (data, GPU, network) stage seconds per iteration on type 0 (speed 1); type 1 runs
the GPU stage 4x faster, the other stages unchanged:
  A = (1, 8, 1) -> (1, 2, 1) on type 1 (solo 10 / 4 s)
  B = (6, 1, 1) -> (6, 0.25, 1)       (solo 8 / 7.25 s)
  C = (2, 4, 2) -> (2, 1, 2)          (solo 8 / 5 s)
Plain 3-phase cycle, no interference (beta 0): T = min over the shift p in {1, 2} of
sum_s max(x[s], y[(s - p) mod 3]), worked out by hand:
  type 0: A+B p=1: 1 + 8 + 1 = 10 (p=2: 1 + 8 + 6 = 15) -> 10
          A+C p=1: 2 + 8 + 4 = 14 (p=2: 4 + 8 + 2 = 14) -> 14
          B+C p=2: 6 + 2 + 2 = 10 (p=1: 6 + 2 + 4 = 12) -> 10
  type 1: A+B p=1: 1 + 6 + 1 = 8  (p=2: 1 + 2 + 6 = 9)  -> 8
          A+C p=1: 2 + 2 + 1 = 5  (p=2: 1 + 2 + 2 = 5)  -> 5
          B+C p=1: 6 + 2 + 1 = 9  (p=2: 6 + 2 + 2 = 10) -> 9
Weight with no deadlines (alpha 1, gamma 0.5, k = 3 phases): U - 0.5 slow with
U = (s_x + s_y) / (3 T) and slow = T / s_x + T / s_y - 2:
  type 0: A+B 18/30 - 0.5 (1 + 1.25 - 2) = 0.475; A+C 18/42 - 0.5 (1.4 + 1.75 - 2) = -0.146;
          B+C 16/30 - 0.5 (1.25 + 1.25 - 2) = 0.283
  type 1: A+B 11.25/24 - 0.5 (2 + 8/7.25 - 2) = -0.083; A+C 9/15 - 0.5 (1.25 + 1 - 2) = 0.475;
          B+C 12.25/27 - 0.5 (9/7.25 + 1.8 - 2) = -0.067
So the best pairing is A+B on type 0 and A+C on type 1, and A+B alone packs only on type 0.
"""

from __future__ import annotations

import numpy as np
import pytest

from hetsim.schedulers.cluster.packing_cuckoo import CuckooPacking, CuckooPackingParams
from hetsim.workloads.cluster.model import packed_cycle_s
from hetsim.workloads.cluster.view import PackingView, UnitView

RNG = np.random.default_rng(0)
STAGES = {0: [1.0, 8.0, 1.0], 1: [6.0, 1.0, 1.0], 2: [2.0, 4.0, 2.0]}  # A, B, C on type 0
SPEED = (1.0, 4.0)


def on_type(j: int, t: int) -> np.ndarray:
    s = np.array(STAGES[j])
    s[1] /= SPEED[t]
    return s


def iter_on(members: tuple[int, ...], t: int) -> float:
    if len(members) == 1:
        return float(on_type(members[0], t).sum())
    return packed_cycle_s(np.stack([on_type(j, t) for j in members]), (1, 1, 1))


def view(jobs: tuple[int, ...], free_by_type: tuple[int, int], deadline_a: float = np.inf,
         running_on: int = -1) -> PackingView:  # fmt: skip
    units = tuple(
        UnitView((j,), 1, running_on >= 0 and i == 0, i, (iter_on((j,), 0),), (1,),
                 (deadline_a if j == 0 else np.inf,), (1,), running_on if i == 0 else -1)
        for i, j in enumerate(jobs)
    )  # fmt: skip
    ref = lambda m: iter_on(m, 0)  # noqa: E731  (reference type = type 0)
    return PackingView(0.0, units, 0, 2, 3, 0.0, ref, ref, False, free_by_type, iter_on)


def test_hand_cycle_times() -> None:
    assert [iter_on(p, 0) for p in ((0, 1), (0, 2), (1, 2))] == [10.0, 14.0, 10.0]
    assert [iter_on(p, 1) for p in ((0, 1), (0, 2), (1, 2))] == [8.0, 5.0, 9.0]


def test_two_jobs_pack_only_on_the_slow_type() -> None:
    pol = CuckooPacking(CuckooPackingParams(), RNG)
    facts = {0: (10.0, 1, np.inf, 1), 1: (8.0, 1, np.inf, 1)}
    assert pol.weight(view((0, 1), (1, 0)), facts, (0, 1)) == pytest.approx(0.475)
    assert pol.weight(view((0, 1), (0, 1)), facts, (0, 1)) == pytest.approx(-0.083, abs=1e-3)
    assert pol.pack(view((0, 1), (1, 0))) == [(0, 1)]
    assert pol.pack(view((0, 1), (0, 1))) == []  # on the fast type A+B loses (weight < 0)
    # with room on both, the target is the faster type for the pair (8 s < 10 s): no pack
    assert pol.pack(view((0, 1), (1, 1))) == []
    # the reference-type ablation packs wherever the room is
    ref = CuckooPacking(CuckooPackingParams(target="reference"), RNG)
    assert ref.pack(view((0, 1), (0, 1))) == [(0, 1)]


def test_best_pairing_follows_the_type_with_room() -> None:
    pol = CuckooPacking(CuckooPackingParams(), RNG)
    assert pol.pack(view((0, 1, 2), (1, 0))) == [(0, 1)]  # A+B on type 0
    assert pol.pack(view((0, 1, 2), (0, 1))) == [(0, 2)]  # A+C on type 1
    assert pol.pack(view((0, 1, 2), (1, 1))) == [(0, 2)]  # each pair on its faster type: 1
    ref = CuckooPacking(CuckooPackingParams(target="reference"), RNG)
    assert ref.pack(view((0, 1, 2), (0, 1))) == [(0, 1)]


def test_running_group_fixes_the_type() -> None:
    # A already runs on type 0 (no free room anywhere): the merge is priced on type 0
    pol = CuckooPacking(CuckooPackingParams(), RNG)
    assert pol.pack(view((0, 1, 2), (0, 0), running_on=0)) == [(0, 1)]
    assert pol.pack(view((0, 1, 2), (0, 0), running_on=1)) == [(0, 2)]


def test_deadline_removes_pairs_on_every_type() -> None:
    # A has 1 iteration left and 4.5 s to its deadline: alone on type 1 it takes 4 s (meets
    # it); packed it takes 5 s (A+C, type 1), 8 s (A+B, type 1), 10 or 14 s on type 0: no
    # type keeps it, so no edge with A. B+C (weight -0.067 on type 1) has none either.
    pol = CuckooPacking(CuckooPackingParams(), RNG)
    assert pol.pack(view((0, 1, 2), (1, 1), deadline_a=4.5)) == []
    # with 5 s left A+C on type 1 is safe (restart 0): it packs
    assert pol.pack(view((0, 1, 2), (1, 1), deadline_a=5.0)) == [(0, 2)]


def test_bad_target_is_a_validation_error() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        CuckooPackingParams.model_validate({"target": "slowest"})


def test_allocation_places_the_urgent_group_when_gpus_are_short() -> None:
    from hetsim.schedulers.cluster.allocation_cuckoo import CuckooAllocation, CuckooAllocationParams
    from hetsim.workloads.cluster.view import AllocationView, GroupView

    # Two 8-GPU groups, one type with 8 free GPUs, both 100 s from done there. Costs per
    # GPU (x1000): w (r / r_best - 2) + 0.01 rank with w = 1 + 4 urgency:
    # urgent (urgency 0.9, rank 1): 4.6 x (1 - 2) + 0.01 = -4.59;
    # calm (urgency 0, rank 0): 1 x (1 - 2) + 0 = -1. The min-cost flow places the urgent
    # one. (The earlier cost w r / r_best + 0.01 rank gave 4.61 vs 1: the calm one.)
    def group(j: int, urgency: float) -> GroupView:
        return GroupView((j,), 8, (True,), (1.0,), (100.0,), (True,), True, urgency)

    view = AllocationView(0.0, ("v100",), (8,), (group(0, 0.0), group(1, 0.9)))
    assert CuckooAllocation(CuckooAllocationParams(), RNG).allocate(view) == [None, 0]
