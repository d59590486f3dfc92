"""Import every module of a package, so that their registry decorators run.

New devices, workloads and policies need no registration line anywhere: a module
placed in ``workloads/`` or ``schedulers/<domain>/`` is found and imported, in sorted
order (so registration order, and anything derived from it, is the same everywhere).
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def import_submodules(package: ModuleType) -> list[str]:
    """Import every module under ``package`` (recursively, sorted); returns their names."""
    names = sorted(
        info.name for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}.")
    )
    for name in names:
        importlib.import_module(name)
    return names
