"""The standard figures of a result folder, per workload kind, as PNG and SVG.

``hetsim plot RESULT_DIR`` (and ``hetsim run --out DIR --plots``) reads the folder's
``scenario.yaml`` for the workload kind and its ``tables/``, and draws every figure
:data:`FIGURES` lists for that kind whose table is there, into ``RESULT_DIR/figures/``.
A figure is a row of a table (which table, which columns, which drawing), not code per
domain; the drawings are the few builders below. Axes are labelled in words and units
(:mod:`simulator.units`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from hetsim.simulator.errors import ScenarioError
from hetsim.simulator.outdir import check_output_dir, output_dir, read_marker, safe_rel, write_owned
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
    ``spans`` (one horizontal segment per row from ``columns[0]`` to ``columns[1]``),
    ``memory`` (``columns[0]`` bytes in use over ``x``, split into the summary's
    ``ref`` bytes held all along and the rest), ``stage_time`` (per ``x`` stage, the
    summed durations of its (``columns[0]``, ``columns[1]``) rows per ``hue`` kind and
    the idle rest of the span), ``deadlines`` (deadline satisfaction: per ``x`` group and
    the CDF of the time to finish over the time allowed, ``(columns[0] - columns[3]) /
    (columns[1] - columns[3])``, over rows with a finite ``columns[1]``).
    ``derive``: new column -> (a, b) meaning ``a - b`` (or ``a / b`` with ``ratio``).
    ``rest``: (label, total column) for ``stack``: a first segment of the total minus
    the stacked columns. ``ref``: a column drawn as a dashed line (``stack``), or the
    summary metric ``memory`` reads.
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
    rest: tuple[str, str] | tuple[()] = ()
    ref: str = ""


F = FigureSpec
MEMORY_CATEGORIES = ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
                     "buffers_bytes")  # fmt: skip
#: the power and energy figures of every domain that meters its devices (devices/energy.py)
ENERGY_FIGURES = (
    F("power-over-time", "power", "series", ("power_W",), "Power per device", x="time_s",
      hue="device"),
    F("energy-by-device", "energy", "bars", ("energy_J", "avg_power_W"),
      "Energy and average power per device", x="device"),
)  # fmt: skip


#: a multi-workload run (workloads/colocate/, docs/colocate.md)
COLOCATE_FIGURES = (
    *ENERGY_FIGURES,
    F("gpus-per-workload", "device_owners", "occupancy", ("start_s", "end_s"),
      "Accelerators owned by each workload", hue="owner"),
    F("arbiter-over-time", "arbiter", "series",
      ("rate_estimate_per_s", "serving_busy_gpus", "lent_gpus"),
      "Serving load estimate, serving's busy GPUs and GPUs lent", x="time_s"),
    F("attainment-over-time", "windows", "series", ("attainment", "ttft_p90_s"),
      "Serving SLO attainment and TTFT per window", x="start_s"),
)  # fmt: skip


FIGURES: dict[str, tuple[FigureSpec, ...]] = {
    "colocate": COLOCATE_FIGURES,
    "queueing": (
        *ENERGY_FIGURES,
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
        *ENERGY_FIGURES,
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
        F(
            "deadlines",
            "jobs",
            "deadlines",
            ("end_s", "deadline_s", "met_deadline", "submit_s"),
            "Deadline satisfaction",
            x="gpus",
        ),
    ),
    "training": (
        F(
            "memory-timeline",
            "ops",
            "memory",
            ("used_bytes",),
            "Device memory over one iteration",
            x="start_s",
            first_of="iteration",
            ref="device_state_bytes",
        ),
        F(
            "iteration-breakdown",
            "iterations",
            "stack",
            ("stall_s", "recompute_s", "profile_s", "cpu_adam_s", "offload_tail_s"),
            "Time per iteration",
            x="iteration",
            rest=("compute", "step_s"),
        ),
    ),
    "training-parallel": (
        *ENERGY_FIGURES,
        F(
            "memory-per-stage",
            "stage_memory",
            "stack",
            MEMORY_CATEGORIES,
            "Peak memory of one rank per pipeline stage",
            x="stage",
            ref="capacity_bytes",
        ),
        F(
            "iteration-breakdown",
            "units",
            "stage_time",
            ("start_s", "end_s"),
            "Pipeline schedule per stage (one iteration)",
            x="stage",
            hue="kind",
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
        *ENERGY_FIGURES,
    ),
    "elastic": (
        *ENERGY_FIGURES,
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
        *ENERGY_FIGURES,
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
_STEP_TIME = F("step-time", "steps", "bars", ("step_s",), "Time per step", x="step",
               derive={"step_s": ("end_s", "start_s")})  # fmt: skip
FIGURES["tee-collab"] = (
    _STEP_TIME,
    F("time-split", "summary", "summary_bars",
      ("step_s", "plain_step_s", "stall_s", "reencrypt_s", "verify_s", "metadata_s",
       "crypto_s"), "Step time and its parts"),
    *ENERGY_FIGURES,
)  # fmt: skip
FIGURES["tee-nna"] = (
    F("time-split", "summary", "summary_bars",
      ("step_s", "tee_only_step_s", "tee_work_s", "nna_work_s", "metakey_s", "overhead_s"),
      "Step time and its parts"),
    *ENERGY_FIGURES,
)  # fmt: skip
FIGURES["tee-verify"] = (
    F("time-split", "summary", "summary_bars",
      ("batch_s", "enclave_batch_s", "gpu_s", "copy_s", "tee_s"), "Batch time and its parts"),
    *ENERGY_FIGURES,
)  # fmt: skip
FIGURES["offload"] = (
    F("step-time", "steps", "bars", ("step_s",), "Time per step (prefill, then decode)",
      x="step", derive={"step_s": ("end_s", "start_s")}),
    F("time-split", "summary", "summary_bars", ("ttft_s", "tbt_mean_s"),
      "Time to first token and mean time between tokens"),
    *ENERGY_FIGURES,
)  # fmt: skip
FIGURES["observability-faults"] = FIGURES["observability"]
FIGURES["collective"] = ENERGY_FIGURES
FIGURES["training-pipeline"] = ENERGY_FIGURES


GIB = 2.0**30
KIND_WORDS = {"F": "forward", "B": "backward", "W": "weight gradient"}
"""Pipeline unit kinds in words (``stage_time`` legends)."""


def _value_scale(columns: tuple[str, ...] | list[str]) -> tuple[float, str]:
    """GiB for byte columns (raw bytes read as 1e10 on an axis), else as they are."""
    if columns and all(c.endswith("_bytes") for c in columns):
        return GIB, "GiB"
    return 1.0, ""


def _words(col: str) -> str:
    """A column's label without its unit (legend entries of one shared axis)."""
    label = axis_label(col)
    return label.rsplit(" (", 1)[0] if label.endswith(")") else label


def _read_summary(folder: Path) -> dict[str, Any]:
    path = folder / "summary.csv"
    if not path.is_file():
        return {}
    frame = pd.read_csv(path)
    return {str(k): v for k, v in frame.iloc[0].items()} if len(frame) else {}


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
    if spec.draw == "summary_bars":  # the columns the summary has
        return frame if any(c in frame for c in spec.columns) and len(frame) else None
    needed = [c for c in (*spec.columns, spec.x, spec.hue) if c]
    if any(c not in frame for c in needed) or frame.empty:
        return None
    if spec.draw == "deadlines" and not np.isfinite(frame[spec.columns[1]].astype(float)).any():
        return None  # no job has a deadline: no empty panels
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
            vscale = _value_scale([col])[0]
            ax.step(part[spec.x] / scale, part[col] / vscale, where="post", lw=lw,
                    label=str(label) or None)  # fmt: skip
    for ax, col in zip(axes, spec.columns, strict=True):
        xlabel = axis_label(spec.x)
        ax.set_xlabel(xlabel.replace("(s)", f"({unit})") if timed else xlabel)
        vunit = _value_scale([col])[1]
        ax.set_ylabel(f"{_words(col)} ({vunit})" if vunit else axis_label(col))
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
        if len(labels[::step]) > 8:  # long device names would overlap
            ax.tick_params(axis="x", labelrotation=90)
        ax.set_xlabel(axis_label(spec.x))
        ax.set_ylabel(axis_label(col))
    return fig


def _stack(spec: FigureSpec, frame: pd.DataFrame) -> Any:
    fig, axes = _panels(1)
    ax = axes[0]
    cols = [c for c in spec.columns if frame[c].astype(float).abs().sum() > 0]  # drawn
    extra = [c for c in (spec.ref, spec.rest[1] if spec.rest else "") if c and c in frame]
    means = frame.groupby(spec.x, sort=True)[[*spec.columns, *extra]].mean()
    scale, unit = _value_scale(spec.columns)
    segments = [(_words(c), means[c].to_numpy(dtype=float) / scale) for c in cols]
    if spec.rest and spec.rest[1] in means:
        total = means[spec.rest[1]].to_numpy(dtype=float) / scale
        other = np.clip(total - sum((v for _, v in segments), np.zeros(len(means))), 0, None)
        segments.insert(0, (spec.rest[0], other))
    xs = np.arange(len(means))
    _stacked_bars(ax, xs, segments)
    if spec.ref and spec.ref in means:
        ax.axhline(float(means[spec.ref].max()) / scale, color="0.3", ls="--", lw=1,
                   label=_words(spec.ref))  # fmt: skip
    step = max(1, len(xs) // 16)
    ax.set_xticks(xs[::step], [str(v) for v in means.index[::step]])
    ax.set_xlabel(axis_label(spec.x))
    ax.set_ylabel(f"memory ({unit})" if unit else "time (s)")
    ax.legend(fontsize="small", frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def _stacked_bars(ax: Any, xs: np.ndarray, segments: list[tuple[str, np.ndarray]]) -> None:
    """Bars of the segments stacked bottom-up, in order, a colour each."""
    bottom = np.zeros(len(xs))
    for k, (label, values) in enumerate(segments):
        ax.bar(xs, values, bottom=bottom, label=label, color=f"C{k}", width=0.8)
        bottom += values


def _memory(spec: FigureSpec, frame: pd.DataFrame) -> Any:
    """Bytes in use over one iteration, split into what is held all along (the
    summary's ``ref``: the model states on the device) and the rest (activations and
    buffers); the peak marked."""
    fig, axes = _panels(1)
    ax = axes[0]
    part = frame.sort_values(spec.x)
    x = part[spec.x].to_numpy(dtype=float)
    x = x - x.min()  # time within the iteration
    used = part[spec.columns[0]].to_numpy(dtype=float) / GIB
    held = float(frame.attrs.get("summary", {}).get(spec.ref, np.nan)) / GIB
    if np.isfinite(held) and 0 < held <= used.min():
        ax.fill_between(x, 0, held, step="post", color="C0", alpha=0.8,
                        label=f"model states ({held:.1f} GiB)")  # fmt: skip
        ax.fill_between(x, held, used, step="post", color="C1", alpha=0.8,
                        label="activations and buffers")  # fmt: skip
    else:
        ax.fill_between(x, 0, used, step="post", color="C1", alpha=0.8, label="in use")
    k = int(np.argmax(used))
    ax.plot([x[k]], [used[k]], "v", color="0.2", ms=5,
            label=f"peak {used[k]:.1f} GiB")  # fmt: skip
    ax.set_xlim(x.min(), x.max())
    ax.set_ylim(0, used.max() * 1.08)
    ax.set_xlabel("time within the iteration (s)")
    ax.set_ylabel("memory in use (GiB)")
    ax.legend(fontsize="small", frameon=False, loc="upper left")
    return fig


def _stage_time(spec: FigureSpec, frame: pd.DataFrame) -> Any:
    """Per stage: time in units of each kind and idle time (the pipeline bubble) over
    the schedule's span (first start to last end over all stages)."""
    fig, axes = _panels(1)
    ax = axes[0]
    a, b = spec.columns[:2]
    dur = frame[b].astype(float) - frame[a].astype(float)
    busy = dur.groupby([frame[spec.x], frame[spec.hue]]).sum().unstack(fill_value=0)
    span = float(frame[b].max() - frame[a].min())
    kinds = [k for k in ("F", "B", "W") if k in busy.columns]
    kinds += [k for k in busy.columns if k not in kinds]
    segments = [(KIND_WORDS.get(str(k), str(k)), busy[k].to_numpy(dtype=float)) for k in kinds]
    idle = span - busy.sum(axis=1).to_numpy(dtype=float)
    segments.append(("idle (bubble)", np.clip(idle, 0, None)))
    xs = np.arange(len(busy))
    _stacked_bars(ax, xs, segments)
    step = max(1, len(xs) // 16)
    ax.set_xticks(xs[::step], [str(v) for v in busy.index[::step]])
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel("time (s)")
    ax.set_title(f"schedule span {span:.3g} s; idle share {idle.sum() / (span * len(xs)):.1%}",
                 fontsize="small")  # fmt: skip
    ax.legend(fontsize="small", frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def _deadlines(spec: FigureSpec, frame: pd.DataFrame) -> Any:
    """Deadline satisfaction of the finished deadline jobs: the share met per job size,
    and the CDF of (finish - submit) / (deadline - submit) (<= 1: met)."""
    fig, axes = _panels(2)
    end, deadline, met, submit = spec.columns[:4]
    dl = frame[np.isfinite(frame[deadline].astype(float))]
    by = dl.groupby(spec.x, sort=True)[met].agg(["mean", "count"])
    xs = np.arange(len(by))
    ax = axes[0]
    ax.bar(xs, by["mean"].to_numpy(dtype=float), color="C0", width=0.7)
    for x, (share, n) in zip(xs, by.itertuples(index=False), strict=True):
        ax.text(x, share + 0.02, f"n={n}", ha="center", fontsize="x-small")
    ax.set_xticks(xs, [str(v) for v in by.index])
    ax.set_xlabel("GPUs per job" if spec.x == "gpus" else axis_label(spec.x))
    ax.set_ylabel("deadlines met (fraction)")
    ax.set_ylim(0, 1.1)
    ax = axes[1]
    allowed = (dl[deadline] - dl[submit]).to_numpy(dtype=float)
    used = (dl[end] - dl[submit]).to_numpy(dtype=float)
    ratio = np.sort(used[allowed > 0] / allowed[allowed > 0])
    ax.step(ratio, np.arange(1, len(ratio) + 1) / max(len(ratio), 1), where="post")
    ax.axvline(1.0, color="0.5", lw=0.8, ls="--")
    _log_if_wide(ax, ratio)
    ax.set_xlabel("time to finish / time to deadline")
    ax.set_ylabel("fraction of deadline jobs")
    ax.set_ylim(0, 1.01)
    summary = frame.attrs.get("summary", {})
    dsr = summary.get("dsr", float(dl[met].mean()) if len(dl) else float("nan"))
    jobs = summary.get("deadline_jobs", len(dl))
    text = f"DSR {float(dsr):.3f}\n{int(jobs)} deadline jobs\n{len(dl)} finished"
    ax.text(0.97, 0.05, text, transform=ax.transAxes, va="bottom", ha="right",
            fontsize="small")  # fmt: skip
    return fig


def _summary_bars(spec: FigureSpec, frame: pd.DataFrame) -> Any:
    """One horizontal bar per summary metric of ``columns`` the run has (seconds)."""
    cols = [c for c in spec.columns if c in frame and np.isfinite(float(frame[c].iloc[0]))]
    fig, axes = _panels(1)
    values = np.array([float(frame[c].iloc[0]) for c in cols])
    scale, unit = _time_scale(values)
    ax = axes[0]
    ax.barh(range(len(cols)), values / scale, color="C0")
    ax.set_yticks(range(len(cols)), [_words(c) for c in cols])
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    return fig


def _occupancy(spec: FigureSpec, frame: pd.DataFrame) -> Any:
    fig, axes = _panels(1)
    ax = axes[0]
    pairs = list(zip(spec.columns[::2], spec.columns[1::2], strict=True))
    names = ("in the system",) if len(pairs) == 1 else ("queued", "running")
    if spec.hue:  # one line per hue value of the (single) pair
        groups = [(str(k), part) for k, part in frame.groupby(spec.hue, sort=True)]
        lines = [(pairs[0], label, part) for label, part in groups]
    else:
        lines = [(pair, name, frame) for pair, name in zip(pairs, names, strict=True)]
    unit = "s"
    for (a, b), name, part in lines:
        start = part[a].to_numpy(dtype=float)
        end = part[b].to_numpy(dtype=float)
        end = np.where(np.isfinite(end), end, np.nanmax(end) if np.isfinite(end).any() else 0)
        times = np.concatenate([start, end])
        steps = np.concatenate([np.ones(len(start)), -np.ones(len(end))])
        order = np.lexsort((-steps, times))  # an arrival before a departure at one instant
        scale, unit = _time_scale(frame[[a, b]].to_numpy(dtype=float).ravel())
        ax.step(times[order] / scale, np.cumsum(steps[order]), where="post", label=name)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("count")
    if len(lines) > 1:
        ax.legend(title=axis_label(spec.hue) if spec.hue else None, fontsize="small",
                  frameon=False)  # fmt: skip
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
    "occupancy": _occupancy, "spans": _spans, "memory": _memory, "stage_time": _stage_time,
    "deadlines": _deadlines, "summary_bars": _summary_bars,
}  # fmt: skip


def write_figures(
    result_dir: str | Path, out_dir: str | Path | None = None, *, force: bool = False
) -> list[Path]:
    """Draw the standard figures of the run in ``result_dir`` into ``out_dir`` (default
    ``result_dir/figures``), each as PNG and SVG; returns the files.

    Inside a result folder hetsim made, each figure is written atomically through real
    folders only (a symbolic link on the way is refused) and listed in the result
    folder's marker, with its hash, as it lands; an existing file there that hetsim did
    not write is refused. Anywhere else, ``out_dir`` follows the rules of ``run --out``
    (:func:`simulator.outdir.output_dir`: new, empty or a hetsim plot folder; ``force``:
    beside the user's files, never over one).
    """
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "svg", "pdf"):
        matplotlib.use("Agg")  # files only: no window
    folder = Path(result_dir)
    scenario_file = folder / "scenario.yaml"
    if not scenario_file.is_file():
        raise ScenarioError(str(folder), "", "not a hetsim result folder (no scenario.yaml)")
    scenario = yaml.safe_load(scenario_file.read_text(encoding="utf-8")) or {}
    target = Path(out_dir) if out_dir is not None else folder / "figures"
    rel_dir = _inside(folder, target)
    if rel_dir is not None:
        return [write_owned(folder, f"{rel_dir}/{name}", draw)
                for name, draw in _figures(folder, scenario)]  # fmt: skip
    check_output_dir(target, "plot", force=force)  # before drawing anything
    with output_dir(target, "plot", force=force) as tmp:
        names = []
        for name, draw in _figures(folder, scenario):
            draw(tmp / name)
            names.append(name)
    return [target / n for n in names]


def _inside(result_dir: Path, target: Path) -> str | None:
    """``target`` relative to ``result_dir`` when it lies inside it (lexically, no
    ``..``) and hetsim made ``result_dir``; else None."""
    if not target.is_relative_to(result_dir) or read_marker(result_dir) is None:
        return None
    rel = target.relative_to(result_dir).as_posix()
    return rel if rel != "." and safe_rel(rel) else None


def _figures(
    folder: Path, scenario: dict[str, Any]
) -> Iterator[tuple[str, Callable[[Path], None]]]:
    """(file name, writer) of each standard figure of the run in ``folder``, drawn one
    at a time (each writer saves its figure in one format)."""
    import matplotlib.pyplot as plt

    kind = str((scenario.get("workload") or {}).get("kind", ""))
    if not kind and scenario.get("workloads"):
        kind = "colocate"  # several workloads on one cluster
    name = str(scenario.get("name", folder.name))
    summary = _read_summary(folder)
    for spec in FIGURES.get(kind, ()):
        raw = (
            pd.DataFrame([summary]) if spec.table == "summary" else _read_table(folder, spec.table)
        )
        frame = _prepare(spec, raw) if raw is not None else None
        if frame is None:
            continue
        frame.attrs["summary"] = summary
        fig = DRAW[spec.draw](spec, frame)
        fig.suptitle(f"{name}: {spec.title}", fontsize="medium")
        try:
            for fmt in FORMATS:
                yield f"{spec.name}.{fmt}", partial(_save, fig, fmt)
        finally:
            plt.close(fig)


def _save(fig: Any, fmt: str, path: Path) -> None:
    fig.savefig(path, format=fmt, dpi=DPI, metadata=_metadata(fmt))


def _metadata(fmt: str) -> dict[str, Any]:
    """No creation date in the files, so the same run gives the same bytes."""
    return {"Date": None} if fmt == "svg" else {"Software": None}
