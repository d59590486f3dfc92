"""End to end: the shipped scenarios from the CLI, determinism, outputs, traces, sweeps."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import hetsim
from hetsim.simulator.cli import main
from tests.conftest import ROOT, SCENARIOS

SMALL = {"workload.num_requests": 300, "workload.warmup_requests": 0}


def digest_dir(path: Path) -> dict[str, str]:
    """sha256 of every file under ``path`` (relative name -> hex digest)."""
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def run_in_subprocess(out: Path, seed: int) -> None:
    cmd = [sys.executable, "-m", "hetsim", "run", str(SCENARIOS / "quickstart.yaml"),
           "--seed", str(seed), "--set", "workload.num_requests=200", "--out", str(out), "-q"]  # fmt: skip
    subprocess.run(cmd, check=True, cwd=ROOT)


def test_same_seed_same_bytes_in_two_processes(tmp_path: Path) -> None:
    run_in_subprocess(tmp_path / "a", 3)
    run_in_subprocess(tmp_path / "b", 3)
    run_in_subprocess(tmp_path / "c", 4)
    a, b, c = (digest_dir(tmp_path / x) for x in "abc")
    assert a == b
    assert a["tables/requests.csv"] != c["tables/requests.csv"]
    assert set(a) == {"summary.csv", "scenario.yaml", "metrics.json", ".hetsim.json",
                      "tables/requests.csv", "tables/copies.csv", "tables/energy.csv",
                      "tables/power.csv"}  # fmt: skip


def test_quickstart_from_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.json"
    code = main(["run", str(SCENARIOS / "quickstart.yaml"), "--out", str(tmp_path / "r"),
                 "--trace", str(trace)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "quickstart (seed 7)" in out and "mean_sojourn_s" in out
    summary = pd.read_csv(tmp_path / "r" / "summary.csv")
    assert summary.loc[0, "requests"] == 2000
    doc = json.loads(trace.read_text())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    # one track per device, per link direction and per memory pool
    assert {"box/a100 (device)", "box/l4 (device)"} <= names
    assert "box/cpu (device)" not in names  # the CPU runs nothing here: no track
    assert any("(link)" in n for n in names) and any("(memory)" in n for n in names)
    assert all(e["ph"] in {"M", "X", "C"} for e in doc["traceEvents"])


def test_quickstart_weights_load_then_serve() -> None:
    """Both GPUs copy 13.48 GB of fp16 weights over their own PCIe Gen4 link first:
    set-up time = link latency + bytes / (bandwidth x efficiency) from the catalogue."""
    from hetsim.devices.catalogue import link_spec
    from hetsim.workloads.models.dense import model_spec

    result = hetsim.run(SCENARIOS / "quickstart.yaml", overrides=SMALL)
    nbytes = model_spec("llama-2-7b").weight_bytes("fp16")
    assert nbytes == int(6.74e9 * 2)
    expected = link_spec("pcie4-x16").transfer_time_s(nbytes)
    assert result["setup_s"] == pytest.approx(expected, rel=1e-12)
    requests = result.tables["requests"]
    assert (requests["start_s"] >= expected).all()
    # least-loaded sends most work to the faster A100
    share = requests["server"].value_counts(normalize=True)
    assert share["box/a100"] > share["box/l4"]


def test_mmc_from_cli(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", str(SCENARIOS / "mmc.yaml"), "--set", "workload.num_requests=2000",
                 "--set", "workload.warmup_requests=100"])  # fmt: skip
    assert code == 0
    assert "requests" in capsys.readouterr().out


def test_parquet_and_overwrite_atomic(tmp_path: Path) -> None:
    result = hetsim.run(SCENARIOS / "mmc.yaml", overrides=SMALL)
    out = tmp_path / "res"
    result.to_dir(out, "parquet")
    assert pd.read_parquet(out / "tables" / "requests.parquet").shape[0] == 300

    # a failing write leaves the previous results untouched and no temporary dir behind
    class Boom(Exception):
        pass

    def boom(*_: object, **__: object) -> None:
        raise Boom

    import hetsim.simulator.result as result_module

    original = result_module.csv_text  # the CSV writer (simulator/csv_out.py)
    result_module.csv_text = boom  # type: ignore[assignment]
    try:
        with pytest.raises(Boom):
            result.to_dir(out, "csv")
    finally:
        result_module.csv_text = original
    assert (out / "tables" / "requests.parquet").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res"]


def test_python_api_overrides_and_dunder_keywords() -> None:
    a = hetsim.run(SCENARIOS / "mmc.yaml", overrides=SMALL)
    b = hetsim.run(SCENARIOS / "mmc.yaml", workload__num_requests=300,
                      workload__warmup_requests=0)  # fmt: skip
    assert a.summary_row == b.summary_row
    assert a.scenario["workload"]["num_requests"] == 300


def test_sweep_rows_identical_serial_and_parallel() -> None:
    sc = hetsim.load_scenario(SCENARIOS / "mmc.yaml", SMALL)
    serial = hetsim.sweep(sc, workers=1).drop(columns="wall_s")
    parallel = hetsim.sweep(sc, workers=2).drop(columns="wall_s")
    pd.testing.assert_frame_equal(serial, parallel)
    assert serial["workload.arrivals.rate_per_s"].tolist() == [2.0, 2.8, 3.6]
    # waiting grows with load
    assert serial["mean_wait_s"].is_monotonic_increasing


def test_sweep_cli_writes_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sweep", str(SCENARIOS / "quickstart.yaml"), "--set",
                 "workload.num_requests=200", "--out", str(tmp_path / "s"), "-q"])  # fmt: skip
    assert code == 0
    table = pd.read_csv(tmp_path / "s" / "sweep.csv")
    assert table["policies.dispatch"].tolist() == ["least-loaded", "round-robin", "fifo"]


def test_list_prints_every_registry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for expected in ("devices:", "h100-sxm", "links:", "pcie4-x16", "models:", "llama-2-7b",
                     "workloads:", "queueing", "policies:", "queueing.dispatch/least-loaded",
                     "metrics:", "queueing/mean_wait_s"):  # fmt: skip
        assert expected in out
    assert main(["list", "policies"]) == 0
    assert "\n    count_service: bool = true\n" in capsys.readouterr().out


def test_out_of_memory_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-2-70B's fp16 weights (138 GB) do not fit an L4 (24 GiB)."""
    code = main(["run", str(SCENARIOS / "quickstart.yaml"), "--set",
                 "workload.demand.model=llama-2-70b", "--out", str(tmp_path / "o")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert len(err.splitlines()) == 1 and "out of memory" in err.lower()
    assert not (tmp_path / "o").exists()


def test_progress_bar_does_not_change_results(capsys: pytest.CaptureFixture[str]) -> None:
    """The progress ticker is a separate SimPy process: same numbers with or without it."""
    from hetsim.simulator.runner import simulate

    sc = hetsim.load_scenario(SCENARIOS / "quickstart.yaml", SMALL)
    quiet = simulate(sc, progress=False)
    shown = simulate(sc, progress=True)
    assert quiet.summary_row == shown.summary_row
    pd.testing.assert_frame_equal(quiet.tables["requests"], shown.tables["requests"])
    assert "sim-s" in capsys.readouterr().err
