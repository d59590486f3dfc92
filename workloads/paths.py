"""Where a path named in a scenario points: the rules live in the engine layer
(:mod:`hetsim.simulator.paths`), so that the cluster and its catalogues can resolve a
user's file too; this module keeps the names the workloads import."""

from hetsim.simulator.paths import (
    DATA_DIR,
    PKG_PREFIX,
    expand_user,
    resolve_path,
    shipped,
    shipped_files,
)

__all__ = ["DATA_DIR", "PKG_PREFIX", "expand_user", "resolve_path", "shipped", "shipped_files"]
