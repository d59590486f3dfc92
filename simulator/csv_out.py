"""A run's CSV files written from the recorder's columns, without building DataFrames.

The cells are exactly what ``pandas.DataFrame.to_csv(index=False, float_format="%.17g")``
writes for the same columns, so a run's files do not depend on which writer made them
(importing pandas is about a third of a short run's start-up). pandas' dtype inference is
followed for the simple cases: a column of ints is int64; ints, floats and ``None`` mixed
are float64 (``None`` and NaN written empty, every number ``%.17g``); bools (with ``None``:
object) and strings (with ``None``) are written as ``str`` with ``None`` empty. Any other
column (floats mixed with text, containers, other objects) returns ``None`` from
:func:`column_cells`, and the caller writes that file with pandas.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

import numpy as np


def _kind(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool | np.bool_):
        return "bool"
    if isinstance(v, int | np.integer):
        return "int"
    if isinstance(v, float | np.floating):
        return "float"
    if isinstance(v, str):
        return "str"
    return "other"


_KIND_OF_TYPE: dict[type, str] = {}


def _kinds(values: Sequence[Any]) -> set[str]:
    """``{_kind(v) for v in values}``, one :func:`_kind` per distinct type (a kind is a
    function of the type: the checks are ``isinstance``)."""
    out = set()
    for t in set(map(type, values)):
        k = _KIND_OF_TYPE.get(t)
        if k is None:
            k = _KIND_OF_TYPE[t] = _kind(next(v for v in values if type(v) is t))
        out.add(k)
    return out


def _float_cell(v: Any) -> str:
    if v is None:
        return ""
    x = float(v)
    return "" if x != x else f"{x:.17g}"


def column_cells(values: Sequence[Any]) -> list[str] | None:
    """The cells of one column as pandas writes them, or ``None`` (module doc)."""
    kinds = _kinds(values)
    if "other" in kinds:
        return None
    if kinds == {"int"}:
        return [str(int(v)) for v in values]
    if kinds and kinds <= {"int", "float", "none"} and kinds & {"int", "float"}:
        return [_float_cell(v) for v in values]
    if kinds <= {"bool", "none"} or kinds <= {"str", "none"}:
        return ["" if v is None else str(v) for v in values]
    return None


def csv_text(columns: Sequence[str], data: Sequence[Sequence[Any]]) -> str | None:
    """The whole file (header, then one line per row), or ``None`` if a column is not a
    simple case."""
    cells = []
    for values in data:
        c = column_cells(values)
        if c is None:
            return None
        cells.append(c)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    w.writerow(columns)
    w.writerows(zip(*cells, strict=True))
    return buf.getvalue()
