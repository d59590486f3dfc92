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
    module = _import_file(Path(key), origin) if is_file else _import_name(key, origin)
    _loaded[key] = module
    return module


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
