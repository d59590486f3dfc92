"""Shared fixtures: the registries filled once, paths to the repo's folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.plugins import load_plugins

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
SHARED = ROOT.parent / "shared"

load_plugins()


@pytest.fixture
def root() -> Path:
    """The repository root."""
    return ROOT
