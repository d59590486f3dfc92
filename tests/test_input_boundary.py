"""The input boundary: every hostile input is one line naming the file and field, exit 2.

Each case here raised a traceback (UnicodeDecodeError, RecursionError, ValueError,
OverflowError, csv.Error, UnknownName), silently kept a duplicate key, or ran until
killed, before the boundary existed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hetsim.simulator.cli import main
from hetsim.simulator.errors import TraceError
from hetsim.workloads.serving.traces import TraceConfig, read_trace
from tests.cli_helpers import TINY, cli_error


def validate_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes) -> str:
    """``hetsim validate`` on ``data``: exit 2, one line; the message after ``FILE: ``."""
    path = tmp_path / "s.yaml"
    path.write_bytes(data)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"{path}: "), err
    return err.removeprefix(f"{path}: ")


# ---- scenario text --------------------------------------------------------------------
def test_non_utf8_names_line_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = TINY.replace("name: tiny", "name: caf\xe9").encode("latin-1")
    assert validate_error(tmp_path, capsys, data) == "line 1, column 10: not UTF-8 text (byte 0xe9)"


def test_deep_nesting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for depth in (100, 100_000):
        data = (TINY + "description: " + "[" * depth + "]" * depth + "\n").encode()
        msg = validate_error(tmp_path, capsys, data)
        assert msg.endswith("nested more than 64 levels deep"), msg


def test_5000_digit_integer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = TINY.replace("seed: 1", "seed: " + "7" * 5000).encode()
    assert validate_error(tmp_path, capsys, data) == (
        "line 2, column 7: an integer of 5000 digits is out of range"
    )


def test_duplicate_key_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = TINY.replace("  num_requests: 30", "  num_requests: 30\n  num_requests: 40").encode()
    assert (
        validate_error(tmp_path, capsys, data) == "line 13, column 3: duplicate key 'num_requests'"
    )


def test_alias_bomb_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 8)]
    data = ("\n".join(lines) + "\n" + TINY).encode()
    assert validate_error(tmp_path, capsys, data).startswith("more than 1000000 values")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("rate_per_s: 1.0", "rate_per_s: .inf", "workload.arrivals.rate_per_s: must be a finite number, got inf"),
        ("rate_per_s: 1.0", "rate_per_s: .nan", "workload.arrivals.rate_per_s: must be a finite number, got nan"),
        ("mean_flops: 1.0e12", "mean_flops: 1.0e999", "workload.demand.mean_flops: must be a finite number, got '1.0e999'"),
        ("count: 2", "count: 18446744073709551616", "cluster.nodes[0].devices.server.count: integer out of range (more than 64 bits)"),
        ("count: 2", "count: 100000000", "cluster.nodes[0].devices.server.count: Input should be less than or equal to 10000000"),
        ("num_requests: 30", "num_requests: 10000000000", "workload.num_requests: Input should be less than or equal to 1000000000"),
    ],
)  # fmt: skip
def test_non_finite_overflowing_and_impossible_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, message: str
) -> None:
    assert old in TINY
    assert validate_error(tmp_path, capsys, TINY.replace(old, new).encode()) == message


def test_set_override_passes_the_same_boundary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(TINY)
    assert main(["run", str(path), "--set", "workload.arrivals.rate_per_s=1e999"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"{path}: workload.arrivals.rate_per_s: must be a finite number, got '1e999'"
    assert main(["run", str(path), "--set", "seed={a: 1, a: 2}"]) == 2
    assert capsys.readouterr().err.strip() == "--set seed: line 1, column 8: duplicate key 'a'"


def test_topology_without_a_route_is_refused_at_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = TINY.replace(
        "        server: {type: ideal-server, count: 2}\n",
        "        server: {type: ideal-server, count: 3}\n      links:\n"
        "        - {type: pcie4-x16, between: [server0, server1]}\n",
    )
    assert validate_error(tmp_path, capsys, text.encode()) == (
        "cluster: no route between 'farm/server0' and 'farm/server2': the links leave 2 "
        "separate groups of devices; add the missing link"
    )


def test_unknown_model_in_a_validator_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = """\
name: s
cluster:
  nodes:
    - name: box
      devices:
        gpu: {type: l4}
workload:
  kind: serving
  model: no-such-model
  tp_options: [1]
"""
    msg = validate_error(tmp_path, capsys, text.encode())
    assert msg.startswith("workload: unknown model 'no-such-model'; valid: ")


# ---- trace files ----------------------------------------------------------------------
MOONCAKE_OK = '{"timestamp": 0, "input_length": 10, "output_length": 5}'


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"timestamp": 0, "input_length": 1e999, "output_length": 5}', "not valid JSON: 1e999 is out of range"),
        ('{"timestamp": 0, "input_length": 18446744073709551616, "output_length": 5}', "column input_length: 18446744073709551616 is not a count >= 0"),
        ('{"timestamp": NaN, "input_length": 1, "output_length": 5}', "not valid JSON: NaN is not a number here"),
        ("[" * 100_000 + "]" * 100_000, "nested more than 64 levels deep"),
        ('{"timestamp": 0, "input_length": ' + "9" * 5000 + ', "output_length": 5}', "not valid JSON: an integer of 5000 digits is out of range"),
    ],
)  # fmt: skip
def test_mooncake_hostile_rows(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(MOONCAKE_OK + "\n" + line + "\n")
    with pytest.raises(TraceError) as err:
        read_trace(TraceConfig(format="mooncake", path="t.jsonl"), tmp_path)
    assert str(err.value).startswith(f"{path}:2: column "), str(err.value)
    assert message in str(err.value)


def test_azure_counts_of_inf_or_1e30_are_refused(tmp_path: Path) -> None:
    """They ran as 1 token before (int64 conversion of inf / 1e30)."""
    for bad in ("inf", "1e30", "18446744073709551616"):
        (tmp_path / "t.csv").write_text(
            f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,{bad},44\n"
        )
        with pytest.raises(TraceError) as err:
            read_trace(TraceConfig(format="azure", path="t.csv"), tmp_path)
        assert str(err.value).startswith(f"{tmp_path / 't.csv'}:2: column ContextTokens: "), bad


def test_huge_csv_field_is_a_trace_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.conftest import SCENARIOS

    muri = (SCENARIOS / "muri.yaml").read_text()
    src = Path(__file__).resolve().parent.parent / "workloads/data/cluster/muri_trace1_head400.csv"
    lines = src.read_text().splitlines()
    lines[3] = "9" * 200_000
    trace = tmp_path / "t.csv"
    trace.write_text("\n".join(lines) + "\n")
    text = muri.replace("pkg:cluster/muri_trace1_head400.csv", str(trace))
    text = text[: text.index("sweep:")] if "sweep:" in text else text
    msg = cli_error(tmp_path, capsys, text)
    assert "field larger than field limit" in msg and len(msg.splitlines()) == 1


# ---- runaways -------------------------------------------------------------------------
CLUSTER = """\
name: c
seed: 1
cluster:
  nodes:
    - name: placeholder
      devices:
        gpu: {type: v100}
workload:
  kind: cluster
  inventory:
    - {gpu_type: v100, nodes: 1, gpus_per_node: 8}
  jobs:
    kind: synthetic
    num_jobs: 5
    gpu_counts: [[1, 1.0]]
  execution: {round_s: 3600, preemption: true, restart_s: 10}
policies:
  ordering: srtf
  packing: muri
  allocation: first-fit
"""


def test_job_that_fits_no_gpu_type_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It looped until killed with preemptive rounds before."""
    text = CLUSTER.replace("gpu_counts: [[1, 1.0]]", "gpu_counts: [[16, 1.0], [1, 1.0]]")
    msg = cli_error(tmp_path, capsys, text)
    assert msg.startswith("workload: job 0 (") and "16 GPUs) fits no GPU type" in msg


def test_clock_that_cannot_advance_stops_with_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Events past 10^12 s (where t + 3600 == t eventually) stalled or ran forever."""
    text = CLUSTER.replace("num_jobs: 5", "num_jobs: 5\n    arrival_rate_per_s: 1.0e-30")
    msg = cli_error(tmp_path, capsys, text)
    assert msg.startswith("run stopped: an event at t=") and "latest simulated time" in msg


def test_a_duration_past_its_maximum_is_a_field_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """restart_s 1e308 stalled the clock before; the schema bounds every duration at
    simulator.limits.MAX_DURATION_S (10^9 s) now."""
    msg = cli_error(tmp_path, capsys, CLUSTER.replace("restart_s: 10", "restart_s: 1.0e+308"))
    assert msg == (
        "workload.execution.restart_s: Input should be less than or equal to 1000000000"
    ), msg


def test_validate_builds_within_a_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Building past validate's CPU or memory budget is refused in one line instead of
    running for minutes (a million devices, 10^8 requests pass the schema's maxima)."""
    import time

    import numpy as np

    import hetsim.simulator.runner as runner

    def spin(*_: object) -> None:
        # a build that never ends: it spins until the 0.3 s CPU budget stops it, however
        # loaded the machine (the wall-clock guard only keeps a broken budget from hanging)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 600.0:
            pass
        raise AssertionError("the CPU-time budget never fired")

    path = tmp_path / "s.yaml"
    path.write_text(TINY)
    monkeypatch.setattr(runner, "build", spin)
    assert main(["validate", str(path), "--max-cpu-s", "0.3"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"{path}: building it needs more than its 0.3 s CPU-time budget; raise it with "
        "--max-memory-gib or --max-cpu-s"
    )

    def hog(*_: object) -> None:
        np.ones(1 << 31)  # 16 GiB

    monkeypatch.setattr(runner, "build", hog)
    assert main(["validate", str(path), "--max-memory-gib", "0.25"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{path}: building it needs more than its 0.25 GiB memory budget"), err


# ---- invariants on every run -------------------------------------------------------------
def test_until_s_runs_are_checked_and_uncomputable_metrics_are_absent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run cut by until_s before any request finished: the partial conservation check
    runs, and metrics with no value are absent with a reason, never NaN with exit 0."""
    import math

    import hetsim
    from hetsim.simulator.scenario import from_dict
    from hetsim.workloads.queueing.workload import QueueingWorkload

    raw = yaml.safe_load(TINY)
    raw["until_s"] = 1e-9  # before the first arrival
    seen: list[str] = []
    original = QueueingWorkload.check_partial

    def spy(self: QueueingWorkload) -> None:
        seen.append("partial")
        original(self)

    QueueingWorkload.check_partial = spy  # type: ignore[method-assign]
    try:
        result = hetsim.run(from_dict(raw))
    finally:
        QueueingWorkload.check_partial = original  # type: ignore[method-assign]
    assert seen == ["partial"]
    row = result.summary_row
    assert row["requests"] == 0
    for key, value in row.items():
        assert not (isinstance(value, float) and not math.isfinite(value)), key
    absent = row.get("absent_metrics", "")
    for key, value in row.items():
        if value is None:
            assert f"{key}: not computable (until_s ended the run" in absent


def test_partial_conservation_names_the_request() -> None:
    """A completion recorded before its arrival is named by the partial check."""
    import hetsim
    from hetsim.simulator.engine import InvariantViolation
    from hetsim.simulator.scenario import from_dict
    from hetsim.workloads.queueing.workload import QueueingWorkload

    raw = yaml.safe_load(TINY)
    raw["until_s"] = 5.0
    original = QueueingWorkload.check_partial

    def corrupt(self: QueueingWorkload) -> None:
        cells = {"request": 0, "server": 0, "arrival_s": 1.0}
        self._rows.append(*[cells.get(c, 0.0) for c in self._rows.columns])
        original(self)

    QueueingWorkload.check_partial = corrupt  # type: ignore[method-assign]
    try:
        with pytest.raises(InvariantViolation, match="completed before it arrived"):
            hetsim.run(from_dict(raw))
    finally:
        QueueingWorkload.check_partial = original  # type: ignore[method-assign]


def test_first_order_ettr_is_absent_where_the_expansion_fails() -> None:
    """1 - (C/tau + (tau/2 + R)/M) with tau = 3600, C = 600, R = 600, M = 100 s is
    -23.2: not an ETTR (faults at 10^6 GPUs printed it); it is NaN, so absent."""
    import math

    from hetsim.workloads.observability.faults import ettr_first_order

    assert math.isnan(ettr_first_order(3600.0, 600.0, 600.0, 100.0))
    assert ettr_first_order(3600.0, 60.0, 600.0, 1e6) == pytest.approx(
        1 - (60 / 3600 + (1800 + 600) / 1e6)
    )


def test_a_warm_up_that_leaves_nothing_to_measure_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A warm-up cut past every request is a bad input (exit 2, one line naming the
    field), not a summary of zero requests and zero latencies."""
    assert main(["run", "mmc", "--set", "workload.num_requests=1000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "warmup_requests" in err, err
    assert main(["run", "disaggregation", "--set", "workload.warmup_s=100000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "workload.warmup_s" in err, err
