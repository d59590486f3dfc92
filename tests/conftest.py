"""Shared fixtures: the registries filled once, paths to the repo's folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetsim.simulator.plugins import load_plugins

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
SHARED = ROOT.parent / "shared"

load_plugins()


@pytest.fixture
def root() -> Path:
    """The repository root."""
    return ROOT


def missing_shared_data(scenario: Path) -> str | None:
    """The shared data folder a scenario reads that is absent here (None if none).

    Scenarios that replay unshipped traces point at ../shared/data/<name>; a checkout
    without that folder skips them instead of failing.
    """
    import re

    for name in re.findall(r"shared/data/([\w.-]+)", scenario.read_text()):
        if not (SHARED / "data" / name).exists():
            return name
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run slow tests first, so that parallel workers start with the long ones and the
    short ones fill in behind them (the order is stable, the same in every worker)."""
    items.sort(key=lambda item: 0 if item.get_closest_marker("slow") else 1)
