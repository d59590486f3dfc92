"""Bad input: one line naming the file and the field, exit code 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetsim.simulator.cli import main
from hetsim.simulator.errors import ScenarioError
from tests.cli_helpers import TINY

GOOD = TINY.replace("num_requests: 30", "num_requests: 50") + "policies:\n  dispatch: fifo\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def bad_case(tmp_path: Path, old: str, new: str) -> Path:
    assert old in GOOD, old
    return write(tmp_path, GOOD.replace(old, new))


CASES = [
    # (replace this, with this, expected error after "FILE: ")
    ("seed: 1", "seed: 1\ncolour: blue", "colour: unknown key"),
    (
        "num_requests: 50",
        "num_requests: fifty",
        "workload.num_requests: Input should be a valid integer, unable to parse string as an integer",
    ),
    (
        "count: 2",
        "count: 2, memory_bytes: -1",
        "cluster.nodes[0].devices.server.memory_bytes: Input should be greater than 0",
    ),
    (
        "type: ideal-server",
        "type: tpu-v9",
        "cluster.nodes[0].devices.server.type: unknown device type 'tpu-v9'; valid: ",
    ),
    (
        "dispatch: fifo",
        "dispatch: smartest",
        "policies.dispatch: unknown policy for queueing.dispatch 'smartest'; valid: fifo, least-loaded, random, round-robin",
    ),
    (
        "dispatch: fifo",
        "dispatch: {name: least-loaded, count_service: maybe}",
        "policies.dispatch.count_service: Input should be a valid boolean, unable to interpret input",
    ),
    (
        "dispatch: fifo",
        "placement: fifo",
        "policies.placement: not a decision point of this workload; valid: dispatch",
    ),
    (
        "kind: queueing",
        "kind: teleport",
        "workload.kind: unknown workload kind 'teleport'; valid: ",
    ),
    (
        "{kind: poisson, rate_per_s: 1.0}",
        "{kind: trace, path: missing.csv}",
        "workload.arrivals.path: cannot read 'missing.csv': No such file or directory",
    ),
    (
        "{kind: poisson, rate_per_s: 1.0}",
        "{kind: poisson, rate_per_s: -3}",
        "workload.arrivals.rate_per_s: Input should be greater than 0",
    ),
    (
        "{kind: poisson, rate_per_s: 1.0}",
        "{kind: gamma, rate_per_s: 1}",
        "workload.arrivals: unknown kind 'gamma'; valid: 'poisson', 'trace'",
    ),
    ("name: tiny\n", "", "name: required field is missing"),
]


@pytest.mark.parametrize(("old", "new", "expected"), CASES)
def test_bad_scenario_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, expected: str
) -> None:
    path = bad_case(tmp_path, old, new)
    out_dir = tmp_path / "out"
    for argv in (["validate", str(path)], ["run", str(path), "--out", str(out_dir)]):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2
        assert out == ""
        lines = err.splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith(f"{path}: {expected}"), lines[0]
        assert "Traceback" not in err
    assert not out_dir.exists()


def test_yaml_syntax_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD.replace("seed: 1", "seed: [1"))
    code, _, err = run_cli(capsys, "validate", str(path))
    assert code == 2
    # the flow sequence opened on line 2 meets the mapping colon of "cluster:" (line 3, col 8)
    assert err == f"{path}: line 3, column 8: YAML syntax error: expected ',' or ']', but got ':'\n"


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "run", str(tmp_path / "nope.yaml"))
    assert code == 2
    assert err == f"{tmp_path / 'nope.yaml'}: cannot read file: No such file or directory\n"


def test_bad_cli_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD)
    code, _, err = run_cli(capsys, "run", str(path), "--seed", "-4")
    assert (code, err) == (2, "hetsim: error: --seed must be >= 0, got -4\n")
    code, _, err = run_cli(capsys, "run", str(path), "--set", "workload.num_requests")
    assert (code, err) == (2, "--set: workload.num_requests: expected PATH=VALUE\n")
    code, _, err = run_cli(capsys, "run", str(path), "--set", "workload.num_requests=0")
    assert code == 2
    assert err == f"{path}: workload.num_requests: Input should be greater than 0\n"
    with pytest.raises(SystemExit) as exc:
        main(["list", "gadgets"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "invalid choice: 'gadgets'" in err


def test_bad_sweep_point_is_caught_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, GOOD + "sweep:\n  workload.num_requests: [10, -1]\n")
    code, _out, err = run_cli(capsys, "sweep", str(path), "--out", str(tmp_path / "o"))
    assert code == 2
    assert err == f"{path}: workload.num_requests: Input should be greater than 0\n"
    assert not (tmp_path / "o").exists()


def test_good_scenario_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD)
    code, out, _ = run_cli(capsys, "validate", str(path))
    assert code == 0
    assert out == f"{path}: ok (workload queueing, 2 devices)\n"


def test_path_check_tolerates_non_string_keys(tmp_path: Path) -> None:
    """Workload params may hold maps with integer keys; only string keys name paths."""
    from hetsim.simulator.scenario import _check_paths

    _check_paths("f.yaml", "workload", {"table": {1: 5, 2: [7]}, "a_path": None}, tmp_path)
    with pytest.raises(ScenarioError, match=r"workload\.table\.2\[0\]\.path: cannot read 'x'"):
        _check_paths("f.yaml", "workload", {"table": {2: [{"path": "x"}]}}, tmp_path)
