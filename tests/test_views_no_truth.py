"""Views carry no ground truth: a walk over every domain's view types.

A policy sees estimates, never the run's truth. Ground truth (injected faults, the true
future, true lengths) may sit only in a view class named ``Oracle*``, and only a policy
that declares itself an oracle (``oracle = True``, or ``needs_future = True`` for a
forecaster) may take one; such a policy is an upper bound, labelled as one.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import pytest

import hetsim.schedulers
import hetsim.workloads
from hetsim.simulator.discovery import import_submodules

#: words in a field name that mark ground truth
TRUTH_WORDS = re.compile(r"truth|future|oracle|fault|actual|true_|exact_", re.IGNORECASE)


def view_modules() -> list[ModuleType]:
    """``hetsim.workloads.<domain>.view`` of every domain package."""
    out = []
    for info in pkgutil.iter_modules(hetsim.workloads.__path__):
        if info.ispkg:
            try:
                out.append(importlib.import_module(f"hetsim.workloads.{info.name}.view"))
            except ModuleNotFoundError:
                continue
    return out


def record_fields(cls: type) -> dict[str, str]:
    """Field name -> annotation text of a NamedTuple or dataclass (others: empty)."""
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        ann = getattr(cls, "__annotations__", {})
        return {f: str(ann.get(f, "")) for f in cls._fields}
    if dataclasses.is_dataclass(cls):
        return {f.name: str(f.type) for f in dataclasses.fields(cls)}
    return {}


def view_types() -> list[tuple[str, type]]:
    return [
        (f"{m.__name__}.{name}", cls)
        for m in view_modules()
        for name, cls in inspect.getmembers(m, inspect.isclass)
        if cls.__module__ == m.__name__ and record_fields(cls)
    ]


def test_every_domain_has_a_view_module() -> None:
    names = {m.__name__.split(".")[2] for m in view_modules()}
    assert {"cluster", "elastic", "observability", "serving", "moe", "tee", "training"} <= names


@pytest.mark.parametrize(
    ("name", "cls"), view_types(), ids=lambda x: x if isinstance(x, str) else ""
)
def test_ground_truth_only_in_oracle_views(name: str, cls: type) -> None:
    if cls.__name__.startswith("Oracle"):
        return
    for field, ann in record_fields(cls).items():
        assert not TRUTH_WORDS.search(field), f"{name}.{field} looks like ground truth"
        assert "Oracle" not in ann, f"{name}.{field} carries an oracle view ({ann})"


def oracle_view_names() -> set[str]:
    return {cls.__name__ for _, cls in view_types() if cls.__name__.startswith("Oracle")}


def test_only_declared_oracles_take_oracle_views() -> None:
    oracles = oracle_view_names()
    assert {"OracleForecastView", "OracleWindowView", "OracleEventView"} <= oracles
    takers = set()
    for modname in import_submodules(hetsim.schedulers):
        mod = importlib.import_module(modname)
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if cls.__module__ != modname:
                continue
            for _, fn in inspect.getmembers(cls, inspect.isfunction):
                if not fn.__qualname__.startswith(cls.__name__ + "."):
                    continue  # inherited (pydantic, object)
                hints = [str(h) for h in fn.__annotations__.values()]
                if any(o in h for h in hints for o in oracles):
                    takers.add(cls.__name__)
                    declared = getattr(cls, "oracle", False) or getattr(cls, "needs_future", False)
                    assert declared, f"{modname}.{cls.__name__} takes an oracle view undeclared"
    assert {"OracleForecaster", "KaiopsDetector"} <= takers
