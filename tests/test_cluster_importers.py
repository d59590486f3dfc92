"""Philly and Helios job sources (workloads/cluster/sources.py): rows counted, drawn
distributions against the figures the data's SOURCE.md and summary row state, and bad
rows named by file, line and column (or skipped and counted)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import hetsim
from hetsim.simulator.cli import main
from hetsim.simulator.scenario import from_dict
from hetsim.workloads.cluster.data import read_helios_summary, read_runtimes, read_stage_profiles
from hetsim.workloads.cluster.params import DATA_DIR, HeliosJobs, PhillyJobs
from hetsim.workloads.cluster.sources import helios_gpu_mix, helios_jobs, philly_jobs
from tests.conftest import SHARED

PROFILES = read_stage_profiles(DATA_DIR / "muri_stage_profiles.csv")


def test_philly_sample_rows_counted() -> None:
    # Count independently with the csv module: rows >= 1 s are kept, 0-s rows dropped
    # without counting as bad.
    path = DATA_DIR / "philly_runtime_sample.csv"
    with open(path) as f:
        values = [float(r["runtime"]) for r in csv.DictReader(f)]
    assert len(values) == 416  # every 200th of 83,154 rows: ceil(83154 / 200)
    runtimes, bad = read_runtimes(path, False, 1.0)
    assert bad == 0 and len(runtimes) == sum(v >= 1 for v in values)


@pytest.mark.skipif(not (SHARED / "data/philly").exists(), reason="../shared not present")
def test_philly_full_file_rows_counted() -> None:
    # ../shared/data/philly/SOURCE.md: 83,154 rows; the first two are 0.0 (never ran).
    runtimes, bad = read_runtimes(SHARED / "data/philly/philly_runtime.csv", False, 1.0)
    assert bad == 0 and len(runtimes) == 83_154 - 2


def drawn_durations(raw: Any) -> np.ndarray:
    return np.asarray(raw.iterations * raw.stages_s.sum(axis=1))


def test_philly_durations_follow_the_runtime_file() -> None:
    # SOURCE.md (full file): p50 1,186 s, p90 12,860 s. Draws from the 1/200 quantile
    # sample (iterations x iteration time, within one iteration of the run time) must put
    # those two values at the same CDF levels: 0.5 and 0.9 within 0.03 and 0.02 (binomial
    # standard errors at n = 4000: 0.008 and 0.005; plus the sample's 1/416 granularity).
    spec = PhillyJobs(num_jobs=4000, arrival_rate_per_s=0.5)
    raw = philly_jobs(spec, Path("."), PROFILES, np.random.default_rng(3))
    d = drawn_durations(raw)
    assert np.mean(d <= 1186) == pytest.approx(0.5, abs=0.03)
    assert np.mean(d <= 12_860) == pytest.approx(0.9, abs=0.02)
    # Poisson arrivals at 0.5/s: mean gap 2 s (standard error 2/sqrt(4000) = 0.03 s).
    assert np.diff(raw.submit_s).mean() == pytest.approx(2.0, abs=0.1)
    # GPU counts by Muri trace1's Philly weights: 1 GPU w.p. 536/1494 = 0.359.
    assert np.mean(raw.gpus == 1) == pytest.approx(536 / 1494, abs=0.025)


def test_helios_mix_matches_mean_and_median() -> None:
    # Earth: mean 2.101, median 1 GPU. B = 8: p = (2.101 - 1) / 7 = 0.1573 <= 1/2.
    # Venus: mean 6.736: B = 8 gives p = 0.819 > 1/2, B = 16 gives 5.736 / 15 = 0.3824.
    earth, _ = read_helios_summary(DATA_DIR / "helios_cluster_summary.csv", "Earth", False)
    counts, probs = helios_gpu_mix(earth)
    assert list(counts) == [1, 8] and probs[1] == pytest.approx(1.101 / 7)
    venus, _ = read_helios_summary(DATA_DIR / "helios_cluster_summary.csv", "Venus", False)
    counts, probs = helios_gpu_mix(venus)
    assert list(counts) == [1, 16] and probs[1] == pytest.approx(5.736 / 15)


def test_helios_draws_match_the_earth_summary() -> None:
    # Earth row: 427,148 GPU jobs over 183 days -> 0.027015 jobs/s; median GPU run time
    # 234 s; mean GPUs 2.101. 4,000 draws: rate within 5%, median within 10%, mean GPUs
    # within 0.2 (standard error sqrt(0.157 x 0.843) x 7 / sqrt(4000) = 0.04).
    spec = HeliosJobs(num_jobs=4000)
    raw = helios_jobs(spec, Path("."), PROFILES, np.random.default_rng(5))
    rate = 427_148 / (183 * 86400)
    assert 1 / np.diff(raw.submit_s).mean() == pytest.approx(rate, rel=0.05)
    assert np.median(drawn_durations(raw)) == pytest.approx(234, rel=0.10)
    assert raw.gpus.mean() == pytest.approx(2.101, abs=0.2)


def scenario(jobs: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "t", "seed": 1,
        "cluster": {"nodes": [{"name": "n", "devices": {"gpu": {"type": "v100"}}}]},
        "workload": {
            "kind": "cluster",
            "inventory": [{"gpu_type": "v100", "nodes": 8, "gpus_per_node": 8}],
            "jobs": jobs,
            "execution": {"round_s": None},
        },
        "outputs": {"spans": False},
    }  # fmt: skip


def test_philly_and_helios_sources_run_end_to_end() -> None:
    for jobs in ({"kind": "philly", "num_jobs": 30}, {"kind": "helios", "num_jobs": 30}):
        summary = hetsim.run(from_dict(scenario(jobs))).summary.iloc[0]
        assert summary["completed"] == 30 and summary["skipped_rows"] == 0


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        ("philly", "runtime\n12\n-5\n", "runtime.csv:3: column runtime: must be >= 0"),
        ("philly", "runtime\n12\nlong\n", "runtime.csv:3: column runtime: not a number"),
        ("helios", None, "summary.csv:3: column avg_run_time_gpu: needs mean >= median"),
    ],
)
def test_bad_rows_name_file_line_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, text: str | None,
    message: str,
) -> None:  # fmt: skip
    if kind == "philly":
        path = tmp_path / "runtime.csv"
        path.write_text(text or "")
        jobs = {"kind": "philly", "runtime_path": str(path), "num_jobs": 5}
    else:  # Earth's row (line 3) with a mean run time below its median
        lines = (DATA_DIR / "helios_cluster_summary.csv").read_text().splitlines()
        cells = lines[2].split(",")
        cells[6] = "100.0"  # avg_run_time_gpu < med_run_time_gpu (234)
        lines[2] = ",".join(cells)
        path = tmp_path / "summary.csv"
        path.write_text("\n".join(lines) + "\n")
        jobs = {"kind": "helios", "summary_path": str(path), "num_jobs": 5}
    yaml_path = tmp_path / "s.yaml"
    yaml_path.write_text(yaml.safe_dump(scenario(jobs)))
    assert main(["run", str(yaml_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(str(tmp_path)) and message in err and len(err.splitlines()) == 1


def test_bad_rows_skipped_and_counted_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "runtime.csv"
    path.write_text("runtime\n12\n-5\n0\n40\n")  # one bad row, one 0-s row (dropped)
    jobs = {"kind": "philly", "runtime_path": str(path), "num_jobs": 5, "skip_bad_rows": True}
    with pytest.warns(UserWarning, match="skipped 1 bad rows"):
        summary = hetsim.run(from_dict(scenario(jobs))).summary.iloc[0]
    assert summary["skipped_rows"] == 1 and summary["completed"] == 5
