"""LLM requests for the serving workload: arrivals, prompt and output lengths, traces.

Arrivals are Poisson, Gamma with a given coefficient of variation, or a trace's own
timestamps scaled to a target mean rate; an optional surge multiplies the rate by
``factor`` over a window (a time warp of the arrival process, so its shape is kept).
Lengths are fixed, or drawn with replacement from a trace (with trace arrivals the
trace rows are taken in order). Importers read the documented columns of:

* Azure LLM inference 2023 (Splitwise): CSV ``TIMESTAMP, ContextTokens, GeneratedTokens``;
* Mooncake FAST'25: JSON lines ``timestamp`` (ms), ``input_length``, ``output_length``.

A bad trace raises ValueError naming the file, the line and the column.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, NonNegativeFloat, PositiveFloat, PositiveInt

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TraceConfig(_Strict):
    """A request trace file (relative paths resolve against the scenario's folder)."""

    format: Literal["azure", "mooncake"]
    path: str


class SurgeConfig(_Strict):
    """The arrival rate is ``factor`` times higher during ``[start_s, start_s + duration_s)``."""

    start_s: NonNegativeFloat
    duration_s: PositiveFloat
    factor: PositiveFloat


class RequestsConfig(_Strict):
    """How requests are generated (the workload's ``requests:`` block)."""

    num_requests: PositiveInt = 1000
    arrivals: Literal["poisson", "gamma", "trace"] = "poisson"
    rate_per_s: PositiveFloat | None = 1.0
    cv: PositiveFloat = 1.0
    lengths: Literal["fixed", "trace"] = "fixed"
    prompt_tokens: PositiveInt = 512
    output_tokens: PositiveInt = 128
    trace: TraceConfig | None = None
    surge: SurgeConfig | None = None


@dataclass(frozen=True)
class Trace:
    """Rows of a trace: arrival seconds from its start, prompt and output tokens."""

    arrival_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray


@dataclass(frozen=True)
class Requests:
    """Generated requests, sorted by arrival (int64 token counts, float seconds)."""

    arrival_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)


def _bad(path: Path, line: int, column: str, what: str) -> ValueError:
    return ValueError(f"trace {path.name} line {line} column {column}: {what}")


def _check_counts(path: Path, values: pd.Series, column: str, first_line: int) -> np.ndarray:
    num = pd.to_numeric(values, errors="coerce")
    bad = num.isna() | (num < 0) | (num != np.floor(num))
    if bad.any():
        k = int(np.flatnonzero(bad.to_numpy())[0])
        raise _bad(path, first_line + k, column, f"{values.iloc[k]!r} is not a count >= 0")
    return num.to_numpy(dtype=np.int64)


def read_azure(path: Path) -> Trace:
    """Azure LLM 2023 CSV (line 1 is the header, so row k is on line k + 2)."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in AZURE_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"trace {path.name} line 1: missing column(s) {', '.join(missing)}")
    stamps = pd.to_datetime(frame["TIMESTAMP"], errors="coerce", format="mixed")
    if stamps.isna().any():
        k = int(np.flatnonzero(stamps.isna().to_numpy())[0])
        raise _bad(path, k + 2, "TIMESTAMP", f"{frame['TIMESTAMP'].iloc[k]!r} is not a time")
    seconds = (stamps - stamps.min()).dt.total_seconds().to_numpy()
    prompt = _check_counts(path, frame["ContextTokens"], "ContextTokens", 2)
    output = _check_counts(path, frame["GeneratedTokens"], "GeneratedTokens", 2)
    return Trace(seconds, prompt, output)


def read_mooncake(path: Path) -> Trace:
    """Mooncake JSON lines (row k is on line k + 1; timestamps in ms)."""
    rows = []
    with path.open() as f:
        for line_no, line in enumerate(f, start=1):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise _bad(path, line_no, "-", "not a JSON object") from None
            for name in MOONCAKE_FIELDS:
                if name not in obj:
                    raise _bad(path, line_no, name, "missing")
                v = obj[name]
                if not isinstance(v, int | float) or v < 0 or v != int(v):
                    raise _bad(path, line_no, name, f"{v!r} is not a count >= 0")
            rows.append([obj[n] for n in MOONCAKE_FIELDS])
    if not rows:
        raise ValueError(f"trace {path.name}: no rows")
    data = np.asarray(rows, dtype=np.int64)
    return Trace(data[:, 0] / 1000.0, data[:, 1], data[:, 2])


def read_trace(cfg: TraceConfig, base_dir: Path) -> Trace:
    """Load ``cfg`` (sorted by arrival); OSError if the file is missing."""
    path = Path(cfg.path) if Path(cfg.path).is_absolute() else base_dir / cfg.path
    trace = read_azure(path) if cfg.format == "azure" else read_mooncake(path)
    order = np.argsort(trace.arrival_s, kind="stable")
    return Trace(trace.arrival_s[order], trace.prompt[order], trace.output[order])


def _warp(epochs: np.ndarray, rate: float, surge: SurgeConfig | None) -> np.ndarray:
    """Map unit-rate epochs to times of a process with rate ``rate`` (x factor in surge)."""
    if surge is None:
        return epochs / rate
    a, b = surge.start_s, surge.start_s + surge.duration_s
    knots_t = np.array([0.0, a, b])
    knots_e = np.array([0.0, rate * a, rate * a + rate * surge.factor * (b - a)])
    inside = np.interp(epochs, knots_e, knots_t)
    after = b + (epochs - knots_e[-1]) / rate
    return np.where(epochs <= knots_e[-1], inside, after)


def generate(cfg: RequestsConfig, rng: np.random.Generator, base_dir: Path) -> Requests:
    """Requests as ``cfg`` asks (rng: the workload's ``serving.requests`` stream)."""
    n = cfg.num_requests
    trace = read_trace(cfg.trace, base_dir) if cfg.trace is not None else None
    if (cfg.arrivals == "trace" or cfg.lengths == "trace") and trace is None:
        raise ValueError("requests.trace: needed by arrivals/lengths 'trace'")
    if cfg.arrivals == "trace":
        assert trace is not None
        if n > len(trace.arrival_s):
            raise ValueError(f"requests.num_requests: {n} > {len(trace.arrival_s)} trace rows")
        stamps = trace.arrival_s[:n] - trace.arrival_s[0]
        native = (n - 1) / stamps[-1] if n > 1 and stamps[-1] > 0 else 1.0
        rate = cfg.rate_per_s or native
        epochs = stamps * native
    else:
        if cfg.rate_per_s is None:
            raise ValueError("requests.rate_per_s: needed by synthetic arrivals")
        rate = cfg.rate_per_s
        shape = 1.0 if cfg.arrivals == "poisson" else 1.0 / cfg.cv**2
        epochs = np.cumsum(rng.gamma(shape, 1.0 / shape, size=n))
    arrival = _warp(epochs, rate, cfg.surge)
    if cfg.lengths == "trace":
        assert trace is not None
        idx = np.arange(n) if cfg.arrivals == "trace" else rng.integers(0, len(trace.prompt), n)
        prompt, output = trace.prompt[idx], trace.output[idx]
    else:
        prompt = np.full(n, cfg.prompt_tokens, dtype=np.int64)
        output = np.full(n, cfg.output_tokens, dtype=np.int64)
    # a request always has a prompt token and produces at least its first token
    return Requests(arrival, np.maximum(prompt, 1), np.maximum(output, 1))
