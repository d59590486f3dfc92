"""Find the modules that register workloads and policies, and import them on demand.

New devices, workloads and policies need no registration line anywhere: a module
placed in ``workloads/`` or ``schedulers/<domain>/`` is found. Discovery is lazy, so a
run imports only the workload and policies its scenario names (start-up time):

- :func:`lazy_package` marks a package (``hetsim.workloads``, ``hetsim.schedulers``)
  as a source; nothing under it is imported yet.
- A registry lookup of a name not yet registered consults an index built by reading
  the package's source files (not importing them): which module holds
  ``@workloads.register("kind")``, ``@policies.register("point", "name")``, or calls
  ``registry.models.add``. It imports those modules, and if the name is still missing
  (a registration the text scan cannot see, e.g. a name built at run time), every
  module of every source, so a lookup never misses what full discovery would find.
- Listing a registry (``names()``, iteration, ``len``) imports every module first.

Full discovery imports modules in sorted order. Registries sort on listing, so which
modules a run imported does not change what it sees (``tests/test_discovery.py``
checks the index against full discovery).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from hetsim.simulator import registry

_WORKLOAD = re.compile(r"""\bworkloads\.register\(\s*["']([^"']+)["']\s*\)""")
_POLICY = re.compile(r"""\bpolicies\.register\(\s*["']([^"']+)["']\s*,\s*["']([^"']+)["']\s*\)""")
_MODELS = re.compile(r"""\bmodels\.add\(""")

_sources: list[ModuleType] = []
_index: dict[str, list[str]] | None = None  # "workload:kind" / "policy:point:name" -> modules
_all_loaded: set[str] = set()  # sources fully imported


def import_submodules(package: ModuleType) -> list[str]:
    """Import every module under ``package`` (recursively, sorted); returns their names."""
    names = sorted(
        info.name for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}.")
    )
    for name in names:
        importlib.import_module(name)
    return names


def source_modules(package: ModuleType) -> dict[str, Path]:
    """Module name -> source file of every ``.py`` file under ``package``, found by
    walking its folders (nothing is imported)."""
    out: dict[str, Path] = {}
    for root in package.__path__:
        base = Path(root)
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("").parts
            if "__pycache__" in rel or not all(p.isidentifier() for p in rel):
                continue
            parts = rel[:-1] if rel[-1] == "__init__" else rel
            out[".".join((package.__name__, *parts))] = path
    return out


def build_index(packages: list[ModuleType]) -> dict[str, list[str]]:
    """Registration key -> modules that (by their source text) register it. Keys:
    ``workload:KIND``, ``policy:POINT:NAME``, ``models`` (modules adding models)."""
    index: dict[str, list[str]] = {}
    for package in packages:
        for module, path in source_modules(package).items():
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue  # full discovery will import (and report) it
            keys: list[str] = []
            # a substring test first: most files register nothing, and a pattern that
            # starts with ``\b`` scans every position of the text (start-up time)
            if "workloads.register(" in text:
                keys += [f"workload:{m.group(1)}" for m in _WORKLOAD.finditer(text)]
            if "policies.register(" in text:
                keys += [f"policy:{m.group(1)}:{m.group(2)}" for m in _POLICY.finditer(text)]
            if "models.add(" in text and _MODELS.search(text):
                keys.append("models")
            for key in keys:
                index.setdefault(key, []).append(module)
    return index


def _get_index() -> dict[str, list[str]]:
    global _index
    if _index is None:
        _index = build_index(_sources)
    return _index


def load_everything() -> None:
    """Full discovery: import every module of every lazy source (once)."""
    for package in list(_sources):
        if package.__name__ not in _all_loaded:
            import_submodules(package)
            _all_loaded.add(package.__name__)


class _IndexLoader:
    """A registry's :class:`~simulator.registry.Loader`: index first, then everything."""

    def __init__(self, table: Callable[[], registry.Registry[Any] | None], key: str) -> None:
        self.table, self.key = table, key

    def _has(self, name: str) -> bool:
        table = self.table()
        return table is not None and name in table._entries

    def load(self, name: str) -> None:
        key = self.key if self.key == "models" else f"{self.key}:{name}"
        for module in _get_index().get(key, ()):
            importlib.import_module(module)
            if self._has(name):
                return
        if not self._has(name):
            load_everything()

    def load_all(self) -> None:
        load_everything()


def _policy_loader(point: str) -> _IndexLoader:
    return _IndexLoader(lambda: registry.policies._points.get(point), f"policy:{point}")


def lazy_package(package: ModuleType) -> None:
    """Make ``package`` a lazy source for the workload, model and policy registries."""
    global _index
    if package in _sources:
        return
    _sources.append(package)
    _index = None
    registry.workloads.loader = _IndexLoader(lambda: registry.workloads, "workload")
    registry.models.loader = _IndexLoader(lambda: registry.models, "models")
    registry.policies.set_loader(_policy_loader)
