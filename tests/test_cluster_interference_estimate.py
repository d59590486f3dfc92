"""The interference estimator the cluster policies see: its configured moments, one
factor per (group, type) however often asked, and, with no error and the truth model
equal to the policy's, decisions identical to the oracle's (the truth handed over)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import hetsim
from hetsim.workloads.cluster.interference_estimate import InterferenceError
from hetsim.workloads.cluster.params import Estimates

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("bias", "sigma"), [(0.25, 0.5), (-0.2, 0.1)])
def test_interference_error_has_the_configured_moments(bias: float, sigma: float) -> None:
    spec = Estimates(interference_bias=bias, interference_noise_sigma=sigma)
    err = InterferenceError(spec, seed=11)
    keys = [(t, (a, b)) for t in range(2) for a in range(77) for b in range(a, 77)]
    g = np.array([err.factor(t, p) for t, p in keys])  # 6,006 groups
    n = len(g)
    # E[g] = 1 + bias (within 4 standard errors); ln g ~ N(ln(1 + bias) - s^2 / 2, s^2)
    se = (1 + bias) * np.sqrt(np.exp(sigma**2) - 1) / np.sqrt(n)
    assert abs(g.mean() - (1 + bias)) < 4 * se
    assert np.log(g).std() == pytest.approx(sigma, rel=0.04)  # se of the sd: 0.9%
    assert np.log(g).mean() == pytest.approx(
        np.log(1 + bias) - sigma**2 / 2, abs=4 * sigma / n**0.5
    )
    # the same group on the same type: the same factor, whatever was asked in between
    again = InterferenceError(spec, seed=11)
    assert [again.factor(t, p) for t, p in reversed(keys[:50])] == g[:50][::-1].tolist()
    assert err.factor(0, (5,)) == 1.0  # a lone job: its profiled time


def test_exact_estimator_is_the_model() -> None:
    err = InterferenceError(Estimates(interference_noise_sigma=0.0), seed=1)
    assert err.exact and not err.oracle and err.factor(2, (1, 4)) == 1.0


def cuckoo_run(truth: str, **estimates: Any) -> pd.DataFrame:
    over = {
        "workload.jobs.num_jobs": 60, "workload.jobs.arrival_rate_per_s": 0.01,
        "workload.execution.interference_model": truth,
        **{f"workload.estimates.{k}": v for k, v in estimates.items()},
    }  # fmt: skip
    res = hetsim.run(ROOT / "scenarios" / "cuckoo-robustness.yaml", overrides=over)
    return res.tables["jobs"]


def test_no_error_and_truth_equal_to_the_estimate_decides_as_the_oracle() -> None:
    # Cuckoo plans with the stage model; with the stage model as the truth and no
    # estimator error, every estimate it sees equals the truth: the jobs table (starts,
    # GPU types, groups, finishes) is the oracle's.
    oracle = cuckoo_run("stage", interference_oracle=True)
    assert (oracle["group_size"] > 1).any()  # it packs: the estimates matter
    exact = cuckoo_run("stage", interference_noise_sigma=0.0)
    pd.testing.assert_frame_equal(exact, oracle)
    # control: noise on the estimate changes decisions (the comparison can fail)
    noisy = cuckoo_run("stage", interference_noise_sigma=0.5)
    assert not noisy.equals(oracle)


@pytest.mark.slow
def test_muri_with_no_error_and_its_own_truth_decides_as_the_oracle() -> None:
    # Muri plans with its measured per-size factors; under that truth and no error its
    # estimates are the truth (the oracle's decisions); noise changes them.
    def muri(**estimates: Any) -> pd.DataFrame:
        over = {"workload.jobs.max_jobs": 40, "workload.execution.interference_model": "group",
                "workload.inventory": [{"gpu_type": "v100", "nodes": 2, "gpus_per_node": 8}],
                **{f"workload.estimates.{k}": v for k, v in estimates.items()}}  # fmt: skip
        return hetsim.run(ROOT / "scenarios" / "muri-robustness.yaml", overrides=over).tables[
            "jobs"]  # fmt: skip

    oracle = muri(interference_oracle=True)
    assert (oracle["group_size"] > 1).any()
    pd.testing.assert_frame_equal(muri(interference_noise_sigma=0.0), oracle)
    assert not muri(interference_noise_sigma=0.5).equals(oracle)
