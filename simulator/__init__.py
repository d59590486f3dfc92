"""hetsim's engine: simulation kernel, recorder, registries, scenarios, runs and sweeps.

Public API for scripts and notebooks::

    import simulator
    result = simulator.run("scenarios/quickstart.yaml", seed=1)
    result.summary            # one-row DataFrame
    result.tables["requests"] # tidy per-request table
    table = simulator.sweep("scenarios/mmc.yaml", workers=2)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator.engine import InvariantViolation, Simulation
from simulator.errors import ScenarioError
from simulator.recorder import Recorder
from simulator.registry import Registry, UnknownName

if TYPE_CHECKING:
    from pathlib import Path

    import pandas as pd

    from simulator.result import Result
    from simulator.scenario import Scenario

__version__ = "0.1.0"


def run(scenario: Scenario | str | Path, **kwargs: Any) -> Result:
    """Run a scenario (path or :class:`Scenario`); see :func:`simulator.runner.run`."""
    from simulator.runner import run as _run

    return _run(scenario, **kwargs)


def load_scenario(path: str | Path, overrides: dict[str, Any] | None = None) -> Scenario:
    """Read and validate a scenario file (raises :class:`ScenarioError`)."""
    from simulator.scenario import load_scenario as _load

    return _load(path, overrides)


def sweep(scenario: Scenario | str | Path, **kwargs: Any) -> pd.DataFrame:
    """Run a scenario's sweep grid; see :func:`simulator.sweeps.sweep`."""
    from simulator.sweeps import sweep as _sweep

    return _sweep(scenario, **kwargs)


__all__ = [
    "InvariantViolation",
    "Recorder",
    "Registry",
    "ScenarioError",
    "Simulation",
    "UnknownName",
    "__version__",
    "load_scenario",
    "run",
    "sweep",
]
