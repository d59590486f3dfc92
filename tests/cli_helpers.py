"""Helpers for tests of the command line's bad-input errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetsim.simulator.cli import main

#: A 30-request queueing scenario on two ideal servers: the smallest valid scenario.
TINY = """\
name: tiny
seed: 1
cluster:
  nodes:
    - name: farm
      devices:
        server: {type: ideal-server, count: 2}
workload:
  kind: queueing
  arrivals: {kind: poisson, rate_per_s: 1.0}
  demand: {kind: exponential, mean_flops: 1.0e12}
  num_requests: 30
"""


def cli_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> str:
    """Run ``hetsim run`` on scenario ``text``; assert exit code 2, one line on stderr and
    no output folder; return the message without its ``FILE: `` prefix."""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()
    return err.removeprefix(f"{path}: ")
