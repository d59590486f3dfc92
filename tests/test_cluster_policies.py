"""Cluster policies on hand-built views: interleaving by hand, matching vs brute force,
max-flow allocation on a 3-type instance, Tiresias demotion, ordering keys."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from hetsim.schedulers.cluster._common import NoParams
from hetsim.schedulers.cluster.allocation_cuckoo import CuckooAllocation, CuckooAllocationParams
from hetsim.schedulers.cluster.allocation_first_fit import FirstFitAllocation
from hetsim.schedulers.cluster.ordering_cuckoo import CuckooOrdering
from hetsim.schedulers.cluster.ordering_edf import EdfOrdering
from hetsim.schedulers.cluster.ordering_tiresias import TiresiasOrdering, TiresiasParams
from hetsim.schedulers.cluster.packing_cuckoo import CuckooPacking, CuckooPackingParams
from hetsim.schedulers.cluster.packing_muri import MuriPacking, MuriParams
from hetsim.workloads.cluster.model import (
    cycle_period_s,
    interleaved_iter_s,
    packed_cycle_s,
    stage_inflated,
    stage_model_iter_s,
)
from hetsim.workloads.cluster.view import (
    AllocationView,
    GroupView,
    OrderingView,
    PackingView,
    UnitView,
)

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


def test_four_phase_cycle_two_jobs_by_hand() -> None:
    # Muri's cycle: data spans 2 phases (storage IO + CPU), then gpu, net: 4 phases. A job
    # starting in phase x adds edges x -> x+2 (data), x+2 -> x+3 (gpu), x+3 -> x+4 (net);
    # the iteration time is the max over cycles of seconds / wraps. A = [4,1,0], B = [1,3,0].
    # B in phase 2: edges A 0->2 (4), 2->3 (1), 3->0 (0); B 2->0 (1), 0->1 (3), 1->2 (0).
    # Cycles: 0->2->0 = 4 + 1 = 5; A's own 0->2->3->0 = 5; 0->1->2->0 = 3 + 0 + 1 = 4 -> 5.
    # B in phase 1: 0->2 (A data 4) ->3 (A gpu 1) ->0 (B gpu 3, B at 1 has gpu 3->0) = 8.
    # B in phase 3: A's cycle 5; 1->2 (B gpu 3) ->3 (A gpu 1) ->1 (B data 1) = 5 -> 5.
    stages = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.0]])
    assert cycle_period_s(stages, (2, 1, 1), (0, 2)) == pytest.approx(5.0)
    assert cycle_period_s(stages, (2, 1, 1), (0, 1)) == pytest.approx(8.0)
    assert cycle_period_s(stages, (2, 1, 1), (0, 3)) == pytest.approx(5.0)
    assert interleaved_iter_s(stages, [1.0, 1.3], (2, 1, 1)) == pytest.approx(6.5)
    # Two data-bound jobs [4, 0.5, 0], the second in phase 1: their data stages overlap
    # (one on storage IO, one on the CPU). Edges: A 0->2 (4), 2->3 (0.5), 3->0 (0);
    # B 1->3 (4), 3->0 (0.5), 0->1 (0). Cycles: 0->2->3->0 = 4 + 0.5 + 0.5 = 5;
    # 0->1->3->0 = 0 + 4 + 0.5 = 4.5 -> 5 s for one iteration of each (9 s in turn). In
    # phase 2: 0->2->0 = 4 + 4 = 8. In the plain 3-phase cycle they cannot overlap:
    # 4 + 4 + 0.5 = 8.5.
    data = np.array([[4.0, 0.5, 0.0], [4.0, 0.5, 0.0]])
    assert cycle_period_s(data, (2, 1, 1), (0, 2)) == pytest.approx(8.0)
    assert packed_cycle_s(data, (2, 1, 1)) == pytest.approx(5.0)
    assert packed_cycle_s(data, (1, 1, 1)) == pytest.approx(8.5)


def test_stage_interference_two_jobs_by_hand() -> None:
    # occ_A = [4, 1, 0] / 5 = [0.8, 0.2, 0]; occ_B = [1, 3, 0] / 4 = [0.25, 0.75, 0].
    # beta = 0.5 everywhere: A' = [4 (1 + 0.5 x 0.25), 1 (1 + 0.5 x 0.75), 0] = [4.5, 1.375, 0]
    # B' = [1 (1 + 0.5 x 0.8), 3 (1 + 0.5 x 0.2), 0] = [1.4, 3.3, 0].
    stages = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.0]])
    beta = (0.5, 0.5, 0.5)
    expected = [4.5, 1.375, 0.0, 1.4, 3.3, 0.0]
    assert stage_inflated(stages, beta).ravel().tolist() == pytest.approx(expected)
    # Cycle as in the test above with the inflated times. B in phase 2: 0->2->0 = 4.5 + 1.4
    # = 5.9; A's 0->2->3->0 = 5.875; 0->1->2->0 = 3.3 + 0 + 1.4 = 4.7 -> 5.9. Phase 1:
    # 4.5 + 1.375 + 3.3 = 9.175. Phase 3: 1->2->3->1 = 3.3 + 1.375 + 1.4 = 6.075. Best 5.9,
    # a penalty of 5.9 / 5 = 1.18 over the interference-free cycle (Muri's factor: 1.31).
    assert stage_model_iter_s(stages, beta, (2, 1, 1)) == pytest.approx(5.9)
    # a lone job has no co-runner: no inflation
    assert stage_inflated(stages[:1], beta).ravel().tolist() == pytest.approx([4.0, 1.0, 0.0])


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
    facts = {j: (u.solo_iter_s[0], 100, float("inf"), 1) for j, u in enumerate(view.units)}
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


def test_tiresias_starvation_promotion_at_the_threshold() -> None:
    # starve_limit 2. Job 0 ran 100 s (attained 5000 GPU-s: queue 1) and has waited 199.9 s:
    # below 2 x 100, it stays behind job 1 (queue 0, submitted later). At exactly 200 s of
    # waiting it is promoted: service counted from 0 again, queue 0, and its earlier submit
    # puts it first. It stays promoted (idempotent) while it waits.
    pol = TiresiasOrdering(TiresiasParams(starve_limit=2.0), RNG)
    view = ordering_view([5000, 100], [np.inf] * 2, [1, 1])

    def at(wait: float) -> OrderingView:
        return view._replace(last_run_s=np.array([100.0, 0.0]), waiting_s=np.array([wait, 0.0]))

    assert pol.order(at(199.9)).tolist() == [1, 0]
    assert pol.order(at(200.0)).tolist() == [0, 1]
    assert pol.order(at(250.0)).tolist() == [0, 1]
    # its service since promotion then counts again: 3250 more GPU-s -> queue 1
    assert pol.order(at(0.0)._replace(attained_gpu_s=np.array([8250.0, 100]))).tolist() == [1, 0]
    # without a limit (the default) no promotion
    assert TiresiasOrdering(TiresiasParams(), RNG).order(at(1e9)).tolist() == [1, 0]


def test_cuckoo_packs_on_stage_estimate_where_muri_does_not() -> None:
    # Two jobs with solo 5 s and 4 s. Muri's coarse estimate of the pair: 9.5 s (no gain over
    # 5 + 4 = 9, so no edge); the stage-grained estimate 5.9 s (gain): Cuckoo merges them.
    units = tuple(UnitView((j,), 1, False, j, (s,), (100,), (float("inf"),))
                  for j, s in enumerate((5.0, 4.0)))  # fmt: skip
    view = PackingView(0.0, units, 0, 2, 4, 0.0, lambda m: 9.5, lambda m: 5.9)
    assert MuriPacking(MuriParams(), RNG).pack(view) == []
    assert CuckooPacking(CuckooPackingParams(), RNG).pack(view) == [(0, 1)]
    coarse = CuckooPacking(CuckooPackingParams(estimate="group"), RNG)
    assert coarse.pack(view) == []  # the ablation uses Muri's estimate
