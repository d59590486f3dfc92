"""Readers for the cluster domain's data: inventories, job traces, speed and stage tables.

A bad row raises ``ValueError('FILE:LINE: column C: ...')`` or, when the scenario asks
(``skip_bad_rows: true``), is skipped and counted (a warning says how many).
"""

from __future__ import annotations

import csv
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from hetsim.simulator.errors import TraceError

#: stage names of the iteration model (Muri's traces merge storage IO and CPU into "data")
STAGES = ("data", "gpu", "net")
ALIBABA_MODEL = "alibaba-task"


class RowError(TraceError):
    """One bad trace row: file, line and column named in the message."""


@dataclass(frozen=True)
class RawJobs:
    """Jobs as read from a source, before speeds and deadlines are attached."""

    submit_s: np.ndarray  # (n,) float
    gpus: np.ndarray  # (n,) int
    model: tuple[str, ...]  # (n,)
    iterations: np.ndarray  # (n,) int
    stages_s: np.ndarray  # (n, len(STAGES)) per-iteration stage times on the reference type
    allowed: tuple[frozenset[str] | None, ...]  # GPU types a job may use (None: any)
    skipped_rows: int = 0
    iter_s: np.ndarray | None = None  # (n,) measured solo iteration time (s), if the source has it


def csv_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) for every data row of a CSV file with a header."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        for row in reader:
            yield reader.line_num, row


MAX_CELL = 1e15
"""Largest number a trace cell may hold: past it, job arithmetic overflows int64 and
times pass the engine's 10^12-s clock limit (a Philly run time of 1e30 s ran as a
negative duration)."""


def number(path: Path, line: int, row: dict[str, str], column: str, low: float = 0.0) -> float:
    """``row[column]`` as a finite float in [``low``, :data:`MAX_CELL`] (RowError otherwise)."""
    text = row.get(column)
    if text is None:
        raise RowError(path, line, column, "missing")
    try:
        value = float(text)
    except ValueError:
        raise RowError(path, line, column, f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < low:
        raise RowError(path, line, column, f"must be >= {low:g}, got {text!r}")
    if value > MAX_CELL:
        raise RowError(path, line, column, f"must be <= {MAX_CELL:g}, got {text!r}")
    return value


def read_rows(
    path: Path, parse: Callable[[int, dict[str, str]], Any], skip_bad: bool, limit: int | None
) -> tuple[list[Any], int]:
    """Parsed rows (``parse`` returns None to drop a row silently) and the bad-row count."""
    out: list[Any] = []
    bad = 0
    for line, row in csv_rows(path):
        if limit is not None and len(out) >= limit:
            break
        try:
            item = parse(line, row)
        except RowError:
            if not skip_bad:
                raise
            bad += 1
            continue
        if item is not None:
            out.append(item)
    if bad:
        warnings.warn(f"{path}: skipped {bad} bad rows", stacklevel=2)
    return out, bad


def read_muri_trace(
    path: Path, known_models: set[str], skip_bad: bool, limit: int | None, at_zero: bool
) -> RawJobs:
    """Muri's trace format (times in ms; ../shared/data/muri-traces/SOURCE.md)."""

    def parse(line: int, row: dict[str, str]) -> tuple[Any, ...]:
        model = row.get("model_name", "")
        if model not in known_models:
            raise RowError(path, line, "model_name", f"unknown model {model!r}")
        gpus = number(path, line, row, "num_gpu", 1)
        stages = [number(path, line, row, f"resource_time_{i}") / 1e3 for i in range(3)]
        if sum(stages) <= 0:
            raise RowError(path, line, "resource_time_0", "all stage times are zero")
        submit = number(path, line, row, "submit_time") / 1e3
        number(path, line, row, "duration")
        iters = number(path, line, row, "iterations", 1)
        it = number(path, line, row, "iteration_time") / 1e3 if row.get("iteration_time") else 0.0
        return (0.0 if at_zero else submit, int(gpus), model, int(iters), stages, None, it)

    rows, bad = read_rows(path, parse, skip_bad, limit)
    rows.sort(key=lambda r: r[0])  # as _raw sorts (stable), so the iteration times line up
    it = np.array([r[6] for r in rows], dtype=float)
    return replace(_raw(rows, bad, path), iter_s=np.where(it > 0, it, np.nan))


def read_alibaba_tasks(
    path: Path, gpu_types: set[str], skip_bad: bool, limit: int | None
) -> RawJobs:
    """GPU tasks of cluster-trace-gpu-v2023: one 1-s 'gpu' iteration per second of lifetime.

    CPU-only tasks (num_gpu 0) and never-scheduled (Pending) tasks have no GPU lifetime
    and are dropped without counting as bad; a fractional GPU (gpu_milli < 1000) is run
    on a whole GPU (simplification: no GPU sharing below one device).
    """

    def parse(line: int, row: dict[str, str]) -> tuple[Any, ...] | None:
        gpus = number(path, line, row, "num_gpu")
        if gpus == 0 or not row.get("scheduled_time"):
            return None
        start = number(path, line, row, "scheduled_time")
        end = number(path, line, row, "deletion_time")
        if end - start <= 0:
            raise RowError(path, line, "deletion_time", "negative or zero duration")
        spec = frozenset(t for t in (row.get("gpu_spec") or "").split("|") if t)
        unknown = sorted(spec - gpu_types)
        if unknown:
            raise RowError(path, line, "gpu_spec", f"unknown GPU type(s) {unknown}")
        submit = number(path, line, row, "creation_time")
        iters = max(1, round(end - start))
        return (submit, int(gpus), ALIBABA_MODEL, iters, [0.0, 1.0, 0.0], spec or None)

    rows, bad = read_rows(path, parse, skip_bad, limit)
    return _raw(rows, bad, path)


def _raw(rows: list[tuple[Any, ...]], bad: int, path: Path) -> RawJobs:
    if not rows:
        raise ValueError(f"{path}: no usable jobs")
    rows.sort(key=lambda r: r[0])  # stable: trace order among equal submit times
    return RawJobs(
        submit_s=np.array([r[0] for r in rows], dtype=float),
        gpus=np.array([r[1] for r in rows], dtype=np.int64),
        model=tuple(r[2] for r in rows),
        iterations=np.array([r[3] for r in rows], dtype=np.int64),
        stages_s=np.array([r[4] for r in rows], dtype=float),
        allowed=tuple(r[5] for r in rows),
        skipped_rows=bad,
    )


def read_alibaba_nodes(path: Path) -> list[tuple[str, int]]:
    """(GPU type, GPUs) of every GPU node of the Alibaba 2023 node list."""
    out = []
    for line, row in csv_rows(path):
        gpus = int(number(path, line, row, "gpu"))
        model = row.get("model") or ""
        if gpus > 0:
            if not model:
                raise RowError(path, line, "model", "GPU node without a GPU type")
            out.append((model, gpus))
    if not out:
        raise ValueError(f"{path}: no GPU nodes")
    return out


def read_speed_table(path: Path) -> dict[str, dict[str, float]]:
    """Gavel job type -> GPU type -> isolated steps/s (a CSV with one column per type)."""
    table: dict[str, dict[str, float]] = {}
    for line, row in csv_rows(path):
        name = row.pop("gavel_job_type", None)
        if not name:
            raise RowError(path, line, "gavel_job_type", "missing")
        table[name] = {t: number(path, line, row, t) for t in row}
    return table


def read_stage_profiles(path: Path) -> dict[tuple[str, int], tuple[float, float, float]]:
    """(model, GPUs) -> per-iteration (data, gpu, net) seconds from Muri's traces."""
    out = {}
    for line, row in csv_rows(path):
        key = (row.get("model", ""), int(number(path, line, row, "num_gpu", 1)))
        stages = tuple(number(path, line, row, c) / 1e3 for c in ("data_ms", "gpu_ms", "net_ms"))
        if sum(stages) <= 0:
            raise RowError(path, line, "data_ms", "all stage times are zero")
        out[key] = stages
    return out  # type: ignore[return-value]


def read_runtimes(path: Path, skip_bad: bool, low_s: float) -> tuple[np.ndarray, int]:
    """Job run times (s) of a one-column ``runtime`` file (Philly's runtime derivative,
    ../shared/data/philly/SOURCE.md) and the bad-row count; rows below ``low_s`` (jobs
    that never ran: 0 s) are dropped without counting as bad."""

    def parse(line: int, row: dict[str, str]) -> float | None:
        value = number(path, line, row, "runtime")
        return value if value >= low_s else None

    rows, bad = read_rows(path, parse, skip_bad, None)
    if not rows:
        raise ValueError(f"{path}: no run times >= {low_s:g} s")
    return np.array(rows, dtype=float), bad


@dataclass(frozen=True)
class HeliosStats:
    """One cluster's GPU-job statistics from Helios' ``helios_cluster_summary.csv``."""

    gpu_jobs: int
    mean_run_s: float
    median_run_s: float
    mean_gpus: float
    median_gpus: float


def read_helios_summary(path: Path, cluster: str, skip_bad: bool) -> tuple[HeliosStats, int]:
    """The ``id == cluster`` row of Helios' cluster summary (GPU-job columns) and the
    count of bad rows skipped (other clusters' rows are parsed too, so errors surface)."""
    cols = ("gpu_job_num", "avg_run_time_gpu", "med_run_time_gpu", "avg_gpu_num", "med_gpu_num")

    def parse(line: int, row: dict[str, str]) -> tuple[str, HeliosStats]:
        v = [number(path, line, row, c) for c in cols]
        if v[0] < 1:
            raise RowError(path, line, "gpu_job_num", "no GPU jobs")
        if v[2] <= 0 or v[1] < v[2]:
            raise RowError(path, line, "avg_run_time_gpu", "needs mean >= median > 0")
        if v[4] < 1 or v[3] < v[4]:
            raise RowError(path, line, "avg_gpu_num", "needs mean >= median >= 1")
        return row.get("id", ""), HeliosStats(int(v[0]), v[1], v[2], v[3], v[4])

    rows, bad = read_rows(path, parse, skip_bad, None)
    found = dict(rows)
    if cluster not in found:
        raise ValueError(f"{path}: no cluster {cluster!r} (ids: {sorted(found)})")
    return found[cluster], bad
