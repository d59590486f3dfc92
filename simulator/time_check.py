"""No negative or infinite time: a check over everything a run recorded.

Every span and counter sample, every table column whose name says it holds a time or a
duration (:func:`is_time_name`), and every such summary metric must be finite and
``>= 0``. A table cell may be NaN (a value the run did not reach: a request still
running when ``until_s`` ended it), never infinite or negative. Columns that hold a
signed difference of times (a slack, an estimation error) are named in
:data:`SIGNED_TIME_COLUMNS` and only need to be finite or NaN; those where +inf means
"none" (no deadline) in :data:`NO_LIMIT_COLUMNS`. A violation is a bug of
the simulator, raised as :class:`~simulator.engine.InvariantViolation` in one line
naming the table, row and column.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from hetsim.simulator.engine import InvariantViolation
from hetsim.simulator.recorder import Recorder

TIME_SUFFIXES = ("_s", "_ms", "_us", "_h")
TIME_WORDS = ("duration", "time", "delay")
SIGNED_TIME_COLUMNS = frozenset({
    "slack_s",  # deadline minus finish time
    "error_s",  # estimate minus truth
})  # fmt: skip
"""Time-named columns that hold a signed difference (finite, any sign)."""
NO_LIMIT_COLUMNS = frozenset({
    "deadline_s",  # +inf: the job has no deadline
    "fail_slow.end_s",  # +inf: a persistent fail-slow fault never ends
})  # fmt: skip
"""Time-named columns (``column`` in any table, or ``table.column``) where +inf means
"none" (still never negative or -inf)."""


def is_time_name(name: str) -> bool:
    """Whether a column or metric ``name`` says it holds a time or a duration (not a
    rate: ``*_per_s``)."""
    low = name.lower()
    if re.search(r"_per_[a-z]+$", low):
        return False
    return low.endswith(TIME_SUFFIXES) or any(w in low for w in TIME_WORDS)


def _first_bad(values: np.ndarray, table: str, column: str) -> int | None:
    """Index of the first value of ``column`` that is infinite (+inf allowed in
    :data:`NO_LIMIT_COLUMNS`), or negative (allowed in :data:`SIGNED_TIME_COLUMNS`)."""
    no_limit = column in NO_LIMIT_COLUMNS or f"{table}.{column}" in NO_LIMIT_COLUMNS
    bad = np.isneginf(values) if no_limit else np.isinf(values)
    if column not in SIGNED_TIME_COLUMNS:
        bad |= values < 0
    return int(np.argmax(bad)) if bad.any() else None


def _numeric(column: np.ndarray) -> np.ndarray | None:
    if column.dtype.kind in "iuf":
        return column.astype(float, copy=False)
    if column.dtype.kind == "b":
        return None
    if column.dtype.kind == "O" and len(column):  # None marks a missing value
        try:
            return np.array([np.nan if v is None else float(v) for v in column])
        except (TypeError, ValueError):
            return None
    return None


def check_times(recorder: Recorder, summary: Mapping[str, Any]) -> None:
    """Raise :class:`InvariantViolation` at the first negative or non-finite time in
    ``recorder``'s spans, counters and time-named table columns, or in a time-named
    summary metric."""
    s = recorder.spans
    for what, values in (("start_s", s.start_s), ("end_s", s.end_s),
                         ("counter time_s", s.counter_time_s)):  # fmt: skip
        if not values:
            continue
        arr = np.asarray(values, dtype=float)
        bad = ~np.isfinite(arr) | (arr < 0)
        if bad.any():
            i = int(np.argmax(bad))
            track = (s.counter_track if what.startswith("counter") else s.track)[i]
            raise InvariantViolation(
                f"spans, row {i} (track {track!r}), column {what}: {float(arr[i])!r} is not a "
                "finite time >= 0"
            )
    for name, table in recorder._tables.items():
        if not len(table):
            continue
        for column in table.columns:
            if not is_time_name(column):
                continue
            cells = _numeric(table.column(column))
            if cells is None:
                continue
            row = _first_bad(cells, name, column)
            if row is not None:
                raise InvariantViolation(
                    f"table {name!r}, row {row}, column {column!r}: {float(cells[row])!r} is not a "
                    "finite time >= 0"
                )
    for key, value in summary.items():
        if not is_time_name(key) or isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int | float | np.integer | np.floating) and (
            math.isinf(value) or value < 0
        ):
            raise InvariantViolation(
                f"summary, column {key!r}: {float(value)!r} is not a finite time >= 0"
            )
