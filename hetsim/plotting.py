"""Plotting helpers for sweep tables: a metric against a swept value, per policy,
with confidence intervals over seeds (replications), axes in words and units."""

from __future__ import annotations

import json
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


def swept_columns(table: pd.DataFrame) -> list[str]:
    """The swept parameters of a sweep table (``table.attrs["swept"]`` when the table came
    from :func:`hetsim.sweep`, else its dotted-path columns)."""
    swept = [c for c in table.attrs.get("swept", []) if c in table.columns]
    return swept or [c for c in table.columns if "." in str(c)]


def value_label(value: Any) -> str:
    """A readable legend/tick label for a swept value: a dict's ``label`` if it has one,
    else ``name (key=value, ...)``; JSON text (how sweep tables store dicts and lists)
    is read first."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, dict):
        if "label" in value:
            return str(value["label"])
        rest = {k: v for k, v in value.items() if k != "name"}
        inner = ", ".join(f"{k}={value_label(v)}" for k, v in sorted(rest.items()))
        if "name" in value:
            return f"{value['name']} ({inner})" if inner else str(value["name"])
        return inner
    if isinstance(value, list):
        return "[" + ", ".join(value_label(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _check_columns(table: pd.DataFrame, x: str, y: str, hue: str | None) -> None:
    swept = swept_columns(table)
    shown = ", ".join(swept) if swept else "none"
    for role, col in (("x", x), ("hue", hue)):
        if col is not None and col not in table.columns:
            raise ValueError(f"{role}={col!r} is not a column of this sweep table; "
                             f"its swept columns: {shown}")  # fmt: skip
    if y not in table.columns:
        metrics = [c for c in table.columns if c not in swept and "." not in str(c)]
        raise ValueError(f"y={y!r} is not a column of this sweep table; its columns: "
                         f"{', '.join(map(str, metrics))}")  # fmt: skip


def plot_sweep(
    table: pd.DataFrame,
    x: str,
    y: str,
    hue: str | None = None,
    ax: Any = None,
    confidence: float = 0.95,
    logx: bool | None = None,
    logy: bool = False,
) -> Any:
    """Line plot of mean ``y`` against ``x``, one line per ``hue`` value, with a shaded
    Student-t confidence band over seeds. Axes are labelled with words and units
    (:mod:`hetsim.simulator.units`); dict-valued parameters are shown by their ``label``
    or ``name (key=value)``. ``logx`` (default: when a positive numeric ``x`` spans 100x
    or more) and ``logy`` use log axes; a categorical ``x`` gets one tick per value.
    Raises ``ValueError`` naming the swept columns when ``x`` or ``hue`` is not one.
    Returns the matplotlib Axes."""
    import matplotlib.pyplot as plt

    from hetsim.simulator.units import axis_label

    _check_columns(table, x, y, hue)
    summary = sweep_summary(table, x, y, hue, confidence)
    ax = ax if ax is not None else plt.subplots(figsize=(5, 3.2), layout="constrained")[1]
    numeric = pd.api.types.is_numeric_dtype(summary[x])
    ticks = sorted(summary[x].unique(), key=str) if not numeric else []
    position = {v: i for i, v in enumerate(ticks)}
    groups = summary.groupby(hue, sort=True) if hue else [(y, summary)]
    for label, part in groups:
        xs = part[x] if numeric else part[x].map(position)
        name = value_label(label[0] if isinstance(label, tuple) else label)
        ax.plot(xs, part["mean"], marker="o", label=name)
        ax.fill_between(xs, part["ci_low"], part["ci_high"], alpha=0.2)
    if not numeric:
        ax.set_xticks(range(len(ticks)), [value_label(v) for v in ticks])
    elif logx or (logx is None and summary[x].min() > 0
                  and summary[x].max() >= 100 * summary[x].min()):  # fmt: skip
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(axis_label(y))
    ax.grid(alpha=0.3)
    if hue:
        n = summary[hue].nunique()
        where = {"loc": "upper left", "bbox_to_anchor": (1.02, 1)} if n > 4 else {}
        ax.legend(title=axis_label(hue), fontsize="small", frameon=False, **where)
    return ax
