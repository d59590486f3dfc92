"""hetsim: a discrete-event simulator of heterogeneous AI clusters.

The public API for scripts and notebooks::

    import hetsim
    result = hetsim.run("quickstart", seed=1)      # a shipped scenario by name, or a path
    result.summary                                  # one-row DataFrame
    result.tables["requests"]                       # tidy per-request table
    table = hetsim.sweep("mmc", workers=2)          # one row per sweep point
    from hetsim.plotting import plot_sweep

The layers live in sub-packages: :mod:`hetsim.simulator` (engine and app: scenarios,
runs, sweeps, CLI), :mod:`hetsim.devices` (cost), :mod:`hetsim.workloads` (mechanisms,
one package per domain), :mod:`hetsim.schedulers` (policies, one package per domain).
Heavy modules load on first use, so ``import hetsim`` is cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hetsim.simulator.errors import InvariantViolation, ScenarioError
from hetsim.simulator.registry import UnknownName
from hetsim.simulator.version import __version__

if TYPE_CHECKING:
    from pathlib import Path

    import pandas as pd

    from hetsim.simulator.engine import Simulation
    from hetsim.simulator.result import Result
    from hetsim.simulator.scenario import Scenario


def run(scenario: Scenario | str | Path, **kwargs: Any) -> Result:
    """Run a scenario (a path, a shipped scenario's name, or a :class:`Scenario`);
    see :func:`hetsim.simulator.runner.run`."""
    from hetsim.simulator.runner import run as _run

    return _run(scenario, **kwargs)


def load_scenario(path: str | Path, overrides: dict[str, Any] | None = None) -> Scenario:
    """Read and validate a scenario file or a shipped scenario by name (raises
    :class:`ScenarioError`)."""
    from hetsim.simulator.scenario import load_scenario as _load

    return _load(path, overrides)


def sweep(scenario: Scenario | str | Path, **kwargs: Any) -> pd.DataFrame:
    """Run a scenario's sweep grid; see :func:`hetsim.simulator.sweeps.sweep`."""
    from hetsim.simulator.sweeps import sweep as _sweep

    return _sweep(scenario, **kwargs)


def __getattr__(name: str) -> Any:
    """``hetsim.plotting``, ``Simulation``, ``Result`` and ``Scenario`` load on first use
    (``plotting`` pulls in matplotlib and scipy; the engine numpy and SimPy)."""
    import importlib

    if name == "plotting":
        return importlib.import_module("hetsim.plotting")
    if name == "Simulation":
        return importlib.import_module("hetsim.simulator.engine").Simulation
    if name in ("Result", "Scenario"):
        module = "result" if name == "Result" else "scenario"
        return getattr(importlib.import_module(f"hetsim.simulator.{module}"), name)
    raise AttributeError(f"module 'hetsim' has no attribute {name!r}")


__all__ = [
    "InvariantViolation",
    "ScenarioError",
    "Simulation",
    "UnknownName",
    "__version__",
    "load_scenario",
    "run",
    "sweep",
]
