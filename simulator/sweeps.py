"""Sweeps: a scenario's ``sweep:`` grid run point by point on worker processes.

Each point is the scenario with its dotted paths overridden; the result is one row per
point holding every swept value beside every summary metric, in grid order whatever
the number of workers (so a parallel sweep equals a serial one).
"""

from __future__ import annotations

import itertools
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from simulator.runner import as_scenario, simulate
from simulator.scenario import Scenario


def grid(sweep: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the swept values, first key varying slowest ([] if none)."""
    if not sweep:
        return []
    keys = list(sweep)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*sweep.values())]


def _run_point(scenario: Scenario, point: dict[str, Any]) -> dict[str, Any]:
    result = simulate(scenario.with_overrides(point))
    row = {k: _cell(v) for k, v in point.items()}
    row.update(result.summary_row)
    return row


def _cell(value: Any) -> Any:
    """A swept value as a table cell (dicts and lists become their repr)."""
    return value if isinstance(value, str | int | float | bool) else repr(value)


def sweep(
    scenario: Scenario | str | Path,
    *,
    workers: int = 1,
    progress: bool = False,
    overrides: dict[str, Any] | None = None,
) -> pd.DataFrame:
    """Run every point of the scenario's ``sweep:`` grid; one row per point."""
    sc = as_scenario(scenario, overrides)
    points = grid(sc.sweep) or [{}]
    for point in points:  # validate every point before running any
        sc.with_overrides(point)
    bar = _bar(len(points)) if progress else None
    rows: list[dict[str, Any]]
    if workers <= 1:
        rows = []
        for point in points:
            rows.append(_run_point(sc, point))
            if bar is not None:
                bar.update()
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_run_point, sc, p) for p in points]
            rows = []
            for fut in futures:
                rows.append(fut.result())
                if bar is not None:
                    bar.update()
    if bar is not None:
        bar.close()
    return pd.DataFrame(rows)


def _bar(total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="run", file=sys.stderr)
