"""Run CSVs written without pandas are byte-identical to pandas' (simulator/csv_out.py)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from hetsim.simulator.csv_out import csv_text

COLUMNS: dict[str, list[Any]] = {
    "ints": [1, np.int64(-7), 2**53 + 1],
    "floats": [0.1, -0.0, 1e300],
    "int_float_none": [3, 2.5, None],
    "nan_inf": [math.nan, math.inf, -math.inf],
    "np_floats": [np.float64(1 / 3), np.float32(0.5), 7.0],
    "bools": [True, np.bool_(False), True],
    "bools_none": [True, None, False],
    "text": ["a,b", 'say "hi"', "line\nbreak"],
    "text_none": [None, "", "x"],
    "nones": [None, None, None],
}


def _pandas(columns: list[str], data: list[list[Any]]) -> str:
    frame = pd.DataFrame({c: v for c, v in zip(columns, data, strict=True)})
    return frame.to_csv(index=False, float_format="%.17g")


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_each_simple_column_kind_matches_pandas(name: str) -> None:
    assert csv_text([name], [COLUMNS[name]]) == _pandas([name], [COLUMNS[name]])


def test_a_whole_table_a_summary_row_and_an_empty_table_match_pandas() -> None:
    cols = sorted(COLUMNS)
    assert csv_text(cols, [COLUMNS[c] for c in cols]) == _pandas(cols, [COLUMNS[c] for c in cols])
    row = {"requests": 5, "ttft_p50_s": 0.123, "policy": "least-loaded", "ok": True, "x": None}
    expected = pd.DataFrame([row]).to_csv(index=False, float_format="%.17g")
    assert csv_text(list(row), [[v] for v in row.values()]) == expected
    assert csv_text(["a", "b"], [[], []]) == _pandas(["a", "b"], [[], []])


def test_columns_pandas_would_store_as_mixed_objects_are_left_to_pandas() -> None:
    assert csv_text(["m"], [[0.1, "text"]]) is None
    assert csv_text(["d"], [[{"k": 1}]]) is None
