"""Cluster mechanism: exact same-instant log, GPU accounting and completion properties,
trace errors naming file/line/column, and the papers' directions on short seeded runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hetsim
from hetsim.simulator.cli import main
from hetsim.simulator.engine import Simulation
from hetsim.simulator.runner import build
from hetsim.simulator.scenario import from_dict, load_scenario
from hetsim.workloads.cluster.model import GpuPool
from tests.conftest import SCENARIOS

HEADER = "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,"
HEADER += "iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n"


EXACT = {"duration_noise_sigma": 0.0, "interference_noise_sigma": 0.0}


def trace(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + "".join(r + "\n" for r in rows))
    return path


def scenario(path: Path, gpus: int = 1, **execution: Any) -> dict[str, Any]:
    ex = {"restart_s": 0.0, "round_s": None, "interference": [1.0, 1.0, 1.0, 1.0]}
    ex.update(execution)
    return {
        "name": "t", "seed": 1,
        "cluster": {"nodes": [{"name": "n", "devices": {"gpu": {"type": "v100"}}}]},
        "workload": {
            "kind": "cluster",
            "inventory": [{"gpu_type": "v100", "nodes": 1, "gpus_per_node": gpus}],
            "jobs": {"kind": "muri_trace", "path": str(path)},
            "execution": ex,
            # hand-worked completion times: the policies see exact estimates (an oracle,
            # so that the packing decision worked out by hand is the one taken)
            "estimates": EXACT,
        },
        "outputs": {"spans": False},
    }  # fmt: skip


def run_log(raw: dict[str, Any]) -> Any:
    sc = from_dict(raw)
    sim = Simulation(sc.seed)
    wl = build(sc, sim)
    wl.start()
    sim.run(until=wl.done)
    wl.check()
    return wl


def test_same_instant_exact_log(tmp_path: Path) -> None:
    # One GPU. Job 0: 10 iterations of 1 s from t=0 -> ends at 10. Job 1 arrives at exactly
    # t=10 (submit 10,000 ms). Arrival and completion at t=10 both precede ONE pass, which
    # starts job 1; it runs 10 x 1 s -> 20. The arrival timer was created before job 0's
    # completion timer, so it fires first at t=10.
    path = trace(tmp_path, ["0,1,0,10,dqn,128,10000,0,1000,1000,0,0,0",
                            "1,1,10000,10,dqn,128,10000,0,1000,1000,0,0,0"])  # fmt: skip
    wl = run_log(scenario(path))
    assert wl.log == [
        ("arrive", 0.0, 0), ("pass", 0.0, -1), ("start", 0.0, 0),
        ("arrive", 10.0, 1), ("finish", 10.0, 0), ("tick", 10.0, 0), ("pass", 10.0, -1),
        ("start", 10.0, 1), ("finish", 20.0, 1), ("tick", 20.0, 1), ("pass", 20.0, -1),
    ]  # fmt: skip


def test_restart_delay_and_packing_completion_times(tmp_path: Path) -> None:
    # Plain 3-stage cycle (data_slots 1), solo = stage sum. One GPU, both jobs at t=0, Muri
    # packing. Stages [4,1,0] and [1,3,0] s; best shifted column-max sum 6
    # (tests/test_cluster_policies.py), interference 1.2 for 2 jobs: packed iteration 7.2 s
    # < 5 + 4 solo, so they interleave. Restart 2 s. Job 0 has 2 iterations, job 1 has 4:
    # job 0 ends at 2 + 2 x 7.2 = 16.4; job 1 then runs alone (4 s/iter, no restart when a
    # group shrinks) for its last 2: 16.4 + 8 = 24.4.
    path = trace(tmp_path, ["0,1,0,2,dqn,128,1,0,1,4000,1000,0,0",
                            "1,1,0,4,dqn,128,1,0,1,1000,3000,0,0"])  # fmt: skip
    raw = scenario(path, restart_s=2.0, interference=[1.0, 1.2, 1.5], max_group_size=3,
                   data_slots=1, solo_time="stage_sum")  # fmt: skip
    raw["policies"] = {"packing": "muri"}
    wl = run_log(raw)
    assert wl.finish.tolist() == pytest.approx([16.4, 24.4])


def test_muri_four_phase_cycle_completion_times(tmp_path: Path) -> None:
    # Muri's cycle (data spans the IO and CPU phases: 4 phases), solo = the trace's measured
    # iteration_time (5 s and 4 s here). Same stages [4,1,0] and [1,3,0]. Job 1 two phases
    # after job 0: phase constraints f2 >= f0 + 4 (A data), f0' >= f2 + 1 (B data, wraps),
    # f1 >= f0 + 3 (B gpu), f3 >= f2 + 1 (A gpu) ...; the binding cycle is the two data
    # stages back to back, 4 + 1 = 5 s per iteration (other placements give 5 or 8).
    # x 1.2 (2 jobs) = 6 s < 5 + 4 solo. Restart 2: job 0 ends 2 + 2 x 6 = 14; job 1 runs its
    # last 2 iterations alone at 4 s: 14 + 8 = 22.
    path = trace(tmp_path, ["0,1,0,2,dqn,128,1,0,5000,4000,1000,0,0",
                            "1,1,0,4,dqn,128,1,0,4000,1000,3000,0,0"])  # fmt: skip
    raw = scenario(path, restart_s=2.0, interference=[1.0, 1.2, 1.5, 1.5])
    raw["policies"] = {"packing": "muri"}
    wl = run_log(raw)
    assert wl.finish.tolist() == pytest.approx([14.0, 22.0])


def test_packed_group_unpacks_when_gpus_free(tmp_path: Path) -> None:
    # 3 GPUs. A, B (1 GPU; stages and solo as in the test above) and D (2 GPUs, 1 iteration
    # of 4 s alone) at t=0: demand 4 > 3, so A and B interleave (6 s per iteration) and D
    # runs alone; all start at 2 (restart). D ends at 2 + 4 = 6; A and B have done (6-2)/6
    # = 2/3 iteration. The queue is empty and 2 GPUs are free: B leaves the group and runs
    # alone (restart again: both resume at 8). A: 4/3 left x 5 s = 6.667 -> 14.667.
    # B: 10/3 left x 4 s = 13.333 -> 21.333. (Packed to the end: 14 and 22.)
    path = trace(tmp_path, ["0,1,0,2,dqn,128,1,0,5000,4000,1000,0,0",
                            "1,1,0,4,dqn,128,1,0,4000,1000,3000,0,0",
                            "2,2,0,1,dqn,128,1,0,4000,0,4000,0,0"])  # fmt: skip
    raw = scenario(path, gpus=3, restart_s=2.0, interference=[1.0, 1.2, 1.5, 1.5])
    raw["policies"] = {"packing": "muri"}
    wl = run_log(raw)
    assert ("detach", 6.0, 1) in wl.log
    assert wl.finish.tolist() == pytest.approx([14.0 + 2 / 3, 21.0 + 1 / 3, 6.0])
    raw["workload"]["execution"]["unpack"] = False
    assert run_log(raw).finish.tolist() == pytest.approx([14.0, 22.0, 6.0])


def test_cross_gpu_packing_ablation(tmp_path: Path) -> None:
    # One 2-GPU node. A: 1 GPU, stages [4,1,0], 5 s alone, 2 iterations; B: 2 GPUs, [1,3,0],
    # 4 s alone, 4 iterations; demand 3 > 2 free. Muri's rule (same GPU count) cannot pair
    # them: A runs (restart 2, 2 x 5) to 12, B then 12 + 2 + 4 x 4 = 30. With
    # cross_gpu_packing the pair holds B's 2 GPUs; GPU-weighted solo time (5 x 1 + 4 x 2) / 2
    # = 6.5 > packed 5 x 1.2 = 6, so they merge: A ends 2 + 2 x 6 = 14, B runs its last 2
    # iterations alone: 14 + 8 = 22.
    path = trace(tmp_path, ["0,1,0,2,dqn,128,1,0,5000,4000,1000,0,0",
                            "1,2,0,4,dqn,128,1,0,4000,1000,3000,0,0"])  # fmt: skip
    raw = scenario(path, gpus=2, restart_s=2.0, interference=[1.0, 1.2, 1.5, 1.5])
    raw["policies"] = {"packing": "muri"}
    assert run_log(raw).finish.tolist() == pytest.approx([12.0, 30.0])
    raw["workload"]["execution"]["cross_gpu_packing"] = True
    wl = run_log(raw)
    assert wl.finish.tolist() == pytest.approx([14.0, 22.0])
    assert wl.attained.tolist() == pytest.approx([12.0, 2 * 20.0])  # own GPUs x run time


def test_gpu_pool_best_fit_and_spread() -> None:
    pool = GpuPool(["a"], [(0, 8), (0, 8), (0, 4)])
    assert pool.allocate(0, 4) == [(2, 4)]  # best fit: the 4-GPU node
    assert pool.allocate(0, 6) == [(0, 6)]
    assert pool.allocate(0, 10) == [(1, 8), (0, 2)]  # spread over most-free nodes
    assert pool.allocate(0, 1) is None
    pool.release([(1, 8), (0, 2)])
    assert pool.free.tolist() == [10]


@settings(max_examples=15, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(0, 50), st.integers(1, 40),
                  st.sampled_from(["dqn", "bert", "resnet18", "gpt2"])),
        min_size=1, max_size=25),
    packing=st.sampled_from(["none", "muri", "cuckoo"]),
    ordering=st.sampled_from(["fifo", "tiresias", "cuckoo"]),
    cross=st.booleans(),
    contention=st.booleans(),
)  # fmt: skip
def test_every_job_completes_once_no_double_allocation(
    tmp_path_factory: pytest.TempPathFactory, jobs: list, packing: str, ordering: str,
    cross: bool, contention: bool,
) -> None:  # fmt: skip
    profile = {"dqn": "446,8,0", "bert": "0.5,160,18", "resnet18": "711,110,73", "gpt2": "1,410,40"}
    rows = [f"{i},{g},{s * 1000},{it},{m},1,1,0,1,{profile[m]},0"
            for i, (g, s, it, m) in enumerate(jobs)]  # fmt: skip
    path = trace(tmp_path_factory.mktemp("h"), rows)
    raw = scenario(path, gpus=8, restart_s=1.0, round_s=5.0, preemption=True,
                   solo_time="stage_sum", cross_gpu_packing=cross)  # fmt: skip
    raw["workload"]["inventory"].append({"gpu_type": "k80", "nodes": 1, "gpus_per_node": 8})
    raw["policies"] = {"ordering": ordering, "packing": packing, "allocation": "cuckoo"}
    if contention:  # tight node capacities; v100 as 2 x 4 GPUs so 8-GPU jobs use the NIC
        raw["workload"]["contention"] = {"enabled": True}
        caps = {"cpu_cores": 16.0, "storage_Bps": 1e7, "nic_Bps": 1e9}
        raw["workload"]["inventory"][0].update(nodes=2, gpus_per_node=4, **caps)
        raw["workload"]["inventory"][1].update(caps)
    wl = run_log(raw)  # check() asserts completion exactly once and the pool accounting
    assert wl.completed == len(jobs)
    assert wl.pool.free.tolist() == [8, 8]
    assert (wl.done_iters == wl.jobs.iterations).all()


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("0,0,0,10,dqn,128,1,0,1,1000,0,0,0", "trace.csv:2: column num_gpu: must be >= 1"),
        ("0,1,0,10,dqn,128,-5,0,1,1000,0,0,0", "trace.csv:2: column duration: must be >= 0"),
        ("0,1,0,10,alexnet,128,1,0,1,1000,0,0,0", "trace.csv:2: column model_name: unknown"),
    ],
)
def test_bad_trace_rows_name_file_line_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], row: str, message: str
) -> None:
    path = trace(tmp_path, [row])
    yaml_path = tmp_path / "s.yaml"
    import yaml

    yaml_path.write_text(yaml.safe_dump(scenario(path)))
    assert main(["run", str(yaml_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(str(tmp_path)) and message in err and len(err.splitlines()) == 1


def test_group_larger_than_cycle_is_a_workload_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a plain 3-phase cycle (data_slots 1) cannot interleave 4 jobs
    path = trace(tmp_path, ["0,1,0,10,dqn,128,1,0,1,1000,0,0,0"])
    yaml_path = tmp_path / "s.yaml"
    import yaml

    yaml_path.write_text(yaml.safe_dump(scenario(path, data_slots=1, max_group_size=4)))
    assert main(["run", str(yaml_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "s.yaml: workload:" in err and "max_group_size 4 exceeds the cycle's 3 phases" in err


def test_bad_rows_skipped_and_counted_when_asked(tmp_path: Path) -> None:
    path = trace(tmp_path, ["0,0,0,10,dqn,128,1,0,1,1000,0,0,0",
                            "1,1,0,10,dqn,128,1,0,1,1000,0,0,0"])  # fmt: skip
    raw = scenario(path)
    raw["workload"]["jobs"]["skip_bad_rows"] = True
    with pytest.warns(UserWarning, match="skipped 1 bad rows"):
        summary = hetsim.run(from_dict(raw)).summary.iloc[0]
    assert summary["skipped_rows"] == 1 and summary["completed"] == 1


def small_cuckoo(**over: Any) -> dict[str, float]:
    base = {"workload.jobs.num_jobs": 120, "workload.jobs.arrival_rate_per_s": 0.004,
            "workload.deadlines.factor_low": 0.5, "workload.deadlines.factor_high": 1.5}  # fmt: skip
    base.update(over)
    return dict(hetsim.run(SCENARIOS / "cuckoo.yaml", overrides=base).summary.iloc[0])


BASELINES = {
    "edf": ("edf", "none", "first-fit", False),
    "tiresias": ("tiresias", "none", "first-fit", False),
    "muri": ("srtf", "muri", "first-fit", False),
    # Gavel's LP with its preemptive rounds (its only way to time-share), as shipped
    "gavel-lp": ("fifo", "none", {"name": "gavel", "preempt_at_rounds": True}, True),
}


def cuckoo_dsr(seed: int, **over: Any) -> dict[str, float]:
    """DSR of Cuckoo and of each full-strength baseline on one short overloaded run."""
    out = {"cuckoo": small_cuckoo(seed=seed, **over)["dsr"]}
    for name, (o, p, a, pre) in BASELINES.items():
        out[name] = small_cuckoo(**{"seed": seed, "policies.ordering": o, "policies.packing": p,
                                    "policies.allocation": a,
                                    "workload.execution.preemption": pre, **over})["dsr"]  # fmt: skip
    return out


@pytest.mark.slow
def test_cuckoo_deadlines_against_gavel_lp_tiresias_muri_edf_over_seeds() -> None:
    # Cuckoo's 2.38x DSR claim on short overloaded runs (lambda ~ U[0.5, 1.5]), seeds 1-3,
    # against EDF, Tiresias, Muri-S and Gavel's LP. Under the default estimates (published
    # errors: job length sigma 0.15, interference sigma 0.28; workloads/cluster/params.py)
    # Cuckoo meets at least Gavel's LP's DSR and more than Tiresias's on every seed, but
    # stays far from 2.38x the best baseline (asserted < 1.5x; measured 0.97-1.10x). With
    # exact estimates (the oracle, labelled) it leads every baseline on every seed.
    exact = {"workload.estimates.duration_noise_sigma": 0.0,
             "workload.estimates.interference_noise_sigma": 0.0}  # fmt: skip
    for seed in (1, 2, 3):
        dsr = cuckoo_dsr(seed)
        best = max(v for k, v in dsr.items() if k != "cuckoo")
        assert dsr["cuckoo"] >= dsr["gavel-lp"] and dsr["cuckoo"] > dsr["tiresias"], seed
        assert dsr["cuckoo"] < 1.5 * best, seed
        oracle = cuckoo_dsr(seed, **exact)
        assert oracle["cuckoo"] >= max(v for k, v in oracle.items() if k != "cuckoo"), seed


@pytest.mark.slow
def test_muri_interleaving_directions_on_philly_trace() -> None:
    # The scenario's 400 Philly-derived jobs at t=0 (docs/cluster.md, seed 1): Muri-L
    # (Tiresias order + interleaving) vs Tiresias (event-driven): lower mean JCT and
    # makespan (measured 1.61x and 1.22x; 1.56x and 1.24x with round-only Tiresias); Muri-S vs SRTF: shorter makespan (measured 1.21x), mean JCT within
    # 5% (measured 1.01x worse). Interleaving raises per-GPU throughput: most GPU time packed.
    sc = load_scenario(SCENARIOS / "muri.yaml")

    def run(order: str, pack: str) -> Any:
        over = {"policies.ordering": order, "policies.packing": pack}
        return hetsim.run(sc, overrides=over).summary.iloc[0]

    muri_l, tiresias = run("tiresias", "muri"), run("tiresias", "none")
    assert muri_l["packed_share"] > 0.5
    assert muri_l["mean_jct_s"] < 0.8 * tiresias["mean_jct_s"]
    assert muri_l["makespan_s"] < 0.9 * tiresias["makespan_s"]
    muri_s, srtf = run("srtf", "muri"), run("srtf", "none")
    assert muri_s["makespan_s"] < 0.9 * srtf["makespan_s"]
    assert muri_s["mean_jct_s"] < 1.05 * srtf["mean_jct_s"]


def test_scenarios_validate() -> None:
    from tests.conftest import missing_shared_data

    for name in ("muri", "cuckoo", "cuckoo_load", "gavel", "alibaba2023"):
        path = SCENARIOS / f"{name}.yaml"
        if missing_shared_data(path):
            continue  # the Alibaba trace is not shipped; validated where ../shared has it
        assert main(["validate", str(path)]) == 0
