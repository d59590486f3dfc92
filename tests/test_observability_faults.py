"""Fault injection against its configured rates, and the job timeline against closed forms."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import chisquare

import hetsim
from hetsim.simulator.scenario import from_dict
from hetsim.workloads.observability.faults import (
    LLAMA3_COUNTS,
    FailSlowKind,
    FailStopModel,
    ettr_exact,
    ettr_first_order,
    llama3_rates_per_gpu_day,
    sample_fail_slow,
    sample_fail_stop,
)  # fmt: skip
from hetsim.workloads.observability.view import daly_interval_s
from tests.conftest import ROOT

DAY = 86_400.0
TRACE = ROOT / "workloads" / "data" / "observability" / "infinitehbd_fault_trace_sample.json"
SCEN = ROOT / "scenarios" / "faults.yaml"


def test_llama3_rate_reproduces_the_published_count() -> None:
    # 419 interruptions / (16,384 GPUs x 54 days) = 4.736e-4 per GPU-day
    total = sum(llama3_rates_per_gpu_day().values())
    assert total == pytest.approx(419 / (16_384 * 54))
    assert sum(n for n, _ in LLAMA3_COUNTS.values()) == 419


def test_fault_counts_per_cause_match_the_rates() -> None:
    # 16,384 GPUs for 540 days: 4,190 expected faults; chi-square on causes pooled so
    # every expected count is >= 5 (causes with count < 10 of 419 pooled into one bin).
    rng = np.random.default_rng(2024)
    faults = sample_fail_stop(FailStopModel(), 16_384, 540 * DAY, rng, Path("."))
    big = [c for c, (n, _) in LLAMA3_COUNTS.items() if n >= 10]
    observed = [sum(f.kind == c for f in faults) for c in big]
    observed.append(len(faults) - sum(observed))
    weights = [LLAMA3_COUNTS[c][0] for c in big]
    weights.append(419 - sum(weights))
    expected = np.array(weights) / 419 * len(faults)
    assert chisquare(observed, expected).pvalue > 0.001
    # total count: Poisson(4190), sd 64.7; 4 sd
    assert abs(len(faults) - 4190) < 4 * 64.7


def test_fail_stop_times_are_poisson_and_ranks_uniform() -> None:
    rng = np.random.default_rng(7)
    faults = sample_fail_stop(FailStopModel(), 10_000, 3650 * DAY, rng, Path("."))
    gaps = np.diff([f.start_s for f in faults])
    mtbf_s = DAY / (10_000 * 419 / (16_384 * 54))  # 1 / (N r) = 5.07 h
    # about 17,300 gaps: mean within 3 %, and exponential (coefficient of variation 1)
    assert gaps.mean() == pytest.approx(mtbf_s, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)
    ranks = np.array([f.rank for f in faults])
    assert chisquare(np.bincount(ranks // 1000, minlength=10)).pvalue > 0.001


def test_fail_slow_rates_and_durations() -> None:
    kinds = {"gpu-slowdown": FailSlowKind(rate_per_gpu_day=1e-3, persistent_fraction=0.25,
                                          mean_transient_s=600.0)}  # fmt: skip
    faults = sample_fail_slow(kinds, 1000, 2000 * DAY, np.random.default_rng(3))
    assert len(faults) == pytest.approx(2000, abs=4 * math.sqrt(2000))
    persistent = [f for f in faults if math.isinf(f.end_s)]
    assert len(persistent) / len(faults) == pytest.approx(0.25, abs=0.04)
    lengths = np.array([f.end_s - f.start_s for f in faults if math.isfinite(f.end_s)])
    assert lengths.mean() == pytest.approx(600.0, rel=0.1)
    assert all(1.2 <= f.factor <= 2.0 and f.cause == "compute" for f in faults)


def test_trace_replay_keeps_the_fault_starts_of_mapped_nodes() -> None:
    events = json.loads(TRACE.read_text())
    nodes: list[str] = []
    for e in sorted((e for e in events if e["event_type"] == "fault_start"),
                    key=lambda e: (e["event_time"], e["node_id"])):  # fmt: skip
        if e["node_id"] not in nodes:
            nodes.append(e["node_id"])
    first_ten = set(nodes[:10])
    expected = sum(e["event_type"] == "fault_start" and e["node_id"] in first_ten for e in events)
    model = FailStopModel(kind="trace", path=TRACE.name)
    faults = sample_fail_stop(model, 80, 1000 * DAY, np.random.default_rng(0), TRACE.parent)
    assert len(faults) == expected
    assert all(0 <= f.rank < 80 for f in faults)


def job(**workload: Any) -> Any:
    raw = {
        "name": "small-faults",
        "seed": 3,
        "cluster": {"nodes": [{"name": "n", "devices": {"gpu": {"type": "h100-sxm", "count": 8}}}]},
        "workload": {"kind": "observability-faults", "gpus": 10_000, **workload},
        "policies": {"detector": {"name": "kaiops", "tpr": {"fail-stop": 1.0, "fail-slow": 1.0},
                                  "delay_s": {"fail-stop": 30.0, "fail-slow": 300.0},
                                  "false_alarms_per_gpu_day": 0.0}},
        "outputs": {"spans": False},
    }  # fmt: skip
    return from_dict(raw)


def test_ettr_and_mtbf_against_closed_forms() -> None:
    # fail-stop only, R = 30 + 600 s, C = 120 s, tau = Daly's optimum, 5 years:
    # about 8,600 failures, so the simulated ETTR is within 0.5 % of the exact renewal form.
    row = hetsim.run(job(duration_days=1825.0)).summary.iloc[0]
    m = DAY / (10_000 * 419 / (16_384 * 54))
    assert row["expected_mtbf_h"] == pytest.approx(m / 3600)
    assert row["job_mtbf_h"] == pytest.approx(m / 3600, rel=0.03)
    tau = daly_interval_s(120.0, m)
    assert row["interval_s"] == pytest.approx(tau)
    assert row["ettr"] == pytest.approx(ettr_exact(tau, 120.0, 630.0, m), abs=0.005)
    assert row["ettr"] == pytest.approx(ettr_first_order(tau, 120.0, 630.0, m), abs=0.015)


def test_better_detection_means_less_slow_time() -> None:
    slow = {"gpu-slowdown": {"rate_per_gpu_day": 2e-4, "persistent_fraction": 1.0}}
    sc = job(duration_days=60.0, fail_stop={"kind": "none"}, fail_slow=slow)
    fast = hetsim.run(sc).summary.iloc[0]
    late = sc.with_overrides({"policies.detector.delay_s": {"fail-slow": 7200.0}})
    slow_row = hetsim.run(late).summary.iloc[0]
    assert fast["fail_stops"] == 0 and fast["fail_slows"] > 50
    assert fast["slow_loss_h"] < slow_row["slow_loss_h"]
    assert fast["ettr"] > slow_row["ettr"]


def _probe(detector: Any, link_telemetry: str = "collective") -> Any:
    from hetsim.schedulers.observability.kair import KairDetector, KairParams
    from hetsim.workloads.observability.probe import ProbeParams, TelemetryProbe
    from hetsim.workloads.observability.telemetry import BaseTimes, NoiseModel

    base = BaseTimes(0.02, 0.2, 0.4, 0.1)  # iteration 0.72 s; a 50-iteration window 36 s
    det = detector or KairDetector(KairParams(), np.random.default_rng(0))
    params = ProbeParams(link_telemetry=link_telemetry)
    return TelemetryProbe(det, base, NoiseModel(), params, np.random.default_rng(1))


def test_telemetry_probe_finds_compute_stragglers_in_the_first_window() -> None:
    from hetsim.workloads.observability.view import OracleEventView, OracleFault

    probe = _probe(None)
    probe.set_factors({1: 1.5, 2: 1.5})
    gpu = OracleFault(1, "fail-slow", "gpu-slowdown", "compute", 7, 0.0, 0.0)
    d = probe.classify(OracleEventView(0.0, gpu))
    assert (d.detected, d.cause) == (True, "compute")
    assert d.delay_s == pytest.approx(50 * 0.72)  # one window of nominal iterations
    # a ring hides which link is slow: the straggler is never reported (20 windows)
    link = OracleFault(2, "fail-slow", "link-degradation", "communication", 7, 0.0, 0.0)
    assert not probe.classify(OracleEventView(0.0, link)).detected
    # a fail-stop fault is not in the telemetry: left to the watchdog
    stop = OracleFault(3, "fail-stop", "faulty-gpu", "gpu", 7, 0.0, 0.0)
    assert not probe.classify(OracleEventView(0.0, stop)).detected


def test_telemetry_detector_quality_moves_ettr() -> None:
    # the job-level workload with telemetry detectors on the probe (1,000 GPUs, 3 days):
    # Kair raises no false alarm on clean probe windows, the z-score (top |z| > 3 ranks
    # each window) raises many, each an eviction, so its ETTR is lower
    def run(detector: str) -> Any:
        return hetsim.run(SCEN, overrides={"policies.detector": detector, "workload.gpus": 1000,
                                           "workload.duration_days": 3}).summary.iloc[0]  # fmt: skip

    kair, z = run("kair"), run("zscore")
    assert kair["false_alarms"] == 0 and z["false_alarms"] > 0
    assert z["ettr"] < kair["ettr"]
