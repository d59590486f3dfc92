"""Paths and sizes a fuzzer found that raised a traceback or hung: each is one line
naming the file and field, exit 2 (a ``~user`` without a home folder, a NUL byte, a
FIFO or device as a data file, a list of millions of entries, an offload placement
beyond the model's layers)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from hetsim.simulator.cli import main
from tests.cli_helpers import TINY


def _validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: dict) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"{path}: "), err
    return err.removeprefix(f"{path}: ")


def _with_trace(path: str) -> dict:
    raw = yaml.safe_load(TINY)
    raw["workload"]["arrivals"] = {"kind": "trace", "path": path}
    return raw


def test_unknown_home_and_nul_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _validate(tmp_path, capsys, _with_trace("~nosuchuser-hetsim/x.csv"))
    assert err.startswith("workload.arrivals.path: ") and "no home folder" in err
    err = _validate(tmp_path, capsys, _with_trace("a\x00b.csv"))
    assert err.startswith("workload.arrivals.path: ") and "NUL byte" in err
    raw = yaml.safe_load(TINY)
    raw["catalogue"] = ["~nosuchuser-hetsim/c.yaml"]
    assert _validate(tmp_path, capsys, raw).startswith("catalogue[0]: ")


def test_fifo_and_device_are_never_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    for target in [str(fifo), "/dev/zero"] if Path("/dev/zero").exists() else [str(fifo)]:
        err = _validate(tmp_path, capsys, _with_trace(target))
        assert "not a regular file" in err and err.startswith("workload.arrivals.path")
    assert main(["validate", str(fifo)]) == 2  # a FIFO as the scenario file itself
    assert "not a regular file" in capsys.readouterr().err


def test_huge_list_is_refused_while_parsing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(TINY + "sweep:\n  seed: [" + ", ".join(["1"] * 20_001) + "]\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "a list of more than 10000 entries" in err and len(err.splitlines()) == 1


def test_offload_cpu_layers_beyond_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = Path(__file__).parents[1] / "scenarios" / "cpu-tee.yaml"
    code = main(["run", str(scenario), "-q", "--set",
                 "policies.placement={name: fixed, cpu_layers: 1000}"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "policies.placement.cpu_layers: 1000 is more than the model's" in err
