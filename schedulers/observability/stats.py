"""Statistics shared by the detectors: two-sample Kolmogorov-Smirnov, vectorised.

``ks_2samp_statistic`` is the textbook two-sample statistic ``sup_x |F_a(x) - F_b(x)|``;
``ks_vs_pooled_others`` computes it for every row of a ranks x samples matrix against the
pooled samples of all other rows, without building N reference samples: with the pooled
values sorted once, ``F_ref(x) = (#pool <= x - #own <= x) / (M - W)``. Both empirical CDFs
are right-continuous step functions, so between consecutive own sample points ``F_own``
is constant and ``F_ref`` monotone: the supremum is attained at an own point ``x`` or just
before it (``x-``), and those 2W candidates per row are all that is evaluated.
"""

from __future__ import annotations

import math

import numpy as np


def ks_2samp_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """``sup_x |F_a(x) - F_b(x)|`` of two 1-D samples (ties handled exactly)."""
    a = np.sort(np.asarray(a, dtype=float))
    b = np.sort(np.asarray(b, dtype=float))
    if len(a) == 0 or len(b) == 0:
        raise ValueError("KS statistic needs two non-empty samples")
    points = np.concatenate([a, b])
    fa = np.searchsorted(a, points, side="right") / len(a)
    fb = np.searchsorted(b, points, side="right") / len(b)
    return float(np.max(np.abs(fa - fb)))


def _run_bounds(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each entry of row-sorted ``s``: #entries of its row < it and <= it."""
    n, w = s.shape
    idx = np.broadcast_to(np.arange(w), (n, w))
    new = np.ones((n, w), dtype=bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    last = np.ones((n, w), dtype=bool)
    last[:, :-1] = new[:, 1:]
    below = np.maximum.accumulate(np.where(new, idx, 0), axis=1)
    upto = np.minimum.accumulate(np.where(last, idx + 1, w)[:, ::-1], axis=1)[:, ::-1]
    return below, upto


def ks_vs_pooled_others(x: np.ndarray) -> np.ndarray:
    """KS statistic of every row of ``x`` (N x W) against the other rows pooled."""
    x = np.asarray(x, dtype=float)
    n, w = x.shape
    if n < 2 or w < 1:
        raise ValueError("need at least two rows and one column")
    own = np.sort(x, axis=1)
    pool = np.sort(own, axis=None)
    m = pool.size - w
    below, upto = _run_bounds(own)
    pool_le = np.searchsorted(pool, own, side="right").reshape(n, w)
    pool_lt = np.searchsorted(pool, own, side="left").reshape(n, w)
    d_at = np.abs(upto / w - (pool_le - upto) / m)
    d_before = np.abs(below / w - (pool_lt - below) / m)
    return np.maximum(d_at.max(axis=1), d_before.max(axis=1))


def ks_critical(alpha: float, n: int, m: int) -> float:
    """Asymptotic critical value ``c(alpha) sqrt((n + m) / (n m))``,
    ``c(alpha) = sqrt(-ln(alpha / 2) / 2)`` (c(0.01) = 1.63)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    return math.sqrt(-math.log(alpha / 2.0) / 2.0) * math.sqrt((n + m) / (n * m))


def zscore(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """Plain z-score ``(v - mean) / std`` along ``axis`` (std 0 gives z 0)."""
    mean = values.mean(axis=axis, keepdims=True)
    std = values.std(axis=axis, keepdims=True)
    safe = np.where(std > 0, std, 1.0)
    return np.where(std > 0, (values - mean) / safe, 0.0)
