"""Fault model of the observability domain: fail-stop and fail-slow faults with ground truth.

Fail-stop rates come from Meta's Llama 3 405B pre-training report (16,384 H100 GPUs,
54 days, 419 unexpected interruptions; per-cause counts as tabulated in
``shared/papers/elastic-observability.md`` section 5.1; the long tail is marked
[recall] there and sums to 419). A cause's rate per GPU-day is its count over
16,384 x 54 GPU-days; the whole table gives ``r = 419 / 884,736 = 4.74e-4`` per GPU-day.
Faults on a job of N GPUs are a superposition of N independent Poisson processes, i.e.
one Poisson process of rate ``N * r`` whose culprit GPU is uniform and whose cause is
drawn with probability proportional to its count (so causes follow counts, not the
published percentages, which do not add up; see the notes).

Fail-slow faults (GPU slowdown, host CPU contention, link degradation, data-loader
stall) have no published per-GPU rate; their rates, slowdown ranges and durations are
parameters (defaults: reconstruction, MegaScale and the ByteDance straggler study only
say they are a separate, frequent class).

A fault trace (StepFun InfiniteHBD node faults, Apache-2.0) can be replayed instead of
sampled: each trace node is mapped to a job node in order of first appearance.

Closed forms used by policies and tests live here too: Young's and Daly's checkpoint
intervals and the first-order and exact ETTR of a job with exponential failures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, model_validator

from hetsim.simulator.boundary import json_value
from hetsim.simulator.limits import PositiveSeconds

LLAMA3_GPUS = 16_384
LLAMA3_DAYS = 54.0
LLAMA3_COUNTS: dict[str, tuple[int, str]] = {
    # cause: (unexpected interruptions in 54 days on 16,384 H100, component)
    "faulty-gpu": (148, "gpu"),
    "gpu-hbm3": (72, "hbm"),
    "software-bug": (54, "software"),
    "network-switch-cable": (35, "switch"),
    "host-maintenance": (32, "host"),
    "gpu-sram": (19, "gpu"),
    "gpu-system-processor": (17, "gpu"),
    "nic": (7, "nic"),
    "nccl-watchdog-timeout": (7, "software"),
    "silent-data-corruption": (6, "gpu"),
    "gpu-thermal-interface": (6, "gpu"),
    "ssd": (3, "host"),
    "power-supply": (3, "host"),
    "server-chassis": (2, "host"),
    "io-expansion-board": (2, "host"),
    "dependency": (2, "software"),
    "cpu": (2, "host"),
    "system-memory": (2, "host"),
}
"""Llama 3 405B unexpected interruptions by cause (Meta, "The Llama 3 Herd of Models", 2024)."""

FAIL_SLOW_CAUSE = {
    "gpu-slowdown": "compute",
    "host-cpu-contention": "compute",
    "dataloader-stall": "compute",
    "link-degradation": "communication",
}
"""Fail-slow kinds and whether the delay they cause is in computation or communication."""

SECONDS_PER_DAY = 86_400.0


def llama3_rates_per_gpu_day() -> dict[str, float]:
    """Rate per GPU-day of each Llama 3 cause: count / (16,384 GPUs x 54 days)."""
    gpu_days = LLAMA3_GPUS * LLAMA3_DAYS
    return {cause: n / gpu_days for cause, (n, _) in LLAMA3_COUNTS.items()}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FailStopModel(_Strict):
    """Fail-stop faults: the Llama 3 table scaled by ``rate_scale``, explicit rates, a trace,
    or none."""

    kind: Literal["llama3", "rates", "trace", "none"] = Field(
        default="llama3",
        description="Source of fail-stop faults: the Llama 3 table (scaled by "
        "rate_scale), explicit rates_per_gpu_day, a fault trace, or none.",
    )
    rate_scale: PositiveFloat = Field(
        default=1.0, description="Multiplier of the per-GPU-day rates (kinds llama3 and rates)."
    )
    rates_per_gpu_day: dict[str, float] = Field(
        default_factory=dict, description="Fail-stop rate per GPU-day by cause (kind rates)."
    )
    path: str | None = Field(default=None, description="InfiniteHBD-style fault_trace.json")
    trace_gpus_per_node: int = Field(
        default=8,
        ge=1,
        description="GPUs per node when a trace's node-level faults "
        "are mapped to ranks (kind trace).",
    )

    @model_validator(mode="after")
    def _check(self) -> FailStopModel:
        if self.kind == "rates" and not self.rates_per_gpu_day:
            raise ValueError("kind 'rates' needs rates_per_gpu_day")
        if any(not (v >= 0 and math.isfinite(v)) for v in self.rates_per_gpu_day.values()):
            raise ValueError("rates_per_gpu_day must be finite and >= 0")
        if self.kind == "trace" and self.path is None:
            raise ValueError("kind 'trace' needs a path")
        return self

    def rates(self) -> dict[str, float]:
        """Rate per GPU-day by cause (empty for a trace or none)."""
        if self.kind == "llama3":
            return {c: r * self.rate_scale for c, r in llama3_rates_per_gpu_day().items()}
        if self.kind == "rates":
            return {c: r * self.rate_scale for c, r in self.rates_per_gpu_day.items()}
        return {}


class FailSlowKind(_Strict):
    """One kind of fail-slow fault: rate, slowdown range, duration (reconstruction)."""

    rate_per_gpu_day: float = Field(
        default=0.0,
        ge=0,
        description="Faults of this kind per GPU-day, Poisson over the run (reconstruction).",
    )
    slowdown: tuple[float, float] = Field(
        default=(1.2, 2.0),
        description="Range of the operator-time multiplier of a fault, drawn uniformly.",
    )
    persistent_fraction: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Share of these faults that last to the end of "
        "the run; the rest are transient.",
    )
    mean_transient_s: PositiveSeconds = Field(
        default=600.0, description="Mean duration of a transient fault, in seconds (exponential)."
    )

    @model_validator(mode="after")
    def _check(self) -> FailSlowKind:
        lo, hi = self.slowdown
        if not 1.0 <= lo <= hi:
            raise ValueError("slowdown must be (low, high) with 1 <= low <= high")
        return self


@dataclass(frozen=True)
class Fault:
    """Ground truth of one injected fault.

    ``kind`` is a fail-stop cause or a fail-slow kind; ``cause`` is ``compute`` or
    ``communication`` for fail-slow faults, the component for fail-stop ones;
    ``end_s`` is inf for a persistent fail-slow fault (it ends when mitigated).
    """

    fault_id: int
    category: Literal["fail-stop", "fail-slow"]
    kind: str
    cause: str
    rank: int
    start_s: float
    end_s: float
    factor: float = 1.0


def sample_fail_stop(
    model: FailStopModel, gpus: int, horizon_s: float, rng: np.random.Generator, base: Path
) -> list[Fault]:
    """Fail-stop faults over [0, horizon_s) on ``gpus`` GPUs, sorted by time."""
    if model.kind == "none":
        return []
    if model.kind == "trace":
        assert model.path is not None
        return replay_trace(base / model.path, gpus, model.trace_gpus_per_node, horizon_s, rng)
    rates = model.rates()
    causes = list(rates)
    per_s = np.array([rates[c] for c in causes]) * gpus / SECONDS_PER_DAY
    total = float(per_s.sum())
    if total <= 0:
        return []
    count = int(rng.poisson(total * horizon_s))
    times = np.sort(rng.uniform(0.0, horizon_s, count))
    which = rng.choice(len(causes), size=count, p=per_s / total)
    ranks = rng.integers(0, gpus, size=count)
    comp = {c: LLAMA3_COUNTS.get(c, (0, "other"))[1] for c in causes}
    return [
        Fault(i, "fail-stop", causes[k], comp[causes[k]], int(r), float(t), float(t))
        for i, (t, k, r) in enumerate(zip(times, which, ranks, strict=True))
    ]


def replay_trace(
    path: Path, gpus: int, gpus_per_node: int, horizon_s: float, rng: np.random.Generator
) -> list[Fault]:
    """Fault starts of an InfiniteHBD-style trace (event_time in days) as fail-stop faults.

    Trace nodes map to job nodes in order of first appearance; faults of trace nodes
    beyond the job's node count are dropped; the culprit GPU is uniform in its node.
    """
    try:
        events = json_value(Path(path).read_text(encoding="utf-8"), Path(path), 1)
        starts = [
            (float(e["event_time"]), str(e["node_id"]), str(e["fault_type"]["Class"]))
            for e in events
            if e["event_type"] == "fault_start"
        ]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"fault trace {path}: want a JSON array of events with event_time, event_type, "
            f"node_id and fault_type.Class ({type(e).__name__}: {e})"
        ) from None
    nodes = max(1, gpus // gpus_per_node)
    index: dict[str, int] = {}
    out: list[Fault] = []
    for day, node_id, cls in sorted(starts):
        node = index.setdefault(node_id, len(index))
        t = day * SECONDS_PER_DAY
        if node >= nodes or t >= horizon_s:
            continue
        rank = node * gpus_per_node + int(rng.integers(0, gpus_per_node))
        out.append(Fault(len(out), "fail-stop", cls, cls.lower(), min(rank, gpus - 1), t, t))
    return out


def sample_fail_slow(
    kinds: dict[str, FailSlowKind],
    gpus: int,
    horizon_s: float,
    rng: np.random.Generator,
    first_id: int = 0,
) -> list[Fault]:
    """Fail-slow faults of every kind over [0, horizon_s), sorted by start time."""
    out: list[Fault] = []
    for kind in sorted(kinds):
        spec = kinds[kind]
        lam = spec.rate_per_gpu_day * gpus / SECONDS_PER_DAY
        n = int(rng.poisson(lam * horizon_s))
        starts = rng.uniform(0.0, horizon_s, n)
        factors = rng.uniform(spec.slowdown[0], spec.slowdown[1], n)
        persistent = rng.random(n) < spec.persistent_fraction
        lengths = rng.exponential(spec.mean_transient_s, n)
        ranks = rng.integers(0, gpus, n)
        for t, f, p, d, r in zip(starts, factors, persistent, lengths, ranks, strict=True):
            end = math.inf if p else float(t + d)
            out.append(Fault(0, "fail-slow", kind, FAIL_SLOW_CAUSE[kind], int(r), t, end, f))
    out.sort(key=lambda f: f.start_s)
    return [
        Fault(first_id + i, f.category, f.kind, f.cause, f.rank, f.start_s, f.end_s, f.factor)
        for i, f in enumerate(out)
    ]


def ettr_first_order(
    interval_s: float, checkpoint_s: float, recovery_s: float, mtbf_s: float
) -> float:
    """``1 - (C/tau + (tau/2 + t_detect + t_restart)/M)`` (notes section 5.4).

    ``recovery_s`` is t_detect + t_restart; ``interval_s`` is the work tau between
    checkpoints. NaN where the overheads exceed the whole run (the first-order
    expansion no longer holds: at 10^6 GPUs it gave a negative ETTR), so the summary
    reports it absent with a reason."""
    value = 1.0 - (checkpoint_s / interval_s + (interval_s / 2.0 + recovery_s) / mtbf_s)
    return value if value >= 0.0 else math.nan


def ettr_exact(interval_s: float, checkpoint_s: float, recovery_s: float, mtbf_s: float) -> float:
    """Exact ETTR of a job with exponential failures (mean ``mtbf_s``) that loses all work
    since its last completed checkpoint, when a failure during recovery restarts recovery.

    A segment of ``T = tau + C`` seconds must run failure-free; each failure costs the
    time lost plus a recovery of R seconds that must itself run failure-free. Renewal
    argument: ``E[segment] = M e^{R/M} (e^{T/M} - 1)``; ETTR = tau / E[segment].
    """
    m = mtbf_s
    total = interval_s + checkpoint_s
    return interval_s / (m * math.exp(recovery_s / m) * math.expm1(total / m))
