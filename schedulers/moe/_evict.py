"""Victim ordering shared by the score- and recency-based cache policies."""

from __future__ import annotations

import numpy as np

from hetsim.workloads.moe.view import CacheView


def victims_by_key(view: CacheView, key: np.ndarray, count: int) -> list[int]:
    """The ``count`` first unprotected cached experts of the view, lowest ``key`` first
    (ties: lowest id)."""
    if count <= 0:
        return []
    cand = view.evictable.nonzero()[0]
    if len(cand) == 0:
        return []
    keys = key[cand]
    if count == 1:  # the minimum alone: argmin takes the first, i.e. the lowest id
        i = int(keys.argmin())
        if keys[i] == keys[i]:  # (a NaN key: argmin finds NaN first, the sort puts it last)
            return [int(cand[i])]
    out: list[int] = cand[np.lexsort((cand, keys))][:count].tolist()
    return out
