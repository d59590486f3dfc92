"""Bad observability input: one line naming the file and the field, exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetsim.simulator.cli import main

GOOD = """\
name: tiny-kair
seed: 1
cluster:
  nodes:
    - name: n
      devices:
        gpu: {type: a800, count: 8}
workload:
  kind: observability
  ranks: 16
  iterations: 20
  window_iters: 10
  comm: {link: ib-hdr}
  stragglers:
    gpu-slowdown: {count: 1}
policies:
  detector: kair
"""

CASES = [
    # (replace this, with this, commands, expected error after "FILE: ")
    (
        "gpu-slowdown: {count: 1}",
        "gpu-meltdown: {count: 1}",
        ("validate", "run"),
        "workload.stragglers: unknown straggler kind(s) ['gpu-meltdown']; valid: "
        "['dataloader-stall', 'gpu-slowdown', 'host-cpu-contention', 'link-degradation']",
    ),
    (
        "gpu-slowdown: {count: 1}",
        "gpu-slowdown: {count: 1, slowdown: [2.0, 1.5]}",
        ("validate", "run"),
        "workload.stragglers.gpu-slowdown: slowdown must be (low, high) with 1 <= low <= high",
    ),
    (
        "comm: {link: ib-hdr}",
        "comm: {link: ib-hdr, fabric: a800-nvswitch}",
        ("validate", "run"),
        "workload.comm: give exactly one of fabric or link",
    ),
    (
        "comm: {link: ib-hdr}",
        "comm: {link: carrier-pigeon}",
        ("validate", "run"),
        "workload.comm: unknown link type 'carrier-pigeon'; valid: ",
    ),
    (
        "  comm: {link: ib-hdr}\n",
        "  comm: {link: ib-hdr}\n  noise: {spike_s: [3.0, 1.0]}\n",
        ("validate", "run"),
        "workload.noise: spike_s must be (low, high) with 0 <= low <= high",
    ),
    (
        "detector: kair",
        "detector: {name: kaiops, tpr: {fail-slow: 1.5}}",
        ("validate", "run"),
        "policies.detector.tpr: tpr must be in [0, 1]; not for ['fail-slow']",
    ),
    (
        "gpu-slowdown: {count: 1}",
        "gpu-slowdown: {count: 17}",
        ("run",),
        "workload: 17 stragglers need as many ranks; have 16",
    ),
    (
        "  kind: observability\n  ranks: 16\n  iterations: 20\n  window_iters: 10\n"
        "  comm: {link: ib-hdr}\n  stragglers:\n    gpu-slowdown: {count: 1}\n",
        "  kind: observability-faults\n  gpus: 64\n  probe: {ranks: 1}\n",
        ("validate", "run"),
        "workload.probe.ranks: Input should be greater than or equal to 2",
    ),
]


@pytest.mark.parametrize(("old", "new", "commands", "expected"), CASES)
def test_bad_observability_scenario(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    old: str,
    new: str,
    commands: tuple[str, ...],
    expected: str,
) -> None:
    assert old in GOOD, old
    path = tmp_path / "s.yaml"
    path.write_text(GOOD.replace(old, new))
    for command in commands:
        argv = [command, str(path)] + (["--out", str(tmp_path / "o")] if command == "run" else [])
        code = main(argv)
        _out, err = capsys.readouterr()
        assert code == 2
        assert len(err.splitlines()) == 1, err
        assert err.startswith(f"{path}: {expected}"), err
        assert "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_good_observability_scenario_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(GOOD)
    assert main(["run", str(path), "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "tables" / "findings.csv").exists()
