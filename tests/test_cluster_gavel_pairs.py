"""Gavel's measured co-location pairs (space sharing): the pair table, each member of a
measured pair advancing at its own rate (hand-computed finish times), the packed LP on a
tiny instance solved by hand, the dispatch of a pair, and a short seeded run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hetsim
from hetsim.schedulers.cluster.allocation_gavel_lp import (
    GavelLPAllocation,
    GavelParams,
    max_min_packed_lp,
)
from hetsim.simulator.engine import Simulation
from hetsim.simulator.runner import build
from hetsim.simulator.scenario import from_dict
from hetsim.workloads.cluster.data import RowError, read_speed_table
from hetsim.workloads.cluster.pairs import read_pair_table
from hetsim.workloads.cluster.params import DATA_DIR
from hetsim.workloads.cluster.view import AllocationView, GroupView, SpaceShared
from tests.conftest import SCENARIOS

R18, R50 = "ResNet-18 (batch size 32)", "ResNet-50 (batch size 64)"
HEADER = "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,"
HEADER += "iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n"


def test_shipped_pair_table_matches_gavels_file() -> None:
    # Spot values of Gavel's simulation_throughputs.json (v100, scale factor 1; quoted in
    # ../shared/data/gavel-throughputs/SOURCE.md): ResNet-50 bs64 next to ResNet-18 bs32
    # runs 3.7047 steps/s while ResNet-18 runs 15.0552; both orders are stored; no pair
    # rate exceeds the job's isolated rate (the file's own property).
    pairs = read_pair_table(DATA_DIR / "gavel_pairs_sf1.csv")
    assert pairs[(R50, R18, "v100")] == pytest.approx((3.7046719336355154, 15.055176143810225))
    assert pairs[(R18, R50, "v100")] == pytest.approx((15.055176143810225, 3.7046719336355154))
    iso = read_speed_table(DATA_DIR / "gavel_throughputs_sf1.csv")
    assert all(x <= iso[a][t] + 1e-9 for (a, _, t), (x, _) in pairs.items())


def test_pair_table_rejects_disagreeing_reverse_rows(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("gavel_job_type,other_job_type,gpu_type,steps_s,other_steps_s\n"
                    "A,B,v100,1.0,2.0\nB,A,v100,2.0,1.5\n")  # fmt: skip
    with pytest.raises(RowError, match=r"p\.csv.*3.*disagrees"):
        read_pair_table(path)


def pair_scenario(tmp_path: Path, slow_r18: float, slow_r50: float) -> dict[str, Any]:
    """One V100; job 0 resnet18 (Gavel ResNet-18), 10 iterations of 1 s alone; job 1
    vgg16 (Gavel ResNet-50), 40 iterations of 1 s alone; a pair table that slows them
    by ``slow_r18`` / ``slow_r50`` on v100; no restarts, no rounds."""
    trace = tmp_path / "trace.csv"
    trace.write_text(HEADER + "0,1,0,10,resnet18,32,10,0,1000,0,1000,0,0\n"
                     "1,1,0,40,vgg16,64,40,0,1000,0,1000,0,0\n")  # fmt: skip
    iso = read_speed_table(DATA_DIR / "gavel_throughputs_sf1.csv")
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("gavel_job_type,other_job_type,gpu_type,steps_s,other_steps_s\n"
                     f'"{R18}","{R50}",v100,{iso[R18]["v100"] / slow_r18!r},'
                     f'{iso[R50]["v100"] / slow_r50!r}\n')  # fmt: skip
    return {
        "name": "t", "seed": 1,
        "cluster": {"nodes": [{"name": "n", "devices": {"gpu": {"type": "v100"}}}]},
        "workload": {
            "kind": "cluster",
            "inventory": [{"gpu_type": "v100", "nodes": 1, "gpus_per_node": 1}],
            "jobs": {"kind": "muri_trace", "path": str(trace)},
            "speeds": {"pairs_path": str(pairs)},
            "execution": {"restart_s": 0.0, "round_s": None, "max_group_size": 2,
                          "interference": [1.0, 1.0, 1.0, 1.0], "unpack": False},
        },
        "outputs": {"spans": False},
    }  # fmt: skip


def test_each_member_of_a_measured_pair_advances_at_its_own_rate(tmp_path: Path) -> None:
    # Pair slowdowns 2 (ResNet-18) and 1.25 (ResNet-50): in the pair job 0 takes 2 s per
    # iteration, job 1 1.25 s. Job 0 ends at 10 x 2 = 20 s; by then job 1 has done
    # 20 / 1.25 = 16 of 40 iterations and runs the other 24 alone at 1 s: ends at 44 s.
    # (One iteration time for the group, as before, would end both at multiples of it.)
    sc = from_dict(pair_scenario(tmp_path, 2.0, 1.25))
    sim = Simulation(sc.seed)
    wl = build(sc, sim)
    assert wl.est.member_iter_s([0, 1], 0) == pytest.approx((2.0, 1.25))
    assert wl.est.member_iter_s([1, 0], 0) == pytest.approx((1.25, 2.0))
    wl.queued.update({0: None, 1: None})  # both submitted at 0; placed as one pair
    wl._next_arrival = 2
    wl.start_group([0, 1], 0)
    sim.run(until=wl.done)
    wl.check()
    assert wl.finish[0] == pytest.approx(20.0, rel=1e-9)
    assert wl.finish[1] == pytest.approx(44.0, rel=1e-9)


def test_shipped_pairs_give_gavels_own_rates(tmp_path: Path) -> None:
    # Jobs whose solo iteration time is Gavel's (1 / isolated steps/s on V100) run at
    # exactly Gavel's measured pair rates with the shipped table: ResNet-18 bs32 at
    # 15.0552 steps/s and ResNet-50 bs64 at 3.7047 next to each other.
    iso = read_speed_table(DATA_DIR / "gavel_throughputs_sf1.csv")
    raw = pair_scenario(tmp_path, 1.0, 1.0)
    trace = Path(raw["workload"]["jobs"]["path"])
    trace.write_text(HEADER + f"0,1,0,10,resnet18,32,10,0,{1000 / iso[R18]['v100']!r},0,1,0,0\n"
                     f"1,1,0,40,vgg16,64,40,0,{1000 / iso[R50]['v100']!r},0,1,0,0\n")  # fmt: skip
    raw["workload"]["speeds"]["pairs_path"] = "pkg:cluster/gavel_pairs_sf1.csv"
    wl = build(from_dict(raw), Simulation(1))
    own = wl.est.member_iter_s([0, 1], 0)
    assert own is not None
    assert 1 / own[0] == pytest.approx(15.055176143810225, rel=1e-9)
    assert 1 / own[1] == pytest.approx(3.7046719336355154, rel=1e-9)


def test_packed_lp_two_jobs_one_gpu_by_hand() -> None:
    # One type, 1 GPU; jobs A, B at 1 step/s alone (T_eq = 1), together A 0.8, B 0.6.
    # Variables p (pair), q (A alone), r (B alone), p + q + r <= 1. Effective rates
    # A = q + 0.8 p, B = r + 0.6 p. A has the surplus, so q = 0, r = 1 - p: A = 0.8 p,
    # B = 1 - 0.4 p, equal at p = 5/6: min 2/3 (time-sharing alone: 1/2; the pair
    # alone: 0.6). Upper bound: 1/3 A + 2/3 B <= (2/3)(p + q + r) <= 2/3, so optimal.
    rates = np.array([[[1.0, 0.0]], [[1.0, 0.0]], [[0.8, 0.6]]])
    x, z = max_min_packed_lp([(0,), (1,), (0, 1)], rates, np.ones(2), np.ones(2),
                             np.array([1.0]))  # fmt: skip
    assert z == pytest.approx(2 / 3, abs=1e-7)
    assert x[:, 0] == pytest.approx([0.0, 1 / 6, 5 / 6], abs=1e-7)


def lone(job: int) -> GroupView:
    return GroupView((job,), 1, (True,), (1.0,), (1.0,), (True,), False, 0.0, (0.0,), 10.0)


def test_dispatch_places_the_pair_first() -> None:
    # The instance above as a view: both jobs wait, never served. Priorities X x 1e9:
    # pair 5/6, B alone 1/6, A alone 0: the pair takes the GPU, returned as a pair of the
    # two groups on type 0.
    def combo(members: tuple[int, ...], t: int) -> tuple[float, ...]:
        return (1.0,) if len(members) == 1 else (1 / 0.8, 1 / 0.6)

    view = AllocationView(10.0, ("v100",), (1,), (lone(0), lone(1)), (), (1,),
                          combo_iter_s=combo, combo_service=lambda c: ((0.0,), 10.0))  # fmt: skip
    policy = GavelLPAllocation(GavelParams(space_sharing=True), np.random.default_rng(0))
    assert policy.allocate(view) == SpaceShared([0, 0], ((0, 1),))
    # The pair has now run 50 s of its 60 s (fraction 5/6: priority 1); B never alone
    # (priority 1e9 x 1/6): B alone takes the GPU at the next round.
    later = view._replace(now_s=60.0, combo_service=lambda c: ((50.0 if len(c) == 2 else 0.0,),
                                                               60.0))  # fmt: skip
    assert policy.allocate(later) == SpaceShared([None, 0], ())
    with pytest.raises(ValueError, match="heterogeneity_aware"):
        GavelParams(space_sharing=True, heterogeneity_aware=False)


@pytest.mark.slow
def test_space_sharing_run_pairs_jobs_and_completes() -> None:
    # 60 jobs of Gavel's types at 36 jobs/h on gavel.yaml's cluster with the measured
    # pairs: every job completes, some GPU time runs in pairs, GPU accounting holds
    # (the run's invariants), and a pair is never formed without the table.
    over = {"workload.jobs.num_jobs": 60, "workload.jobs.arrival_rate_per_s": 0.01,
            "policies.allocation": {"name": "gavel", "space_sharing": True},
            "workload.speeds.pairs_path": None}  # fmt: skip
    plain = hetsim.run(SCENARIOS / "gavel.yaml", overrides=over).summary.iloc[0]
    assert plain["completed"] == 60 and plain["packed_share"] == 0
    over["workload.speeds.pairs_path"] = "pkg:cluster/gavel_pairs_sf1.csv"  # gavel.yaml's
    shared = hetsim.run(SCENARIOS / "gavel.yaml", overrides=over).summary.iloc[0]
    assert shared["completed"] == 60 and shared["packed_share"] > 0
