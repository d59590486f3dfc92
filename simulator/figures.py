"""The standard figures of a result folder, per workload kind, as PNG and SVG.

``hetsim plot RESULT_DIR`` (and ``hetsim run --out DIR --plots``) reads the folder's
``scenario.yaml`` for the workload kind and its ``tables/``, and draws every figure
:data:`FIGURES` lists for that kind whose table is there, into ``RESULT_DIR/figures/``.
A figure is a row of a table (which table, which columns, which drawing), not code per
domain; the drawings are the few builders below. Axes are labelled in words and units
(:mod:`simulator.units`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from hetsim.simulator.atomic import atomic_write
from hetsim.simulator.errors import ScenarioError
from hetsim.simulator.units import axis_label

FORMATS = ("png", "svg")
DPI = 150
WIDTH_IN = 6.4
PANEL_H_IN = 3.0


@dataclass(frozen=True)
class FigureSpec:
    """One standard figure: its file name, table, drawing and columns.

    ``draw``: ``cdf`` (an ECDF per column, one panel each), ``series`` (columns against
    ``x``, one panel each, a line per ``hue`` value), ``bars`` (columns per ``x`` row or
    group, one panel each), ``stack`` (the columns' means per ``x`` value, stacked),
    ``occupancy`` (how many rows are inside each (start, end) column pair over time),
    ``spans`` (one horizontal segment per row from ``columns[0]`` to ``columns[1]``).
    ``derive``: new column -> (a, b) meaning ``a - b`` (or ``a / b`` with ``ratio``).
    """

    name: str
    table: str
    draw: str
    columns: tuple[str, ...]
    title: str
    x: str = ""
    hue: str = ""
    derive: dict[str, tuple[str, str]] = field(default_factory=dict)
    ratio: bool = False
    first_of: str = ""  # keep only rows whose column equals its first value (one step)


F = FigureSpec
FIGURES: dict[str, tuple[FigureSpec, ...]] = {
    "queueing": (
        F(
            "latency-cdf",
            "requests",
            "cdf",
            ("wait_s", "sojourn_s"),
            "Request latency",
            derive={"wait_s": ("start_s", "arrival_s"), "sojourn_s": ("end_s", "arrival_s")},
        ),
        F(
            "requests-in-system",
            "requests",
            "occupancy",
            ("arrival_s", "end_s"),
            "Requests in the system",
        ),
        F(
            "server-share",
            "requests",
            "bars",
            ("service_s",),
            "Service time per server",
            x="server",
        ),
    ),
    "serving": (
        F("latency-cdf", "requests", "cdf", ("ttft_s", "tpot_s", "e2e_s"), "Request latency"),
        F(
            "attainment-over-time",
            "windows",
            "series",
            ("attainment", "ttft_p90_s"),
            "SLO attainment and TTFT per window",
            x="start_s",
        ),
        F(
            "queue-over-time",
            "scaling",
            "series",
            ("outstanding", "gpus"),
            "Outstanding requests and GPUs",
            x="time_s",
        ),
        F(
            "requests-in-system",
            "requests",
            "occupancy",
            ("arrival_s", "finish_s"),
            "Requests in the system",
        ),
        F(
            "instances",
            "instances",
            "bars",
            ("utilisation", "kv_utilisation"),
            "Utilisation and KV use per instance",
            x="instance",
        ),
    ),
    "cluster": (
        F("jct-cdf", "jobs", "cdf", ("jct_s", "queue_s"), "Job completion and queueing time"),
        F(
            "jobs-over-time",
            "jobs",
            "occupancy",
            ("submit_s", "start_s", "start_s", "end_s"),
            "Jobs queued and running",
        ),
        F(
            "gpu-use",
            "utilisation",
            "series",
            ("utilisation",),
            "GPU use per type",
            x="start_s",
            hue="gpu_type",
        ),
    ),
    "training": (
        F(
            "memory-timeline",
            "ops",
            "series",
            ("used_bytes",),
            "GPU memory over one iteration",
            x="start_s",
            first_of="iteration",
        ),
        F(
            "iteration-breakdown",
            "iterations",
            "stack",
            ("stall_s", "recompute_s", "profile_s", "cpu_adam_s"),
            "Time lost per iteration",
            x="iteration",
        ),
    ),
    "moe": (
        F(
            "layer-time-split",
            "layers",
            "stack",
            ("gpu_busy_s", "cpu_busy_s", "stall_s"),
            "Time per layer (mean over steps)",
            x="layer",
        ),
        F(
            "hit-rate",
            "layers",
            "bars",
            ("hit_rate",),
            "Expert cache hit rate per layer",
            x="layer",
            derive={"hit_rate": ("hits", "experts")},
            ratio=True,
        ),
    ),
    "elastic": (
        F(
            "replicas-vs-traffic",
            "timeline",
            "series",
            ("rate_per_s", "consumed_per_s", "replicas", "lag_samples"),
            "Traffic, replicas and lag",
            x="time_s",
        ),
    ),
    "observability": (
        F(
            "detection-timeline",
            "faults",
            "spans",
            ("start_s", "detected_s"),
            "Faults from injection to detection",
            hue="kind",
        ),
        F(
            "iteration-time",
            "windows",
            "series",
            ("mean_iteration_s", "mean_comm_s"),
            "Iteration and communication time per window",
            x="start_s",
        ),
    ),
}
"""Standard figures per workload kind (``observability-faults`` shares observability's)."""
FIGURES["observability-faults"] = FIGURES["observability"]


def _read_table(folder: Path, name: str) -> pd.DataFrame | None:
    for suffix, reader in ((".parquet", pd.read_parquet), (".csv", pd.read_csv)):
        path = folder / "tables" / f"{name}{suffix}"
        if path.exists():
            return reader(path)
    return None


def _prepare(spec: FigureSpec, frame: pd.DataFrame) -> pd.DataFrame | None:
    frame = frame.copy()
    for new, (a, b) in spec.derive.items():
        if a not in frame or b not in frame:
            return None
        num, den = frame[a].astype(float), frame[b].astype(float)
        frame[new] = num / den.where(den != 0) if spec.ratio else num - den
    if spec.first_of and spec.first_of in frame and len(frame):
        frame = frame[frame[spec.first_of] == frame[spec.first_of].iloc[0]]
    needed = [c for c in (*spec.columns, spec.x, spec.hue) if c]
    if any(c not in frame for c in needed) or frame.empty:
        return None
    return frame


def _panels(n: int) -> tuple[Any, list[Any]]:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n, figsize=(WIDTH_IN if n < 3 else 9.6, PANEL_H_IN),
                             layout="constrained", squeeze=False)  # fmt: skip
    return fig, list(axes[0])


def _log_if_wide(ax: Any, values: np.ndarray, axis: str = "x") -> None:
    pos = values[np.isfinite(values) & (values > 0)]
    if len(pos) and pos.max() >= 100 * pos.min():
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")


def _time_scale(values: np.ndarray) -> tuple[float, str]:
    """Seconds, or hours for spans over two hours (cluster traces run for days)."""
    finite = values[np.isfinite(values)]
    return (3600.0, "h") if len(finite) and finite.max() - finite.min() > 7200 else (1.0, "s")


def _cdf(spec: FigureSpec, frame: pd.DataFrame) -> Any:
    fig, axes = _panels(len(spec.columns))
    for ax, col in zip(axes, spec.columns, strict=True):
        values = np.sort(frame[col].dropna().to_numpy(dtype=float))
        if len(values) == 0:
            continue
        ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post")
        _log_if_wide(ax, values)
        for q in (0.5, 0.99):
            ax.axhline(q, color="0.7", lw=0.6, ls=":")
        ax.set_xlabel(axis_label(col))
        ax.set_ylabel("fraction of requests" if "request" in spec.title.lower() else "CDF")
        ax.set_ylim(0, 1.01)
    return fig


def _series(spec: FigureSpec, frame: pd.DataFrame) -> Any:
    fig, axes = _panels(len(spec.columns))
    groups = frame.groupby(spec.hue, sort=True) if spec.hue else [("", frame)]
    timed = spec.x.endswith("_s")
    scale, unit = _time_scale(frame[spec.x].to_numpy(dtype=float)) if timed else (1.0, "")
    for label, part in groups:
        part = part.sort_values(spec.x)
        for ax, col in zip(axes, spec.columns, strict=True):
            lw = 0.7 if len(part) > 500 else 1.5  # a week of samples: thin lines
            ax.step(part[spec.x] / scale, part[col], where="post", lw=lw,
                    label=str(label) or None)  # fmt: skip
    for ax, col in zip(axes, spec.columns, strict=True):
        xlabel = axis_label(spec.x)
        ax.set_xlabel(xlabel.replace("(s)", f"({unit})") if timed else xlabel)
        ax.set_ylabel(axis_label(col))
        if spec.hue:
            ax.legend(title=axis_label(spec.hue), fontsize="small", frameon=False)
    return fig


def _bars(spec: FigureSpec, frame: pd.DataFrame) -> Any:
    fig, axes = _panels(len(spec.columns))
    means = frame.groupby(spec.x, sort=True)[list(spec.columns)].mean()
    labels = [str(v) for v in means.index]
    for ax, col in zip(axes, spec.columns, strict=True):
        ax.bar(range(len(labels)), means[col].to_numpy(dtype=float), color="C0")
        step = max(1, len(labels) // 16)
        ax.set_xticks(range(0, len(labels), step), labels[::step])
        ax.set_xlabel(axis_label(spec.x))
        ax.set_ylabel(axis_label(col))
    return fig


def _stack(spec: FigureSpec, frame: pd.DataFrame) -> Any:
    fig, axes = _panels(1)
    ax = axes[0]
    means = frame.groupby(spec.x, sort=True)[list(spec.columns)].mean()
    bottom = np.zeros(len(means))
    xs = np.arange(len(means))
    for col in spec.columns:
        values = means[col].to_numpy(dtype=float)
        ax.bar(xs, values, bottom=bottom, label=axis_label(col))
        bottom += values
    step = max(1, len(xs) // 16)
    ax.set_xticks(xs[::step], [str(v) for v in means.index[::step]])
    ax.set_xlabel(axis_label(spec.x))
    ax.set_ylabel("time (s)")
    ax.legend(fontsize="small", frameon=False)
    return fig


def _occupancy(spec: FigureSpec, frame: pd.DataFrame) -> Any:
    fig, axes = _panels(1)
    ax = axes[0]
    pairs = list(zip(spec.columns[::2], spec.columns[1::2], strict=True))
    names = ("in the system",) if len(pairs) == 1 else ("queued", "running")
    for (a, b), name in zip(pairs, names, strict=True):
        start = frame[a].to_numpy(dtype=float)
        end = frame[b].to_numpy(dtype=float)
        end = np.where(np.isfinite(end), end, np.nanmax(end) if np.isfinite(end).any() else 0)
        times = np.concatenate([start, end])
        steps = np.concatenate([np.ones(len(start)), -np.ones(len(end))])
        order = np.lexsort((-steps, times))  # an arrival before a departure at one instant
        scale, unit = _time_scale(times)
        ax.step(times[order] / scale, np.cumsum(steps[order]), where="post", label=name)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("count")
    if len(pairs) > 1:
        ax.legend(fontsize="small", frameon=False)
    return fig


def _spans(spec: FigureSpec, frame: pd.DataFrame) -> Any:
    fig, axes = _panels(1)
    ax = axes[0]
    a, b = spec.columns[:2]
    frame = frame.sort_values(a).reset_index(drop=True)
    kinds = sorted(frame[spec.hue].astype(str).unique()) if spec.hue else [""]
    for k, kind in enumerate(kinds):
        part = frame[frame[spec.hue].astype(str) == kind] if spec.hue else frame
        found = part[part[b].notna()]
        missed = part[part[b].isna()]
        ax.hlines(found.index, found[a], found[b], color=f"C{k}", lw=2, label=kind or None)
        ax.plot(missed[a], missed.index, "x", color=f"C{k}", ms=5)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("fault (by injection time)")
    ax.set_title("segment: injection to detection; x: never detected", fontsize="small")
    if spec.hue:
        ax.legend(title=spec.hue, fontsize="small", frameon=False, loc="upper left")
    return fig


DRAW: dict[str, Callable[[FigureSpec, pd.DataFrame], Any]] = {
    "cdf": _cdf, "series": _series, "bars": _bars, "stack": _stack,
    "occupancy": _occupancy, "spans": _spans,
}  # fmt: skip


def write_figures(result_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Draw the standard figures of the run in ``result_dir`` into ``out_dir`` (default
    ``result_dir/figures``), each as PNG and SVG, atomically; returns the files."""
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "svg", "pdf"):
        matplotlib.use("Agg")  # files only: no window
    import matplotlib.pyplot as plt

    folder = Path(result_dir)
    scenario_file = folder / "scenario.yaml"
    if not scenario_file.is_file():
        raise ScenarioError(str(folder), "", "not a hetsim result folder (no scenario.yaml)")
    scenario = yaml.safe_load(scenario_file.read_text(encoding="utf-8")) or {}
    kind = str((scenario.get("workload") or {}).get("kind", ""))
    name = str(scenario.get("name", folder.name))
    target = Path(out_dir) if out_dir is not None else folder / "figures"
    target.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for spec in FIGURES.get(kind, ()):
        raw = _read_table(folder, spec.table)
        frame = _prepare(spec, raw) if raw is not None else None
        if frame is None:
            continue
        fig = DRAW[spec.draw](spec, frame)
        fig.suptitle(f"{name}: {spec.title}", fontsize="medium")
        for fmt in FORMATS:
            path = target / f"{spec.name}.{fmt}"
            atomic_write(path, partial(_save, fig, fmt))
            written.append(path)
        plt.close(fig)
    return written


def _save(fig: Any, fmt: str, path: Path) -> None:
    fig.savefig(path, format=fmt, dpi=DPI, metadata=_metadata(fmt))


def _metadata(fmt: str) -> dict[str, Any]:
    """No creation date in the files, so the same run gives the same bytes."""
    return {"Date": None} if fmt == "svg" else {"Software": None}
