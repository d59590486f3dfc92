"""Comparing refitted numbers with the catalogue's committed ones within a tolerance.

A least-squares refit of the same points can differ in its fourth significant digit
between machines (the CPU's vector width and the BLAS build change the order of the
floating-point reductions), so a committed fit is checked to a stated relative
tolerance, never to its last printed digit.
"""

from __future__ import annotations

import math
from typing import Any

REFIT_REL = 1e-2
"""Relative tolerance of a refitted parameter against its committed value: 100x the
largest machine-to-machine difference seen (2.4e-3, a link's ``alpha_s``), and still far
below any difference a change of data or method makes."""


def close_tree_diffs(got: Any, want: Any, rel: float = REFIT_REL, where: str = "") -> list[str]:
    """Paths at which ``got`` and ``want`` differ: numbers beyond ``rel`` (relative),
    anything else by equality, mappings and sequences element by element."""
    if isinstance(want, bool) or isinstance(got, bool):
        return [] if got == want else [f"{where}: {got!r} != {want!r}"]
    if isinstance(want, int | float) and isinstance(got, int | float):
        ok = math.isclose(float(got), float(want), rel_tol=rel, abs_tol=0.0)
        return [] if ok else [f"{where}: {got!r} != {want!r} (rel {rel:g})"]
    if isinstance(want, dict) and isinstance(got, dict):
        if set(got) != set(want):
            return [f"{where}: keys {sorted(map(str, got))} != {sorted(map(str, want))}"]
        out: list[str] = []
        for k in want:
            out += close_tree_diffs(got[k], want[k], rel, f"{where}.{k}")
        return out
    if isinstance(want, list | tuple) and isinstance(got, list | tuple):
        if len(got) != len(want):
            return [f"{where}: length {len(got)} != {len(want)}"]
        out = []
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            out += close_tree_diffs(g, w, rel, f"{where}[{i}]")
        return out
    return [] if got == want else [f"{where}: {got!r} != {want!r}"]


def assert_close_tree(got: Any, want: Any, rel: float = REFIT_REL, what: str = "") -> None:
    """Fail with every differing path when ``got`` and ``want`` differ beyond ``rel``."""
    diffs = close_tree_diffs(got, want, rel, what)
    assert not diffs, "\n".join(diffs)
