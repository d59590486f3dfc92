"""Cuckoo's headline directions on short seeded runs (docs/cluster.md, "Cuckoo").

Baselines: EDF, Tiresias, Muri-S (SRTF + Muri packing) with first-fit placement, the
greedy Gavel-like allocator, and Gavel's LP with preemptive rounds (its time-sharing).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import hetsim

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
BASELINES = {
    "edf": ("edf", "none", "first-fit"),
    "tiresias": ("tiresias", "none", "first-fit"),
    "muri-s": ("srtf", "muri", "first-fit"),
    "gavel-like": ("tiresias", "none", "gavel-like"),
    "gavel": ("fifo", "none", "gavel"),
}
A100 = {  # A100 nodes instead of P100 (GPU-stage speed 1.73 x V100: an assumption)
    "workload.inventory": [{"gpu_type": t, "nodes": 4, "gpus_per_node": 8}
                           for t in ("a100", "v100", "k80")],
    "workload.speeds.type_speeds": {"a100": 1.73},
}  # fmt: skip


def run(policy: tuple[str, str, str], **over: Any) -> Any:
    o, p, a = policy
    base = {"workload.jobs.num_jobs": 150, "policies.ordering": o, "policies.packing": p,
            "policies.allocation": a, "workload.execution.preemption": a == "gavel"}  # fmt: skip
    base.update(over)
    return hetsim.run(SCENARIOS / "cuckoo_load.yaml", overrides=base)


def ratios(**over: Any) -> tuple[float, float]:
    """Cuckoo's DSR / the best baseline's, and the best baseline's mean JCT / Cuckoo's."""
    c = run(("cuckoo", "cuckoo", "cuckoo"), **over).summary.iloc[0]
    b = [run(p, **over).summary.iloc[0] for p in BASELINES.values()]
    return c["dsr"] / max(x["dsr"] for x in b), min(x["mean_jct_s"] for x in b) / c["mean_jct_s"]


@pytest.mark.slow
def test_cuckoo_lead_under_overload_against_full_strength_baselines() -> None:
    # lambda ~ U[0.5, 1.5], 150 jobs, seed 1; truth = Muri's factors (Cuckoo plans on its
    # stage model), Tiresias event-driven. Offered load ~0.67 of the cluster's
    # V100-equivalent capacity at 0.002/s, ~2.0 at 0.006/s (docs/cluster.md). Overloaded,
    # Cuckoo still leads every baseline on DSR and mean JCT, but by little: the event-driven
    # Tiresias (least attained service first) keeps short jobs' deadlines too (measured
    # 1.00x DSR at 0.002/s; 1.03x DSR and 1.08x JCT at 0.006/s; with round-only Tiresias
    # and stage truth it was 1.31x / 1.24x). Tolerances: DSR lead >= 1 and not below the
    # light-load lead; JCT lead > 1.05x; and the abstract's 2.38x does not appear (< 1.5x).
    # the policies see exact estimates here (an oracle, labelled): with the published
    # estimator errors the lead is gone (tests/test_cluster_runs.py)
    exact = {"workload.estimates.duration_noise_sigma": 0.0,
             "workload.estimates.interference_noise_sigma": 0.0}  # fmt: skip
    low_dsr, _ = ratios(**{"workload.jobs.arrival_rate_per_s": 0.002}, **exact)
    high_dsr, high_jct = ratios(**{"workload.jobs.arrival_rate_per_s": 0.006}, **exact)
    assert 1.0 <= high_dsr < 1.5
    assert high_dsr >= low_dsr
    assert high_jct > 1.05


@pytest.mark.slow
def test_faster_type_rescues_tight_deadlines() -> None:
    # Deadlines are lambda x solo time on the V100 reference; a job with lambda < 1 can meet
    # its deadline only on a type faster than V100 for its model. With A100 nodes (GPU stage
    # 1.73x faster) fewer deadlines are infeasible even alone, and Cuckoo, which places
    # urgent jobs on their fastest deadline-safe type, meets some lambda < 1 deadlines
    # there and a higher DSR overall than on V100/P100/K80 (measured 0.53-0.59 vs 0.41-0.42
    # on 300 jobs at 0.003/s, seeds 1-3).
    over = {"workload.jobs.arrival_rate_per_s": 0.003}
    base = run(("cuckoo", "cuckoo", "cuckoo"), **over)
    fast = run(("cuckoo", "cuckoo", "cuckoo"), **over, **A100)
    b, f = base.summary.iloc[0], fast.summary.iloc[0]
    assert f["infeasible_deadlines"] < b["infeasible_deadlines"]
    assert f["dsr"] > b["dsr"] + 0.05
    jobs = fast.tables["jobs"]
    lam = (jobs["deadline_s"] - jobs["submit_s"]) / jobs["solo_s"]
    rescued = jobs[(lam < 1) & jobs["met_deadline"].astype(bool)]
    # measured (300 jobs, seeds 1-3): 30 / 27 / 36 such jobs met, all ending on A100. A
    # packed group can beat a member's measured solo time (its cycle uses stage sums), so
    # a rare one ends elsewhere (4 of 300 on V100/P100/K80 without A100): tolerance 80%.
    assert len(rescued) > 0
    assert (rescued["gpu_type"] == "a100").mean() >= 0.8


@pytest.mark.slow
def test_lead_over_tiresias_at_both_deadline_ranges() -> None:
    # Cuckoo's DSR / Tiresias's (deadline-agnostic), lambda ~ U[0.5, 1.5] vs U[2, 3], mean
    # over seeds 1-3 of 150-job runs at 0.004/s. Against the event-driven Tiresias the lead
    # holds at both ranges but hardly grows as deadlines tighten (measured means 1.28 vs
    # 1.24; against round-only Tiresias it was 1.49 vs 1.35, the abstract's direction).
    # Tolerance: above 1.1 at both (the mean is used: short runs are noisy per seed).
    def lead(lo: float, hi: float, seed: int) -> float:
        over = {"seed": seed, "workload.jobs.arrival_rate_per_s": 0.004,
                "workload.deadlines.factor_low": lo, "workload.deadlines.factor_high": hi}  # fmt: skip
        c = run(("cuckoo", "cuckoo", "cuckoo"), **over).summary.iloc[0]
        return c["dsr"] / run(BASELINES["tiresias"], **over).summary.iloc[0]["dsr"]

    tight = sum(lead(0.5, 1.5, s) for s in (1, 2, 3)) / 3
    loose = sum(lead(2.0, 3.0, s) for s in (1, 2, 3)) / 3
    assert tight > 1.1 and loose > 1.1
