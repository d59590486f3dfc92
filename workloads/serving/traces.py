"""Request trace files for the serving workload: readers and their documented columns.

Importers read the documented columns of:

* Azure LLM inference 2023 (Splitwise): CSV ``TIMESTAMP, ContextTokens, GeneratedTokens``;
* Mooncake FAST'25: JSON lines ``timestamp`` (ms), ``input_length``, ``output_length``
  and optional ``hash_ids`` (one hash per ``hash_block_tokens`` = 512-token block of the
  prompt, equal ids marking reusable prefix blocks), kept as a flat int64 array plus
  per-request offsets (:class:`BlockHashes`);
* ServeGen (Alibaba Model Studio, as reformatted in ``../shared/data/servegen``): per
  client 10-minute windows ``client_id, window_start_s, rate_rps`` (the ``path``) and a
  request-weighted token distribution ``field, value, probability`` (``lengths_path``),
  see :func:`servegen_requests`.

An Azure CSV may carry an SLO class per row in a column named by ``class_column``.

A bad trace raises ValueError naming the file, the line and the column.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from hetsim.simulator.boundary import MAX_FIELD_CHARS, json_value
from hetsim.simulator.errors import TraceError
from hetsim.simulator.limits import PositiveSeconds, Seconds
from hetsim.workloads.paths import resolve_path

if TYPE_CHECKING:  # pandas loads when a trace is read, not with the serving workload
    import pandas as pd

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")
SERVEGEN_RATE_COLUMNS = ("client_id", "window_start_s", "rate_rps")
SERVEGEN_PDF_COLUMNS = ("field", "value", "probability")


class Strict(BaseModel):
    """Frozen pydantic model that forbids unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class TraceConfig(Strict):
    """A request trace file (relative paths resolve against the scenario's folder)."""

    format: Literal["azure", "mooncake", "servegen"] = Field(
        description="Trace format: azure (Azure LLM inference CSV), mooncake "
        "(JSON lines, timestamps in ms) or servegen (per-client "
        "rates per window; lengths from lengths_path)."
    )
    path: str = Field(
        description="Trace file (relative paths resolve against the "
        "scenario's folder; pkg: names a shipped file)."
    )
    lengths_path: str | None = Field(
        default=None, description="servegen: the token_pdf file of request lengths."
    )
    window_s: PositiveSeconds | None = Field(
        default=None, description="servegen: simulated seconds per trace window."
    )
    start_s: Seconds = Field(
        default=0.0,
        description="servegen: skip windows starting before this trace time, in seconds.",
    )
    clients: list[int] | None = Field(
        default=None, description="servegen: these clients only (null: all)."
    )
    class_column: str | None = Field(
        default=None, description="azure: a column naming each row's SLO class."
    )
    hash_block_tokens: PositiveInt = Field(
        default=512, description="mooncake: prompt tokens per hash_ids entry."
    )


@dataclass(frozen=True)
class BlockHashes:
    """Prefix-block hashes of every request: request ``i`` has
    ``flat[offsets[i]:offsets[i + 1]]``, one hash per ``block_tokens`` prompt tokens
    (the last block may be partial)."""

    flat: np.ndarray  # int64
    offsets: np.ndarray  # int64, len = requests + 1
    block_tokens: int

    def of(self, i: int) -> np.ndarray:
        """Request ``i``'s hashes."""
        return self.flat[self.offsets[i] : self.offsets[i + 1]]

    def take(self, idx: np.ndarray) -> BlockHashes:
        """The hashes of requests ``idx``, in that order."""
        lens = np.diff(self.offsets)[idx]
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        shift = np.repeat(self.offsets[idx] - offsets[:-1], lens)
        flat = self.flat[shift + np.arange(int(offsets[-1]), dtype=np.int64)]
        return BlockHashes(flat, offsets, self.block_tokens)


@dataclass(frozen=True)
class Trace:
    """Rows of a trace: arrival seconds from its start, prompt and output tokens."""

    arrival_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    slo_class: np.ndarray | None = None  # class names (str) when the trace has them
    hashes: BlockHashes | None = None  # prefix-block hashes (mooncake hash_ids)


def _bad(path: Path, line: int, column: str, what: str) -> TraceError:
    return TraceError(path, line, column, what)


def _read_cells(path: Path) -> pd.DataFrame:
    """A CSV file as strings (row k on line k + 2); a cell or column name longer than
    :data:`MAX_FIELD_CHARS` is refused before anything parses it."""
    import pandas as pd

    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    for i, name in enumerate(frame.columns):
        if len(str(name)) > MAX_FIELD_CHARS:
            raise _bad(path, 1, str(i + 1), f"column name longer than {MAX_FIELD_CHARS} characters")
        lengths = frame[name].str.len().to_numpy()
        if len(lengths) and lengths.max() > MAX_FIELD_CHARS:
            k = int(lengths.argmax())
            raise _bad(path, k + 2, str(name), f"field longer than {MAX_FIELD_CHARS} characters")
    return frame


MAX_COUNT = 2**53
"""Largest count a trace cell may hold (float64 represents every integer up to it)."""


def _check_counts(path: Path, values: pd.Series, column: str, first_line: int) -> np.ndarray:
    import pandas as pd

    num = pd.to_numeric(values, errors="coerce")
    bad = num.isna() | ~(num >= 0) | ~(num <= MAX_COUNT) | (num != np.floor(num))
    if bad.any():
        k = int(np.flatnonzero(bad.to_numpy())[0])
        raise _bad(path, first_line + k, column, f"{values.iloc[k]!r} is not a count >= 0")
    return num.to_numpy(dtype=np.int64)


def read_azure(path: Path, class_column: str | None = None) -> Trace:
    """Azure LLM 2023 CSV (line 1 is the header, so row k is on line k + 2), with an
    optional column of SLO class names."""
    frame = _read_cells(path)
    wanted = (*AZURE_COLUMNS, class_column) if class_column else AZURE_COLUMNS
    missing = [c for c in wanted if c not in frame.columns]
    if missing:
        raise ValueError(f"trace {path.name} line 1: missing column(s) {', '.join(missing)}")
    import pandas as pd

    stamps = pd.to_datetime(frame["TIMESTAMP"], errors="coerce", format="mixed")
    if stamps.isna().any():
        k = int(np.flatnonzero(stamps.isna().to_numpy())[0])
        raise _bad(path, k + 2, "TIMESTAMP", f"{frame['TIMESTAMP'].iloc[k]!r} is not a time")
    seconds = (stamps - stamps.min()).dt.total_seconds().to_numpy()
    prompt = _check_counts(path, frame["ContextTokens"], "ContextTokens", 2)
    output = _check_counts(path, frame["GeneratedTokens"], "GeneratedTokens", 2)
    if class_column is None:
        return Trace(seconds, prompt, output)
    names = frame[class_column].str.strip()
    if (names == "").any():
        k = int(np.flatnonzero((names == "").to_numpy())[0])
        raise _bad(path, k + 2, class_column, "empty SLO class")
    return Trace(seconds, prompt, output, names.to_numpy(dtype=str))


def _hash_ids(path: Path, line_no: int, obj: dict[str, Any], block_tokens: int) -> list[int]:
    """A row's ``hash_ids`` (empty if absent): ints >= 0, at most one per prompt block."""
    ids = obj.get("hash_ids", [])
    if not isinstance(ids, list):
        raise _bad(path, line_no, "hash_ids", f"{ids!r} is not a list")
    for v in ids:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise _bad(path, line_no, "hash_ids", f"{v!r} is not a block hash (int >= 0)")
    most = -(-int(obj["input_length"]) // block_tokens)
    if len(ids) > most:
        raise _bad(
            path, line_no, "hash_ids",
            f"{len(ids)} hashes for {obj['input_length']} tokens ({most} blocks of {block_tokens})",
        )  # fmt: skip
    return ids


def read_mooncake(path: Path, block_tokens: int = 512) -> Trace:
    """Mooncake JSON lines (row k is on line k + 1; timestamps in ms); ``hash_ids``
    when any row has them (rows without get none)."""
    rows, ids, lens = [], [], []
    with path.open() as f:
        for line_no, line in enumerate(f, start=1):
            obj = json_value(line, path, line_no)
            if not isinstance(obj, dict):
                raise _bad(path, line_no, "-", "not a JSON object")
            for name in MOONCAKE_FIELDS:
                if name not in obj:
                    raise _bad(path, line_no, name, "missing")
                v = obj[name]
                if (not isinstance(v, int | float) or isinstance(v, bool)
                        or not 0 <= v <= MAX_COUNT or v != int(v)):  # fmt: skip
                    raise _bad(path, line_no, name, f"{v!r} is not a count >= 0")
            rows.append([obj[n] for n in MOONCAKE_FIELDS])
            row_ids = _hash_ids(path, line_no, obj, block_tokens)
            ids.extend(row_ids)
            lens.append(len(row_ids))
    if not rows:
        raise ValueError(f"trace {path.name}: no rows")
    data = np.asarray(rows, dtype=np.int64)
    hashes = None
    if ids:
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        hashes = BlockHashes(np.asarray(ids, dtype=np.int64), offsets, block_tokens)
    return Trace(data[:, 0] / 1000.0, data[:, 1], data[:, 2], hashes=hashes)


def read_trace(cfg: TraceConfig, base_dir: Path) -> Trace:
    """Load ``cfg`` (sorted by arrival); OSError if the file is missing."""
    path = resolve_path(cfg.path, base_dir)
    if cfg.class_column is not None and cfg.format != "azure":
        raise ValueError("requests.trace.class_column: only the azure format has one")
    if cfg.format == "azure":
        trace = read_azure(path, cfg.class_column)
    else:
        trace = read_mooncake(path, cfg.hash_block_tokens)
    order = np.argsort(trace.arrival_s, kind="stable")
    cls = None if trace.slo_class is None else trace.slo_class[order]
    hashes = None if trace.hashes is None else trace.hashes.take(order)
    return Trace(trace.arrival_s[order], trace.prompt[order], trace.output[order], cls, hashes)


# ---- ServeGen -------------------------------------------------------------------------
def _columns(path: Path, frame: pd.DataFrame, wanted: tuple[str, ...]) -> None:
    missing = [c for c in wanted if c not in frame.columns]
    if missing:
        raise ValueError(f"trace {path.name} line 1: missing column(s) {', '.join(missing)}")


def _numbers(path: Path, values: pd.Series, column: str) -> np.ndarray:
    """Non-negative floats (row k on line k + 2)."""
    import pandas as pd

    num = pd.to_numeric(values, errors="coerce")
    bad = num.isna() | ~(num >= 0) | ~np.isfinite(num)
    if bad.any():
        k = int(np.flatnonzero(bad.to_numpy())[0])
        raise _bad(path, k + 2, column, f"{values.iloc[k]!r} is not a number >= 0")
    return num.to_numpy(dtype=float)


def read_servegen_rates(
    path: Path, clients: list[int] | None, start_s: float
) -> tuple[np.ndarray, float]:
    """Aggregate request rate per window (sum over the chosen clients, windows from
    ``start_s`` on, in time order) and the window width in trace seconds."""
    frame = _read_cells(path)
    _columns(path, frame, SERVEGEN_RATE_COLUMNS)
    client = _check_counts(path, frame["client_id"], "client_id", 2)
    start = _numbers(path, frame["window_start_s"], "window_start_s")
    rate = _numbers(path, frame["rate_rps"], "rate_rps")
    keep = start >= start_s
    if clients is not None:
        keep &= np.isin(client, clients)
    if not keep.any():
        raise ValueError(f"trace {path.name}: no window of the chosen clients from {start_s} s")
    starts, idx = np.unique(start[keep], return_inverse=True)
    total = np.bincount(idx, weights=rate[keep], minlength=len(starts))
    width = float(np.min(np.diff(starts))) if len(starts) > 1 else 600.0
    return total, width


def read_servegen_lengths(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``field -> (values, probabilities)`` of a token_pdf file (``input_tokens`` and
    ``output_tokens`` are token counts)."""
    frame = _read_cells(path)
    _columns(path, frame, SERVEGEN_PDF_COLUMNS)
    prob = _numbers(path, frame["probability"], "probability")
    value = _numbers(path, frame["value"], "value")
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in ("input_tokens", "output_tokens"):
        rows = (frame["field"] == name).to_numpy()
        if not rows.any() or prob[rows].sum() <= 0:
            raise ValueError(f"trace {path.name}: no rows of field {name}")
        frac = np.flatnonzero(rows & (value != np.floor(value)))
        if len(frac):
            k = int(frac[0])
            raise _bad(path, k + 2, "value", f"{frame['value'].iloc[k]!r} is not a token count")
        vals = value[rows].astype(np.int64)
        out[name] = (vals, prob[rows] / prob[rows].sum())
    return out
