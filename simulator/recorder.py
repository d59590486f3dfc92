"""The recorder: named tables appended column by column, spans and counters for timelines.

Tables are the simulation's tidy output (one row per request, per copy, per job...).
Appending is a handful of ``list.append`` calls, cheap enough for hot paths; pandas is
only touched when the run ends. Spans (start, end, track, name, args), counters
(time, track, value) and flow points (id, phase, track, time) feed the Chrome trace;
each track belongs to a group (a node, or ``links``/``memory``) so the trace shows one
row per device, link and memory pool, and a flow draws an arrow from one span to another
(a request's prefill to its KV transfer to its decode).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pandas loads when a run's tables are built, not at import
    import pandas as pd


class Table:
    """A table whose rows are appended one at a time.

    Rows are stored back to back in one flat list (appending a row is one
    ``list.extend``); column ``k`` is the slice ``flat[k::width]``, taken when the run
    reads the table."""

    __slots__ = ("_flat", "_width", "columns", "name")

    def __init__(self, name: str, columns: Sequence[str]) -> None:
        if len(set(columns)) != len(columns):
            raise ValueError(f"table {name!r}: duplicate column names in {list(columns)}")
        self.name = name
        self.columns = tuple(columns)
        self._width = len(self.columns)
        self._flat: list[Any] = []

    def append(self, *values: Any) -> None:
        """Append one row, values in column order."""
        if len(values) != self._width:
            raise ValueError(
                f"table {self.name!r}: got {len(values)} values for columns {self.columns}"
            )
        self._flat.extend(values)

    def row_sink(self) -> Callable[[tuple[Any, ...]], None]:
        """The hot-path form of :meth:`append`: a callable taking one row as a tuple of
        exactly ``len(columns)`` values in column order, unchecked (for fixed code whose
        rows have the table's shape; the width is not verified per row)."""
        return self._flat.extend

    def add(self, **values: Any) -> None:
        """Append one row given by column name (slower than :meth:`append`)."""
        missing = set(self.columns) ^ set(values)
        if missing:
            raise ValueError(f"table {self.name!r}: columns do not match: {sorted(missing)}")
        self.append(*(values[c] for c in self.columns))

    def __len__(self) -> int:
        return len(self._flat) // self._width if self._width else 0

    def _values(self, k: int) -> list[Any]:
        return self._flat[k :: self._width]

    def column_lists(self) -> list[list[Any]]:
        """Every column as a list, in column order."""
        return [self._values(k) for k in range(self._width)]

    def column(self, name: str) -> np.ndarray:
        """One column as a numpy array (no DataFrame built)."""
        return np.asarray(self._values(self.columns.index(name)))

    def to_frame(self) -> pd.DataFrame:
        """The table as a DataFrame (columns in declaration order)."""
        import pandas as pd

        return pd.DataFrame({c: self._values(k) for k, c in enumerate(self.columns)})


@dataclass(frozen=True)
class Track:
    """One timeline row of the trace: a device, a link, a memory pool..."""

    name: str
    group: str
    kind: str


@dataclass
class Spans:
    """Spans and counter samples, stored column-wise."""

    start_s: list[float] = field(default_factory=list)
    end_s: list[float] = field(default_factory=list)
    track: list[str] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    args: list[dict[str, Any] | None] = field(default_factory=list)
    counter_time_s: list[float] = field(default_factory=list)
    counter_track: list[str] = field(default_factory=list)
    counter_value: list[float] = field(default_factory=list)
    flow_id: list[int] = field(default_factory=list)
    flow_phase: list[str] = field(default_factory=list)
    flow_track: list[str] = field(default_factory=list)
    flow_time_s: list[float] = field(default_factory=list)
    flow_name: list[str] = field(default_factory=list)


FLOW_PHASES = ("s", "f")
"""Flow point phases: ``s`` leaves the span of its track that ends at its time, ``f``
enters the span of its track that starts at its time (Chrome trace flow phases)."""


class Recorder:
    """Owns every table, track, span and counter of one simulation."""

    def __init__(self, record_spans: bool = True) -> None:
        self.record_spans = record_spans
        self._tables: dict[str, Table] = {}
        self.tracks: dict[str, Track] = {}
        self.spans = Spans()

    def table(self, name: str, columns: Sequence[str]) -> Table:
        """The table ``name``, created with ``columns`` on first use."""
        tbl = self._tables.get(name)
        if tbl is None:
            tbl = self._tables[name] = Table(name, columns)
        elif tbl.columns != tuple(columns):
            raise ValueError(f"table {name!r} exists with columns {tbl.columns}")
        return tbl

    def track(self, name: str, group: str = "cluster", kind: str = "device") -> str:
        """Declare a timeline track (idempotent); returns its name."""
        if name not in self.tracks:
            self.tracks[name] = Track(name, group, kind)
        return name

    def span(
        self,
        track: str,
        name: str,
        start_s: float,
        end_s: float,
        args: dict[str, Any] | None = None,
    ) -> None:
        """Record that ``track`` was busy with ``name`` over [start_s, end_s]."""
        if not self.record_spans:
            return
        if end_s < start_s:
            raise ValueError(f"span {name!r} on {track!r} ends before it starts")
        s = self.spans
        s.start_s.append(start_s)
        s.end_s.append(end_s)
        s.track.append(track)
        s.name.append(name)
        s.args.append(args)

    def counter(self, track: str, time_s: float, value: float) -> None:
        """Record the value of a counter track (memory in use, queue length) at a time."""
        if not self.record_spans:
            return
        s = self.spans
        s.counter_time_s.append(time_s)
        s.counter_track.append(track)
        s.counter_value.append(value)

    def flow(self, flow_id: int, phase: str, track: str, time_s: float, name: str) -> None:
        """One end of flow arrow ``flow_id``: phase ``s`` at the end of the span on
        ``track`` that ends at ``time_s`` (the cause), phase ``f`` at the start of the
        span on ``track`` that starts at ``time_s`` (the effect). Each id has one ``s``
        and one ``f``, the ``s`` no later than the ``f``."""
        if not self.record_spans:
            return
        if phase not in FLOW_PHASES:
            raise ValueError(f"flow {flow_id}: phase {phase!r} is not one of {FLOW_PHASES}")
        s = self.spans
        s.flow_id.append(flow_id)
        s.flow_phase.append(phase)
        s.flow_track.append(track)
        s.flow_time_s.append(time_s)
        s.flow_name.append(name)

    def raw_tables(self) -> dict[str, Table]:
        """Every table as recorded, by name (sorted)."""
        return {n: self._tables[n] for n in sorted(self._tables)}

    def tables(self) -> dict[str, pd.DataFrame]:
        """Every table as a DataFrame, by name (sorted)."""
        return {n: self._tables[n].to_frame() for n in sorted(self._tables)}

    def spans_frame(self) -> pd.DataFrame:
        """The spans as a DataFrame (start_s, end_s, track, name)."""
        import pandas as pd

        s = self.spans
        return pd.DataFrame(
            {"start_s": s.start_s, "end_s": s.end_s, "track": s.track, "name": s.name}
        )
