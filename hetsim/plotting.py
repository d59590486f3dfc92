"""Plotting helpers for sweep tables: a metric against a swept value, per policy,
with confidence intervals over seeds (replications)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy import stats


def sweep_summary(
    table: pd.DataFrame, x: str, y: str, hue: str | None = None, confidence: float = 0.95
) -> pd.DataFrame:
    """Mean of ``y`` per (hue, x) with a Student-t confidence half-width over replications.

    Columns: ``hue`` (if given), ``x``, ``n``, ``mean``, ``std``, ``ci_low``, ``ci_high``.
    A group of one run has a zero-width interval (nothing to estimate it from).
    """
    keys = [k for k in (hue, x) if k is not None]
    ok = table[table["error"].isna()] if "error" in table else table
    grouped = ok.groupby(keys, sort=True)[y]
    out = grouped.agg(n="count", mean="mean", std="std").reset_index()
    t = stats.t.ppf(0.5 + confidence / 2, np.maximum(out["n"] - 1, 1))
    half = np.where(out["n"] > 1, t * out["std"] / np.sqrt(out["n"]), 0.0)
    out["ci_low"] = out["mean"] - half
    out["ci_high"] = out["mean"] + half
    return out


def plot_sweep(
    table: pd.DataFrame,
    x: str,
    y: str,
    hue: str | None = None,
    ax: Any = None,
    confidence: float = 0.95,
) -> Any:
    """Line plot of mean ``y`` against ``x``, one line per ``hue`` value, with a shaded
    confidence band over seeds. Returns the matplotlib Axes."""
    import matplotlib.pyplot as plt

    summary = sweep_summary(table, x, y, hue, confidence)
    ax = ax if ax is not None else plt.subplots(figsize=(5, 3.2))[1]
    groups = summary.groupby(hue, sort=True) if hue else [(y, summary)]
    for label, part in groups:
        ax.plot(part[x], part["mean"], marker="o", label=str(label))
        ax.fill_between(part[x], part["ci_low"], part["ci_high"], alpha=0.2)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    if hue:
        ax.legend(title=hue)
    return ax
