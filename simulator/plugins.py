"""Fill the registries by importing the packages that define devices, workloads, policies.

Only the app layer (scenario loading, CLI, sweeps) calls this; the engine core never
imports ``devices``, ``workloads`` or ``schedulers`` by name.
"""

from __future__ import annotations

import importlib

PLUGIN_PACKAGES = ("devices", "workloads", "schedulers")


def load_plugins() -> None:
    """Import every plugin package (idempotent: Python caches modules)."""
    for name in PLUGIN_PACKAGES:
        importlib.import_module(name)
