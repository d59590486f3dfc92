"""Cluster policies on hand-built views: interleaving by hand, matching vs brute force,
max-flow allocation on a 3-type instance, Tiresias demotion, ordering keys."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from schedulers.cluster._common import NoParams
from schedulers.cluster.allocation_cuckoo import CuckooAllocation, CuckooAllocationParams
from schedulers.cluster.allocation_first_fit import FirstFitAllocation
from schedulers.cluster.ordering_cuckoo import CuckooOrdering
from schedulers.cluster.ordering_edf import EdfOrdering
from schedulers.cluster.ordering_tiresias import TiresiasOrdering, TiresiasParams
from schedulers.cluster.packing_muri import MuriPacking, MuriParams
from schedulers.cluster.view import AllocationView, GroupView, OrderingView, PackingView, UnitView
from workloads.cluster_model import interleaved_iter_s

RNG = np.random.default_rng(0)


def test_two_job_interleaving_by_hand() -> None:
    # A = [4, 1, 0], B = [1, 3, 0] (data, gpu, net seconds). Shifting B by one stage gives
    # rows [4,1,0] and [0,1,3]: sum of column maxima 4+1+3 = 8; by two stages [3,0,1]:
    # 4+1+1 = 6. Best 6, times the 2-job interference 1.5 -> 9.0. Alone: 5 x 1.0, 4 x 1.0.
    stages = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.0]])
    assert interleaved_iter_s(stages, [1.0, 1.5]) == pytest.approx(9.0)
    assert interleaved_iter_s(stages[:1], [1.0, 1.5]) == pytest.approx(5.0)
    assert interleaved_iter_s(stages[1:], [1.015, 1.5]) == pytest.approx(4.06)
    with pytest.raises(ValueError):
        interleaved_iter_s(np.ones((3, 2)), [1.0, 1.0, 1.0])


PROFILES = [[4, 1, 0], [1, 3, 0], [0.5, 4, 0.5], [3, 0.2, 0.1], [2, 2, 2], [0.1, 0.1, 5]]


def packing_view(max_size: int = 2) -> PackingView:
    stages = np.array(PROFILES, dtype=float)
    mult = [1.0, 1.2, 1.3]
    units = tuple(
        UnitView((j,), 1, False, j, (float(stages[j].sum()),), (100,), (float("inf"),))
        for j in range(6)
    )
    return PackingView(0.0, units, 0, max_size, 3, 0.0,
                       lambda m: interleaved_iter_s(stages[list(m)], mult))  # fmt: skip


def test_muri_matching_equals_brute_force_pairing() -> None:
    view = packing_view()
    policy = MuriPacking(MuriParams(), RNG)
    facts = {j: (u.solo_iter_s[0], 100, float("inf")) for j, u in enumerate(view.units)}
    w = {p: policy.weight(view, facts, p) for p in combinations(range(6), 2)}

    def best(nodes: tuple[int, ...]) -> float:  # all matchings of the remaining nodes
        if len(nodes) < 2:
            return 0.0
        first, rest = nodes[0], nodes[1:]
        out = best(rest)  # first unmatched
        for other in rest:
            if w[(first, other)] > 0:
                left = tuple(n for n in rest if n != other)
                out = max(out, w[(first, other)] + best(left))
        return out

    merges = policy.pack(view)
    assert all(len(m) == 2 for m in merges)
    assert len({j for m in merges for j in m}) == 2 * len(merges)  # disjoint
    assert sum(w[tuple(sorted(m))] for m in merges) == pytest.approx(best(tuple(range(6))))
    assert merges  # complementary profiles exist, so something is packed


def test_muri_second_round_builds_triples() -> None:
    merges = MuriPacking(MuriParams(), RNG).pack(packing_view(max_size=3))
    assert merges and max(len(m) for m in merges) <= 3


def gv(allowed, iters, meets, has_dl, urgency=0.0, gpus=4):
    rem = tuple(10.0 * i for i in iters)
    return GroupView((0,), gpus, allowed, iters, rem, meets, has_dl, urgency)


def test_cuckoo_max_flow_on_three_types_by_hand() -> None:
    # Types fast/medium/slow with 4/4/8 free GPUs; three 4-GPU groups all prefer "fast".
    # G0 meets its deadline only on fast; G1 is best-effort; G2 meets on fast or medium.
    # Every group fits only if G0 -> fast, G2 -> medium, G1 -> slow (the unique max flow).
    t = (True, True, True)
    groups = (
        gv(t, (1.0, 2.0, 4.0), (True, False, False), True, urgency=0.9),
        gv(t, (1.0, 2.0, 4.0), (True, True, True), False),
        gv(t, (1.0, 2.0, 4.0), (True, True, False), True, urgency=0.5),
    )
    view = AllocationView(0.0, ("fast", "medium", "slow"), (4, 4, 8), groups)
    assert CuckooAllocation(CuckooAllocationParams(), RNG).allocate(view) == [0, 2, 1]
    # first-fit (blind) sends G0 and G1 to fast/medium and G2 to slow: G2 misses its deadline
    assert FirstFitAllocation(NoParams(), RNG).allocate(view) == [0, 1, 2]


def test_cuckoo_min_cut_leaves_unplaceable_group_waiting() -> None:
    # Two groups can only meet their deadline on "fast" (4 free GPUs): one waits.
    t = (True, True)
    groups = (
        gv(t, (1.0, 3.0), (True, False), True, urgency=0.9),
        gv(t, (1.0, 3.0), (True, False), True, urgency=0.9),
    )
    view = AllocationView(0.0, ("fast", "slow"), (4, 8), groups)
    out = CuckooAllocation(CuckooAllocationParams(), RNG).allocate(view)
    assert out == [0, None]  # the earlier (rank 0) group wins: its cost is lower


def ordering_view(attained, deadline, remaining) -> OrderingView:
    n = len(attained)
    arr = np.asarray
    return OrderingView(100.0, np.arange(n), arr(np.arange(n, dtype=float)), np.ones(n, int),
                        arr(remaining, float), arr(remaining, float), arr(attained, float),
                        arr(deadline, float), np.zeros(n, bool))  # fmt: skip


def test_tiresias_demotes_exactly_at_thresholds() -> None:
    pol = TiresiasOrdering(TiresiasParams(), RNG)
    attained = np.array([0, 3249.9, 3250, 7199.9, 7200, 17999, 18000, 1e9])
    assert pol.queue_of(attained).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    # later submit but fewer attained GPU-seconds goes first
    view = ordering_view([5000, 100, 20000], [np.inf] * 3, [1, 1, 1])
    assert pol.order(view).tolist() == [1, 0, 2]


def test_edf_and_cuckoo_ordering() -> None:
    inf = np.inf
    # now = 100. Job 0: deadline 150, remaining 80 -> cannot make it (slack -30).
    # Job 1: deadline 400, remaining 100 -> slack 200. Job 2: deadline 300, rem 10 -> slack 190.
    # Job 3: best-effort, remaining 5.
    view = ordering_view([0, 0, 0, 0], [150, 400, 300, inf], [80, 100, 10, 5])
    assert EdfOrdering(NoParams(), RNG).order(view).tolist() == [0, 2, 1, 3]
    # Cuckoo: feasible deadline jobs by slack (2, 1), then the rest by remaining (3, 0).
    assert CuckooOrdering(NoParams(), RNG).order(view).tolist() == [2, 1, 3, 0]
