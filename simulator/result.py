"""The outcome of one run: the resolved scenario, a one-row summary, tables, spans."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml

from hetsim.simulator.atomic import atomic_write_text
from hetsim.simulator.csv_out import csv_text
from hetsim.simulator.outdir import TRACE_GENERATOR, check_trace_target, content_key, output_dir
from hetsim.simulator.recorder import Recorder
from hetsim.simulator.trace import trace_json

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Result:
    """What a run produced. ``summary`` is one row; ``tables`` are tidy DataFrames."""

    scenario: dict[str, Any]
    summary_row: dict[str, Any]
    recorder: Recorder
    metrics: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0
    #: one-line warnings about reading the figures (overload, mixed price providers)
    warnings: list[str] = field(default_factory=list)
    #: several rows (a multi-workload run: one per workload and the cluster's); None:
    #: the one ``summary_row``
    rows: list[dict[str, Any]] | None = None

    @cached_property
    def tables(self) -> dict[str, pd.DataFrame]:
        """Every recorded table as a DataFrame, by name (built on first access)."""
        return self.recorder.tables()

    @property
    def summary(self) -> pd.DataFrame:
        """The summary metrics as a one-row DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.rows if self.rows is not None else [self.summary_row])

    @property
    def spans(self) -> pd.DataFrame:
        """Timeline spans (start_s, end_s, track, name)."""
        return self.recorder.spans_frame()

    def __getitem__(self, metric: str) -> Any:
        return self.summary_row[metric]

    def to_dir(
        self, path: str | Path, fmt: Literal["csv", "parquet"] = "csv", *, force: bool = False
    ) -> Path:
        """Write summary, tables, the resolved scenario and metric definitions atomically.

        Layout: ``summary.<fmt>``, ``tables/<name>.<fmt>``, ``scenario.yaml``,
        ``metrics.json`` and the marker ``.hetsim.json``. ``path`` must be absent, empty
        or an earlier hetsim run's folder (``force``: any folder; files hetsim did not
        write are kept and never overwritten), see :mod:`simulator.outdir`.
        """
        run_key = content_key(self.scenario)
        with output_dir(path, "run", force=force, run_key=run_key) as tmp:
            columns, data = self._summary_columns()
            self._write(tmp / f"summary.{fmt}", fmt, columns, data, lambda: self.summary)
            (tmp / "tables").mkdir()
            for name, tbl in self.recorder.raw_tables().items():
                self._write(tmp / "tables" / f"{name}.{fmt}", fmt, tbl.columns,
                            tbl.column_lists(), lambda t=tbl: t.to_frame())  # fmt: skip
            (tmp / "scenario.yaml").write_text(yaml.safe_dump(self.scenario, sort_keys=False))
            (tmp / "metrics.json").write_text(json.dumps(self.metrics, indent=2))
        return Path(path)

    def _summary_columns(self) -> tuple[list[str], list[list[Any]]]:
        """Columns and their values of the summary file (one row, or :attr:`rows`)."""
        if self.rows is None:
            row = self.summary_row
            return list(row), [[v] for v in row.values()]
        columns: list[str] = []
        for r in self.rows:
            columns += [k for k in r if k not in columns]
        return columns, [[r.get(c) for r in self.rows] for c in columns]

    @staticmethod
    def _write(path: Path, fmt: str, columns: Any, data: list[list[Any]], frame: Any) -> None:
        """CSV straight from the columns (:mod:`simulator.csv_out`), else via pandas."""
        text = csv_text(columns, data) if fmt == "csv" else None
        if text is None:
            write_frame(frame(), path, fmt)
        else:
            path.write_text(text)

    def trace(self, path: str | Path) -> Path:
        """Write the Chrome trace JSON (Perfetto: ui.perfetto.dev, Open trace file).

        An existing ``path`` is replaced only if it is a trace hetsim wrote.
        """
        check_trace_target(path)
        atomic_write_text(path, trace_json(self.recorder, generator=TRACE_GENERATOR), "--trace")
        return Path(path)


def write_frame(frame: pd.DataFrame, path: Path, fmt: str) -> None:
    """Write one DataFrame as CSV (full float precision) or Parquet."""
    if fmt == "parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False, float_format="%.17g")
