"""Cluster baselines at full strength and estimates apart from the truth: event-driven
Tiresias preempting at the exact threshold-crossing instant (hand-worked timelines), the
job-length estimator's configured moments, and views that read declared lengths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hetsim.workloads.cluster.duration_estimate import DurationEstimator, error_factors
from hetsim.workloads.cluster.params import Estimates
from tests.test_cluster_runs import run_log, scenario, trace

#: two 1-GPU jobs of 1,000 one-second iterations; job 1 arrives at t = 100 s
TWO_JOBS = ["0,1,0,1000,dqn,128,1,0,1000,1000,0,0,0", "1,1,100000,1000,dqn,128,1,0,1000,1000,0,0,0"]


def tiresias_run(tmp_path: Path, restart_s: float, preemptive: bool = True) -> Any:
    raw = scenario(trace(tmp_path, TWO_JOBS), restart_s=restart_s)
    raw["policies"] = {"ordering": {"name": "tiresias", "thresholds_gpu_s": [500.0],
                                    "preemptive": preemptive}}  # fmt: skip
    return run_log(raw)


def events(wl: Any, kind: str) -> list[tuple[float, int]]:
    return [(t, j) for e, t, j in wl.log if e == kind]


def test_tiresias_preempts_at_the_threshold_crossing(tmp_path: Path) -> None:
    # One GPU, threshold 500 GPU-s, no restart cost. t=100: job 1 arrives; both in queue 0,
    # FIFO keeps job 0. t=500: job 0 reaches 500 GPU-s -> queue 1, job 1 (queue 0) preempts
    # it. t=1000: job 1 reaches 500 -> both in queue 1, FIFO: job 0 back. Job 0 ends at
    # 1000 + 500 = 1500, job 1 at 1500 + 500 = 2000.
    wl = tiresias_run(tmp_path, 0.0)
    assert events(wl, "preempt") == [(500.0, 0), (1000.0, 1)]
    assert [t for t, _ in events(wl, "priority")] == [500.0, 1000.0]
    assert wl.finish.tolist() == [1500.0, 2000.0]


def test_tiresias_crossing_counts_the_restart_delay(tmp_path: Path) -> None:
    # restart 10 s: service accrues only after it. Job 0 runs 10..510 (500 GPU-s at 510),
    # job 1 runs 520..1020 (crossing at 1020), job 0 resumes at 1030 with 500 iterations
    # left -> 1530; job 1 restarts at 1530, resumes 1540, 500 left -> 2040.
    wl = tiresias_run(tmp_path, 10.0)
    assert [t for t, _ in events(wl, "preempt")] == pytest.approx([510.0, 1020.0])
    assert wl.finish.tolist() == pytest.approx([1530.0, 2040.0])


def test_tiresias_without_preemption_is_fifo_here(tmp_path: Path) -> None:
    wl = tiresias_run(tmp_path, 0.0, preemptive=False)
    assert events(wl, "preempt") == []
    assert wl.finish.tolist() == [1000.0, 2000.0]


@pytest.mark.parametrize(("bias", "sigma"), [(0.0, 0.5), (0.3, 0.2), (-0.2, 1.0)])
def test_length_error_factors_have_the_configured_moments(bias: float, sigma: float) -> None:
    # 200,000 draws: sample mean within 4 standard errors of 1 + bias; std(ln f) within 1%.
    n = 200_000
    f = error_factors(Estimates(duration_bias=bias, duration_noise_sigma=sigma), n,
                      np.random.default_rng(7))  # fmt: skip
    se = (1 + bias) * np.sqrt(np.exp(sigma**2) - 1) / np.sqrt(n)
    assert abs(f.mean() - (1 + bias)) < 4 * se
    assert np.log(f).std() == pytest.approx(sigma, rel=0.01)


def test_exact_estimator_draws_nothing_and_returns_the_truth() -> None:
    rng = np.random.default_rng(3)
    f = error_factors(Estimates(duration_noise_sigma=0.0), 5, rng)
    assert f.tolist() == [1.0] * 5
    assert rng.random() == np.random.default_rng(3).random()  # the stream is untouched
    est = DurationEstimator(np.array([10.0, 4.0]), f[:2])
    assert est.remaining(np.array([2.5, 4.0]), np.array([0, 1])).tolist() == [7.5, 0.0]


def test_declared_lengths_floor_at_one_iteration_once_overrun() -> None:
    est = DurationEstimator(np.array([10.0, 10.0]), np.array([0.5, 2.0]))  # declared 5, 20
    done = np.array([7.0, 7.0])
    assert est.remaining(done, np.array([0, 1])).tolist() == [1.0, 13.0]
    assert [est.remaining_whole(0, 7.0), est.remaining_whole(1, 7.0)] == [1, 13]


def test_views_read_declared_lengths(tmp_path: Path) -> None:
    # bias +1 (every declaration twice the truth), no noise: the job ends at its true
    # 1,000 iterations, and a view taken then still shows declared 2,000 - done 1,000 =
    # 1,000 iterations x 1 s left (the truth: 0).
    raw = scenario(trace(tmp_path, TWO_JOBS[:1]))
    raw["workload"]["estimates"] = {"duration_bias": 1.0, "duration_noise_sigma": 0.0}
    wl = run_log(raw)
    view = wl.passer.ordering_view(np.array([0]), np.array([False]))
    assert view.remaining_solo_s[0] == pytest.approx(1000.0)
    assert wl.finish.tolist() == [1000.0]
