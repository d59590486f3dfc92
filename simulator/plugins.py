"""Fill the registries: hetsim's own packages, then the user's plugins.

Only the app layer (scenario loading, CLI, sweeps) calls this; the engine core never
imports ``hetsim.devices``, ``hetsim.workloads`` or ``hetsim.schedulers`` by name.

A plugin is a Python module that registers devices, workloads or policies with the
registries' decorators when imported. Plugins come from, in this order:

1. installed distributions that declare an entry point in the group ``hetsim.plugins``
   (``[project.entry-points."hetsim.plugins"] mine = "mypackage.hetsim_plugin"``);
2. ``HETSIM_PLUGINS``: module names or ``.py`` files, separated by ``os.pathsep``;
3. ``hetsim --plugin NAME_OR_FILE`` and a scenario's ``plugins:`` list (a file there
   resolves relative to the scenario file).

Each plugin loads once per process. A plugin that cannot be found or fails to import
raises :class:`PluginError` naming it (the CLI prints one line).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType

PLUGIN_PACKAGES = ("hetsim.devices", "hetsim.workloads", "hetsim.schedulers")
ENTRY_POINT_GROUP = "hetsim.plugins"
ENV_PLUGINS = "HETSIM_PLUGINS"

_loaded: dict[str, ModuleType] = {}
_state = {"builtins": False, "external": False}


class PluginError(ValueError):
    """A plugin that cannot be found or raised while it was imported."""


def load_plugins() -> None:
    """Import hetsim's packages, then every installed and ``HETSIM_PLUGINS`` plugin
    (idempotent)."""
    if not _state["builtins"]:
        for name in PLUGIN_PACKAGES:
            importlib.import_module(name)
        _state["builtins"] = True
    if not _state["external"]:
        _state["external"] = True
        for ep in sorted(_entry_points(), key=lambda e: e.name):
            load_plugin(ep.value, origin=f"entry point {ep.name!r}")
        for item in os.environ.get(ENV_PLUGINS, "").split(os.pathsep):
            if item.strip():
                load_plugin(item.strip(), origin=ENV_PLUGINS)
        from hetsim.simulator.user_catalogue import UserCatalogueError, load_env_catalogues

        try:
            load_env_catalogues()
        except UserCatalogueError as e:
            raise PluginError(str(e)) from None


def _entry_points() -> list[metadata.EntryPoint]:
    return list(metadata.entry_points(group=ENTRY_POINT_GROUP))


def load_plugin(ref: str, base_dir: Path | None = None, origin: str = "plugin") -> ModuleType:
    """Import one plugin: a module name (``mylab.policies``, or ``pkg.mod:attr`` as in
    entry points, where ``attr`` is ignored) or a path to a ``.py`` file (relative to
    ``base_dir``, else the working directory). Loading a plugin twice is a no-op."""
    load_plugins()
    is_file = ref.endswith(".py") or os.sep in ref or "/" in ref
    try:
        key = str(_file_path(ref, base_dir)) if is_file else ref.partition(":")[0]
    except (ValueError, OSError) as e:
        raise PluginError(f"{origin}: {e}") from None
    if key in _loaded:
        return _loaded[key]
    before = _snapshot()
    module = _import_file(Path(key), origin) if is_file else _import_name(key, origin)
    label = f"{origin}: {key!r}" if is_file else f"{origin}: {key}"
    try:
        _check_registrations(label, before)
    except PluginError:
        _forget(before)  # a rejected plugin leaves nothing registered
        raise
    _loaded[key] = module
    return module


def _snapshot() -> dict[str, set[str]]:
    """The names registered so far, per policy decision point and for workload kinds."""
    from hetsim.simulator import registry

    out = {f"policy:{p}": set(r._entries) for p, r in registry.policies._points.items()}
    out["workload"] = set(registry.workloads._entries)
    return out


def _forget(before: dict[str, set[str]]) -> None:
    """Remove what plugins registered since ``before`` (hetsim's own entries stay)."""
    from hetsim.simulator import registry

    for point, reg in registry.policies._points.items():
        for name in set(reg._entries) - before.get(f"policy:{point}", set()):
            if _external(reg._entries[name].obj):
                del reg._entries[name]
    for kind in set(registry.workloads._entries) - before["workload"]:
        if _external(registry.workloads._entries[kind].obj):
            del registry.workloads._entries[kind]


def _check_registrations(label: str, before: dict[str, set[str]]) -> None:
    """Check what one plugin registered: a policy at a decision point some workload
    declares, with a pydantic ``Params``, under a name hetsim does not define itself; a
    workload kind subclassing :class:`hetsim.workloads.base.Workload`. PluginError
    (one line naming the plugin) on the first problem."""
    from hetsim.simulator import discovery, registry

    index = discovery._get_index()
    added = [(point, name, reg) for point, reg in sorted(registry.policies._points.items())
             for name in sorted(set(reg._entries) - before.get(f"policy:{point}", set()))
             if _external(reg._entries[name].obj)]  # fmt: skip
    kinds = [k for k in sorted(set(registry.workloads._entries) - before["workload"])
             if _external(registry.workloads._entries[k].obj)]  # fmt: skip
    for point, name, reg in added:
        cls = reg._entries[name].obj
        where = f"policy {name!r} at {point}"
        if index.get(f"policy:{point}:{name}"):
            del reg._entries[name]
            raise PluginError(f"{label}: {where} is registered twice (hetsim's "
                              f"{index[f'policy:{point}:{name}'][0]} registers it): "
                              "choose another name")  # fmt: skip
        _check_point(label, where, point)
        _check_policy_class(label, where, cls)
    for kind in kinds:
        cls = registry.workloads._entries[kind].obj
        if index.get(f"workload:{kind}"):
            del registry.workloads._entries[kind]
            raise PluginError(f"{label}: workload kind {kind!r} is registered twice (hetsim's "
                              f"{index[f'workload:{kind}'][0]} registers it)")  # fmt: skip
        from hetsim.workloads.base import Workload, WorkloadParams

        if not (isinstance(cls, type) and issubclass(cls, Workload)):
            raise PluginError(f"{label}: workload kind {kind!r}: {_name(cls)} must subclass "
                              "hetsim.workloads.base.Workload")  # fmt: skip
        params = getattr(cls, "Params", None)
        if not (isinstance(params, type) and issubclass(params, WorkloadParams)):
            raise PluginError(f"{label}: workload kind {kind!r}: {_name(cls)}.Params must "
                              "be a subclass of hetsim.workloads.base.WorkloadParams")  # fmt: skip


def _external(obj: object) -> bool:
    """Whether ``obj`` comes from outside hetsim's own packages (a plugin's)."""
    module = str(getattr(obj, "__module__", ""))
    return not module.startswith(PLUGIN_PACKAGES)


def _name(obj: object) -> str:
    return getattr(obj, "__name__", type(obj).__name__)


def _check_point(label: str, where: str, point: str) -> None:
    """``point`` (``domain.short``) must be a decision point of a registered workload
    (the kind named like the domain first; every kind only when that one lacks it)."""
    from hetsim.simulator import registry

    def points(kinds: list[str]) -> list[str]:
        out = set()
        for kind in kinds:
            cls = registry.workloads.get(kind)
            out |= {f"{cls.domain}.{p}" for p in cls.decision_points}
        return sorted(out)

    domain = point.partition(".")[0]
    if domain in registry.workloads and point in points([domain]):
        return
    every = points(registry.workloads.names())
    if point in every:
        return
    same = [p for p in every if p.startswith(f"{domain}.")] or every
    hint = registry.did_you_mean(point, every)
    raise PluginError(f"{label}: {where}: no decision point {point!r};{hint} "
                      f"valid: {', '.join(same)}")  # fmt: skip


def _check_policy_class(label: str, where: str, cls: object) -> None:
    """A policy is a class with a pydantic ``Params`` model (its scenario parameters)."""
    from pydantic import BaseModel

    if not isinstance(cls, type):
        raise PluginError(f"{label}: {where}: {_name(cls)} must be a class (a "
                          f"{type(cls).__name__} was registered)")  # fmt: skip
    params = getattr(cls, "Params", None)
    if params is None:
        raise PluginError(f"{label}: {where}: class {cls.__name__} has no Params (a "
                          "pydantic BaseModel of its parameters; an empty one if it has "
                          "none)")  # fmt: skip
    if not (isinstance(params, type) and issubclass(params, BaseModel)):
        raise PluginError(f"{label}: {where}: {cls.__name__}.Params must be a pydantic "
                          f"BaseModel subclass, not {_name(params)}")  # fmt: skip


def _file_path(ref: str, base_dir: Path | None) -> Path:
    from hetsim.workloads.paths import expand_user

    path = expand_user(ref)
    if not path.is_absolute():
        path = (base_dir or Path.cwd()) / path
    return path.resolve()


def _import_name(name: str, origin: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and name.startswith(e.name):
            raise PluginError(f"{origin}: no module named {name!r}") from None
        raise PluginError(f"{origin}: {name!r} failed to import: {e}") from None
    except Exception as e:  # a plugin's own error: report it in one line
        raise PluginError(f"{origin}: {name!r} failed to import: {type(e).__name__}: {e}") from e


def _import_file(path: Path, origin: str) -> ModuleType:
    if not path.is_file():  # a FIFO or device is not a file either: never read
        raise PluginError(f"{origin}: no such plugin file {str(path)!r}")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    name = f"hetsim_plugin_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"{origin}: cannot load {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise PluginError(f"{origin}: {str(path)!r} failed: {type(e).__name__}: {e}") from e
    return module


def loaded_plugins() -> list[str]:
    """The user plugins loaded in this process (names or resolved file paths)."""
    return sorted(_loaded)
