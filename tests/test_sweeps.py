"""Sweeps at scale: designs, run keys, shards, failures, executors, kill and resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import hetsim
from hetsim.plotting import sweep_summary
from hetsim.simulator.errors import ScenarioError
from hetsim.simulator.scenario import from_dict
from hetsim.simulator.sweep_design import Range, SweepSpec, parse_sweep, points
from hetsim.simulator.sweeps import plan, run_key
from tests.conftest import ROOT, SCENARIOS

VOLATILE = ["wall_s"]  # the only column allowed to differ between executions


def tiny(sweep: dict | None = None, n: int = 60) -> dict:
    raw = yaml.safe_load((SCENARIOS / "mmc.yaml").read_text())
    raw["workload"]["num_requests"] = n
    raw["workload"]["warmup_requests"] = 0
    raw["sweep"] = sweep or {}
    return raw


# ---- designs -------------------------------------------------------------------------
def test_grid_zip_and_seeds() -> None:
    grid = parse_sweep({"a.x": [1, 2], "b.y": ["p", "q", "r"]})
    assert points(grid, 0) == [
        {"a.x": 1, "b.y": "p"}, {"a.x": 1, "b.y": "q"}, {"a.x": 1, "b.y": "r"},
        {"a.x": 2, "b.y": "p"}, {"a.x": 2, "b.y": "q"}, {"a.x": 2, "b.y": "r"},
    ]  # fmt: skip
    zipped = parse_sweep(
        {"design": "zip", "parameters": {"a": [1, 2], "b": [3, 4]}, "seeds": [7, 8]}
    )
    assert points(zipped, 0) == [
        {"a": 1, "b": 3, "seed": 7}, {"a": 1, "b": 3, "seed": 8},
        {"a": 2, "b": 4, "seed": 7}, {"a": 2, "b": 4, "seed": 8},
    ]  # fmt: skip
    reps = parse_sweep({"parameters": {"a": [1]}, "replications": 3})
    assert [p["seed"] for p in points(reps, 10)] == [10, 11, 12]


def test_lhs_is_stratified_in_every_dimension() -> None:
    spec = SweepSpec(
        design="lhs",
        samples=10,
        parameters={"x": Range(low=0.0, high=10.0), "k": [1, 2, 3, 4, 5]},
    )
    pts = points(spec, 0)
    # one sample in each tenth of [0, 10), and each of 5 values exactly twice
    assert sorted(int(p["x"]) for p in pts) == list(range(10))
    assert sorted(p["k"] for p in pts) == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert pts == points(spec, 0)  # the design's own seed makes it repeatable


def test_random_log_integer_ranges() -> None:
    spec = SweepSpec(
        design="random",
        samples=2000,
        parameters={"n": Range(low=1, high=1000, log=True, integer=True)},
    )
    values = np.array([p["n"] for p in points(spec, 0)])
    assert values.min() >= 1 and values.max() <= 1000
    assert all(isinstance(v, int) for v in values.tolist())
    # log-uniform: the median is near sqrt(1 * 1000) = 31.6
    assert 25 <= np.median(values) <= 40


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        (
            {"design": "grid", "parameters": {"seed": {"low": 1, "high": 2}}},
            "a range needs design random or lhs",
        ),
        ({"design": "lhs", "parameters": {"seed": [1]}}, "design lhs needs samples"),
        (
            {"design": "zip", "parameters": {"a.b": [1], "c.d": [1, 2]}},
            "design zip needs lists of one length",
        ),
        (
            {"design": "random", "samples": 3, "parameters": {"x.y": {"low": 2, "high": 1}}},
            "high must be >= low",
        ),
    ],
)
def test_bad_designs_are_scenario_errors(sweep: dict, message: str) -> None:
    with pytest.raises(hetsim.ScenarioError, match=message):
        from_dict(tiny(sweep))


def test_unknown_sweep_path_is_an_error() -> None:
    with pytest.raises(hetsim.ScenarioError, match=r"sweep\.nothing\.here: must be a dotted path"):
        from_dict(tiny({"nothing.here": [1]}))


# ---- keys and rows -----------------------------------------------------------------------
def test_run_key_is_stable_and_points_never_run_twice() -> None:
    sc = from_dict(tiny({"seed": [1, 2, 1], "workload.arrivals.rate_per_s": [3.6]}))
    tasks = plan(sc)
    assert [t.point for t in tasks] == [0, 1]  # the repeated seed is the same run
    again = from_dict(tiny({"seed": [1, 2, 1], "workload.arrivals.rate_per_s": [3.6]}))
    assert [t.key for t in plan(again)] == [t.key for t in tasks]
    assert run_key(sc.with_overrides({"seed": 1})) == tasks[0].key


def test_rows_carry_inputs_metrics_and_provenance() -> None:
    table = hetsim.sweep(from_dict(tiny({"workload.arrivals.rate_per_s": [1.0, 2.0]})))
    assert list(table["workload.arrivals.rate_per_s"]) == [1.0, 2.0]
    for col in ("mean_wait_s", "run_key", "seed", "hetsim_version", "wall_s", "error", "traceback"):
        assert col in table
    assert table["error"].isna().all()
    assert table["hetsim_version"].eq(hetsim.__version__).all()


def test_failed_run_is_a_row_and_the_rest_complete(tmp_path: Path) -> None:
    raw = yaml.safe_load((SCENARIOS / "quickstart.yaml").read_text())
    raw["workload"]["num_requests"] = 50
    # Llama-2-70B's fp16 weights do not fit the L4: that run fails with OutOfMemory
    raw["sweep"] = {"workload.demand.model": ["llama-2-7b", "llama-2-70b", "llama-3-8b"]}
    table = hetsim.sweep(from_dict(raw), out=tmp_path / "s")
    assert table["error"].notna().tolist() == [False, True, False]
    assert table.loc[1, "error"].startswith("OutOfMemory")
    tb = table.loc[1, "traceback"]
    assert "Traceback" in tb
    # rows do not depend on where hetsim or Python is installed
    assert "<hetsim>" in tb
    assert str(Path(hetsim.__file__).resolve().parents[1]) not in tb
    assert sys.prefix not in tb
    assert table.loc[2, "requests"] == 50


def test_existing_sweep_needs_resume(tmp_path: Path) -> None:
    sc = from_dict(tiny({"seed": [1, 2]}))
    hetsim.sweep(sc, out=tmp_path)
    with pytest.raises(ScenarioError, match="already holds a sweep; resume it"):
        hetsim.sweep(sc, out=tmp_path)
    again = hetsim.sweep(sc, out=tmp_path, resume=True)  # nothing left to run
    assert len(again) == 2


# ---- executors ------------------------------------------------------------------------
@pytest.mark.slow
def test_serial_local_pool_and_dask_give_identical_rows() -> None:
    sc = from_dict(tiny({"seed": [1, 2, 3], "workload.arrivals.rate_per_s": [2.0, 3.0]}))
    serial = hetsim.sweep(sc).drop(columns=VOLATILE)
    pool = hetsim.sweep(sc, workers=2).drop(columns=VOLATILE)
    dask = hetsim.sweep(sc, workers=2, executor="dask").drop(columns=VOLATILE)
    pd.testing.assert_frame_equal(serial, pool)
    pd.testing.assert_frame_equal(serial, dask)
    assert len(serial) == 6


# ---- kill -9 and resume -----------------------------------------------------------------
@pytest.mark.slow
def test_kill_then_resume_equals_uninterrupted(tmp_path: Path) -> None:
    raw = tiny({"seed": list(range(30))}, n=3000)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(raw))
    cmd = [sys.executable, "-m", "hetsim", "sweep", str(path), "-q"]
    killed = tmp_path / "killed"
    proc = subprocess.Popen([*cmd, "--out", str(killed)], cwd=ROOT, start_new_session=True)
    shards = killed / "shards"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if shards.exists() and len(list(shards.glob("*.parquet"))) >= 5:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = len(list(shards.glob("*.parquet")))
    assert 5 <= partial < 30, partial
    subprocess.run([*cmd, "--resume", str(killed)], cwd=ROOT, check=True)
    subprocess.run([*cmd, "--out", str(tmp_path / "clean")], cwd=ROOT, check=True)
    resumed = pd.read_csv(killed / "sweep.csv").drop(columns=VOLATILE)
    clean = pd.read_csv(tmp_path / "clean" / "sweep.csv").drop(columns=VOLATILE)
    assert resumed["point"].is_unique and len(resumed) == 30
    pd.testing.assert_frame_equal(resumed, clean)


def test_exit_code_counts_failed_runs(tmp_path: Path) -> None:
    raw = yaml.safe_load((SCENARIOS / "quickstart.yaml").read_text())
    raw["workload"]["num_requests"] = 20
    raw["sweep"] = {"workload.demand.model": ["llama-2-70b", "llama-3-70b", "llama-2-7b"]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    done = subprocess.run([sys.executable, "-m", "hetsim", "sweep", str(path), "-q"],
                          cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().endswith("2 of 3 runs failed (see the error column)")


# ---- plotting helper ----------------------------------------------------------------------
def test_sweep_summary_confidence_interval() -> None:
    table = pd.DataFrame(
        {
            "policy": ["a"] * 3 + ["b"],
            "load": [1, 1, 1, 1],
            "y": [1.0, 2.0, 3.0, 5.0],
            "error": [None] * 4,
        }
    )
    out = sweep_summary(table, "load", "y", hue="policy")
    a = out[out["policy"] == "a"].iloc[0]
    # mean 2, sample std 1, n 3: half-width t_{0.975, 2} / sqrt(3) = 4.302653 / 1.732051
    assert a["mean"] == 2.0
    assert a["ci_high"] - a["mean"] == pytest.approx(4.302653 / 3**0.5, rel=1e-6)
    b = out[out["policy"] == "b"].iloc[0]
    assert (b["ci_low"], b["ci_high"]) == (5.0, 5.0)


def test_swept_path_may_not_shadow_an_output_column() -> None:
    import dataclasses

    sc = from_dict(tiny())
    # as if a scenario path were called like one of the workload's metrics
    sc_bad = dataclasses.replace(sc, sweep={"mean_wait_s": [1]})
    with pytest.raises(hetsim.ScenarioError, match="share its name with an output column"):
        plan(sc_bad)


def test_an_axis_mixing_null_numbers_and_text_reads_back(tmp_path: Path) -> None:
    """A sweep axis such as ``[null, 0.35, 0.6]`` or ``[4, auto]`` gives shards of different
    Arrow types; the table still reads back, one value per point."""
    from hetsim.simulator.sweeps import _cell, read_shards, write_shard

    values = [None, 0.35, 0.6]
    for i, v in enumerate(values):
        write_shard(tmp_path, f"k{i}", {"point": i, "x": _cell(v)})
    table = read_shards(tmp_path, ["k0", "k1", "k2"])
    assert table["x"].isna().tolist() == [True, False, False]
    assert table["x"].tolist()[1:] == [0.35, 0.6]
    write_shard(tmp_path, "k3", {"point": 3, "x": _cell("auto")})
    table = read_shards(tmp_path, ["k1", "k3"])
    assert table["x"].tolist() == [0.35, "auto"]
