"""The straggler-detection workload end to end on small runs (64 ranks)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import hetsim
from hetsim.simulator.scenario import from_dict
from hetsim.workloads.observability.telemetry import (
    BaseTimes,
    NoiseModel,
    iteration_slowdown,
    simulate_window,
)  # fmt: skip


def scenario(stragglers: dict[str, Any], detector: str = "kair", **workload: Any) -> Any:
    raw = {
        "name": "small-kair",
        "seed": 5,
        "cluster": {"nodes": [{"name": "n", "devices": {"gpu": {"type": "a800", "count": 8}}}]},
        "workload": {"kind": "observability", "ranks": 64, "iterations": 400,
                     "window_iters": 50, "stragglers": stragglers, **workload},
        "policies": {"detector": detector},
        "outputs": {"spans": False},
    }  # fmt: skip
    return from_dict(raw)


def one(kind: str, factor: float) -> dict[str, Any]:
    return {kind: {"count": 1, "slowdown": [factor, factor], "persistent_fraction": 1.0}}


@pytest.mark.parametrize(
    ("kind", "cause", "ops"),
    [
        ("gpu-slowdown", "compute", ("forward", "backward")),
        ("link-degradation", "communication", ("send",)),
    ],
)
def test_single_slow_rank_found_with_its_cause(kind: str, cause: str, ops: tuple[str, ...]) -> None:
    res = hetsim.run(scenario(one(kind, 1.3)))
    fault = res.tables["faults"].iloc[0]
    first = res.tables["findings"].query("true").iloc[0]
    assert (first["rank"], first["cause"]) == (fault["rank"], cause)
    assert first["operator"] in ops
    row = res.summary.iloc[0]
    assert row["false_findings"] == 0
    # found in the window it started in or the next: delay under two windows of time
    assert 0 < row["mean_delay_s"] < 2 * 50 * row["mean_iteration_s"] * 1.5


def test_clean_run_has_no_finding() -> None:
    # Bonferroni at alpha = 0.01: at most 0.01 false alarms expected per window, 8 windows
    # -> P(any) <= 0.08, P(two or more) < 0.004; spikes (one-off hiccups) are on.
    res = hetsim.run(scenario({}, noise={"spike_prob": 1e-3}))
    assert res.summary.iloc[0]["findings"] <= 1


def test_mitigation_evicts_the_straggler_and_pays_the_replacement() -> None:
    sc = scenario(one("gpu-slowdown", 1.5))
    sc = sc.with_overrides({"policies.mitigation": "evict-replace", "workload.replace_s": 60.0})
    row = hetsim.run(sc).summary.iloc[0]
    assert row["evictions"] == 1
    assert row["mitigation_s"] == pytest.approx(60.0)
    assert row["makespan_s"] == pytest.approx(400 * row["mean_iteration_s"] + 60.0)


def test_window_collective_starts_at_last_arrival_and_runs_at_slowest_link() -> None:
    base = BaseTimes(0.1, 1.0, 2.0, 0.5)
    quiet = NoiseModel(noise_sigma=0.0, rank_sigma=0.0, spike_prob=0.0)
    mult = np.ones((4, 3, 2))
    mult[1, 1, 0] = 2.0  # rank 1 forward x2 in iteration 0 -> entry 4.1, others 3.1
    mult[3, 2, 1] = 3.0  # rank 2 link x3 in iteration 1 -> collective 1.5 s
    win = simulate_window(base, quiet, np.ones((4, 3)), mult, np.random.default_rng(0))
    assert win.iteration_s.tolist() == pytest.approx([4.1 + 0.5, 3.1 + 1.5])
    assert win.wait_s[:, 0].tolist() == pytest.approx([1.0, 0.0, 1.0])
    # the same by the noise-free job-level formula: (4.1 + 0.5) / 3.6 and (3.1 + 1.5) / 3.6
    assert iteration_slowdown(base, [("gpu-slowdown", 2.0)]) == pytest.approx(
        (0.1 + 2.0 * (1.0 + 2.0) + 0.5) / 3.6
    )
    assert iteration_slowdown(base, [("link-degradation", 3.0)]) == pytest.approx(4.6 / 3.6)


def test_noise_factors_have_mean_one() -> None:
    base = BaseTimes(0.0, 1.0, 0.0, 0.0)
    noise = NoiseModel(noise_sigma=0.2, rank_sigma=0.0, spike_prob=0.0)
    win = simulate_window(base, noise, np.ones((4, 200)), np.ones((4, 200, 500)),
                          np.random.default_rng(1))  # fmt: skip
    # lognormal exp(0.2 Z - 0.02): mean 1, sd sqrt(e^0.04 - 1) = 0.2020; 100,000 samples
    assert win.op_s[1].mean() == pytest.approx(1.0, abs=4 * 0.202 / 316)
    assert win.op_s[1].std() == pytest.approx(np.sqrt(np.expm1(0.04)), rel=0.02)
