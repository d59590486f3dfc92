"""Every notebook runs top to bottom (small sizes) against the public API."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETSIM_NOTEBOOK_SMALL", "1")
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})  # fmt: skip
    client.execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert os.environ["HETSIM_NOTEBOOK_SMALL"] == "1"


def test_every_scenario_validates() -> None:
    from hetsim.simulator.cli import main
    from tests.conftest import missing_shared_data

    for scenario in sorted((ROOT / "scenarios").glob("*.yaml")):
        if missing_shared_data(scenario):
            continue  # replays a trace that is not shipped and not present here
        # no CPU-time budget: whether a build fits one depends on the machine's speed and
        # load (the budget's own logic is tested in test_input_boundary.py)
        assert main(["validate", str(scenario), "--max-cpu-s", "0"]) == 0, scenario
