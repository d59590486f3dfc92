"""LLM requests for the serving workload: arrivals, prompt and output lengths, traces.

Arrivals are Poisson, Gamma with a given coefficient of variation, or a trace's own
timestamps scaled to a target mean rate; an optional surge multiplies the rate by
``factor`` over a window (a time warp of the arrival process, so its shape is kept).
Lengths are fixed, drawn with replacement from a trace (with trace arrivals the
trace rows are taken in order), or synthetic: uniform, Zipf, log-normal or fixed laws
for prompt and output, or for the total with a prefill:decode ratio
(:mod:`workloads.serving.lengths`, each law on its own named random stream).

Trace files are read by :mod:`workloads.serving_traces` (Azure 2023, Mooncake, ServeGen).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt

from hetsim.simulator.limits import MAX_REQUESTS, PositiveSeconds, Seconds
from hetsim.workloads.serving.lengths import SyntheticLengths
from hetsim.workloads.serving.traces import (
    BlockHashes,
    Strict,
    TraceConfig,
    read_servegen_lengths,
    read_servegen_rates,
    read_trace,
    resolve_path,
)


class SurgeConfig(Strict):
    """The arrival rate is ``factor`` times higher during ``[start_s, start_s + duration_s)``."""

    start_s: Seconds = Field(description="Simulated time the surge starts, in seconds.")
    duration_s: PositiveSeconds = Field(description="Length of the surge, in seconds.")
    factor: PositiveFloat = Field(description="Multiplier of the arrival rate during the surge.")


class RequestsConfig(Strict):
    """How requests are generated (the workload's ``requests:`` block)."""

    num_requests: int = Field(
        default=1000,
        gt=0,
        le=MAX_REQUESTS,
        description="Number of requests generated (with trace arrivals: the trace's first rows).",
    )
    arrivals: Literal["poisson", "gamma", "trace"] = Field(
        default="poisson",
        description="Arrival process: poisson, gamma (gaps with coefficient "
        "of variation cv) or the trace's timestamps.",
    )
    rate_per_s: PositiveFloat | None = Field(
        default=1.0,
        description="Mean arrival rate of synthetic arrivals, in requests/s "
        "(null with trace arrivals: the trace's rate).",
    )
    cv: PositiveFloat = Field(
        default=1.0,
        description="Coefficient of variation of the gaps between gamma arrivals (1 is Poisson).",
    )
    max_gap_factor: PositiveFloat | None = Field(
        default=None,
        description="synthetic arrivals: cap every gap between arrivals at this many mean "
        "gaps (Vidur's Poisson interval generator caps at 3); None: no cap",
    )
    lengths: Literal["fixed", "trace", "synthetic"] = Field(
        default="fixed",
        description="Where request lengths come from: fixed (prompt_tokens, "
        "output_tokens), the trace, or synthetic laws.",
    )
    prompt_tokens: PositiveInt = Field(
        default=512, description="Prompt length of every request with fixed lengths, in tokens."
    )
    output_tokens: PositiveInt = Field(
        default=128, description="Output length of every request with fixed lengths, in tokens."
    )
    synthetic: SyntheticLengths | None = Field(
        default=None, description="The length laws of lengths: synthetic."
    )
    trace: TraceConfig | None = Field(
        default=None,
        description="The request trace file read by trace arrivals or trace lengths (null: none).",
    )
    surge: SurgeConfig | None = Field(
        default=None,
        description="A window in which the arrival rate is factor times higher (null: none).",
    )


class SloClass(Strict):
    """A class of requests with its own latency targets; ``share``: the fraction of
    requests drawn into it (the shares of all classes sum to 1), or None for every
    class when the trace names each request's class (``requests.trace.class_column``)."""

    name: str = Field(min_length=1, description="Class name (matched by a trace's class column).")
    ttft_s: PositiveSeconds = Field(
        description="Time-to-first-token target of the class, in seconds."
    )
    tpot_s: PositiveSeconds = Field(
        description="Time-per-output-token target of the class, in seconds."
    )
    share: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="Fraction of requests drawn into the class (all shares sum to 1), or null "
        "for every class when the trace names each request's class.",
    )


@dataclass(frozen=True)
class Requests:
    """Generated requests, sorted by arrival (int64 token counts, float seconds)."""

    arrival_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    slo_class: np.ndarray | None = None  # class names from a trace column, or None
    hashes: BlockHashes | None = None  # prefix-block hashes from a trace, or None

    def __len__(self) -> int:
        return len(self.arrival_s)


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


def generate(
    cfg: RequestsConfig,
    rng: np.random.Generator,
    base_dir: Path,
    streams: Callable[[str], np.random.Generator] | None = None,
) -> Requests:
    """Requests as ``cfg`` asks (rng: the workload's ``serving.requests`` stream;
    ``streams``: the run's named streams, which synthetic lengths draw from)."""
    n = cfg.num_requests
    if cfg.lengths == "synthetic" and (cfg.synthetic is None or streams is None):
        raise ValueError("requests.synthetic: needed by lengths 'synthetic'")
    if cfg.trace is not None and cfg.trace.format == "servegen":
        req = servegen_requests(cfg, cfg.trace, rng, base_dir)
        if cfg.lengths != "synthetic":
            return req
        assert cfg.synthetic is not None and streams is not None
        prompt, output = cfg.synthetic.draw(streams, n)
        return Requests(req.arrival_s, np.maximum(prompt, 1), np.maximum(output, 1))
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
        gaps = rng.gamma(shape, 1.0 / shape, size=n)  # unit rate: mean gap 1
        if cfg.max_gap_factor is not None:
            gaps = np.minimum(gaps, cfg.max_gap_factor)
        epochs = np.cumsum(gaps)
    arrival = _warp(epochs, rate, cfg.surge)
    if cfg.lengths == "trace":
        assert trace is not None
        idx = np.arange(n) if cfg.arrivals == "trace" else rng.integers(0, len(trace.prompt), n)
        prompt, output = trace.prompt[idx], trace.output[idx]
        cls = None if trace.slo_class is None else trace.slo_class[idx]
        hashes = None if trace.hashes is None else trace.hashes.take(idx)
    else:
        if cfg.lengths == "synthetic":
            assert cfg.synthetic is not None and streams is not None
            prompt, output = cfg.synthetic.draw(streams, n)
        else:
            prompt = np.full(n, cfg.prompt_tokens, dtype=np.int64)
            output = np.full(n, cfg.output_tokens, dtype=np.int64)
        cls, hashes = None, None
        if trace is not None and trace.slo_class is not None and cfg.arrivals == "trace":
            cls = trace.slo_class[:n]
    # a request always has a prompt token and produces at least its first token
    return Requests(arrival, np.maximum(prompt, 1), np.maximum(output, 1), cls, hashes)


def servegen_requests(
    cfg: RequestsConfig, tc: TraceConfig, rng: np.random.Generator, base_dir: Path
) -> Requests:
    """ServeGen requests. Arrivals (``arrivals: trace``): a Poisson process whose rate
    is the clients' summed ``rate_rps``, piecewise constant over windows of
    ``window_s`` simulated seconds each (default: the trace's 600 s), scaled so its mean
    over the windows used is ``rate_per_s`` when given; many clients superposed are
    taken as Poisson (the per-client CV and fitted distributions are not used).
    Lengths (``lengths: trace``): prompt and output drawn independently from the
    ``input_tokens`` and ``output_tokens`` distributions of ``lengths_path`` (the files
    give marginals only)."""
    n = cfg.num_requests
    if cfg.arrivals == "trace":
        rates, width = read_servegen_rates(resolve_path(tc.path, base_dir), tc.clients, tc.start_s)
        if cfg.rate_per_s is not None and rates.mean() > 0:
            rates = rates * (cfg.rate_per_s / rates.mean())
        w = tc.window_s or width
        knots_t = np.arange(len(rates) + 1) * w
        knots_e = np.concatenate([[0.0], np.cumsum(rates * w)])
        epochs = np.cumsum(rng.exponential(1.0, n))
        if epochs[-1] > knots_e[-1]:
            raise ValueError(
                f"requests.num_requests: {n} requests outlast the {len(rates)} ServeGen "
                f"windows (about {int(knots_e[-1])} fit)"
            )
        arrival = np.interp(epochs, knots_e, knots_t)
    else:
        if cfg.rate_per_s is None:
            raise ValueError("requests.rate_per_s: needed by synthetic arrivals")
        shape = 1.0 if cfg.arrivals == "poisson" else 1.0 / cfg.cv**2
        arrival = _warp(np.cumsum(rng.gamma(shape, 1.0 / shape, size=n)), cfg.rate_per_s, cfg.surge)
    if cfg.lengths == "trace":
        if tc.lengths_path is None:
            raise ValueError("requests.trace.lengths_path: needed by servegen lengths")
        pdf = read_servegen_lengths(resolve_path(tc.lengths_path, base_dir))
        prompt = rng.choice(pdf["input_tokens"][0], size=n, p=pdf["input_tokens"][1])
        output = rng.choice(pdf["output_tokens"][0], size=n, p=pdf["output_tokens"][1])
    else:
        prompt = np.full(n, cfg.prompt_tokens, dtype=np.int64)
        output = np.full(n, cfg.output_tokens, dtype=np.int64)
    return Requests(arrival, np.maximum(prompt, 1), np.maximum(output, 1))


def assign_classes(
    classes: list[SloClass],
    default: Any,
    names: np.ndarray | None,
    n: int,
    rng: np.random.Generator,
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(class names, class index per request, TTFT and TPOT target per request):
    one class ``default`` with the targets of ``default`` (``ttft_s``, ``tpot_s``)
    when ``classes`` is empty; else the trace's ``names`` or a draw by share."""
    if not classes:
        return (["default"], np.zeros(n, dtype=np.int64), np.full(n, default.ttft_s),
                np.full(n, default.tpot_s))  # fmt: skip
    labels = [c.name for c in classes]
    if names is not None:
        unknown = sorted(set(names.tolist()) - set(labels))
        if unknown:
            raise ValueError(
                f"requests.trace.class_column: classes {unknown} are not in slo_classes {labels}"
            )
        index = {c: k for k, c in enumerate(labels)}
        cls = np.array([index[x] for x in names.tolist()], dtype=np.int64)
    elif classes[0].share is None:
        raise ValueError("requests.trace.class_column: needs lengths or arrivals 'trace'")
    else:
        shares = np.array([c.share or 0.0 for c in classes])
        cls = rng.choice(len(classes), size=n, p=shares / shares.sum())
    ttft = np.array([c.ttft_s for c in classes])[cls]
    tpot = np.array([c.tpot_s for c in classes])[cls]
    return labels, cls, ttft, tpot
