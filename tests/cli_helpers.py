"""Helpers for tests of the command line's bad-input errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetsim.simulator.cli import main


def cli_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> str:
    """Run ``hetsim run`` on scenario ``text``; assert exit code 2, one line on stderr and
    no output folder; return the message without its ``FILE: `` prefix."""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()
    return err.removeprefix(f"{path}: ")
