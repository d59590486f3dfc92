"""Victim ordering shared by the score- and recency-based cache policies."""

from __future__ import annotations

import numpy as np

from hetsim.workloads.moe.view import CacheView


def victims_by_key(view: CacheView, key: np.ndarray) -> list[int]:
    """Unprotected cached experts of the view, lowest ``key`` first (ties: lowest id)."""
    cand = view.cached
    if len(view.protected):
        blocked = np.zeros(len(key), dtype=bool)
        blocked[view.protected] = True
        cand = cand[~blocked[cand]]
    order = np.lexsort((cand, key[cand]))
    out: list[int] = cand[order].tolist()
    return out
