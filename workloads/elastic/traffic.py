"""Sample streams of the elastic workload: a mean arrival rate per control step.

The online-training job reads a stream (Kafka-like) whose rate lambda(t) swings by day
and week, jumps at live events and carries noise. Everything is drawn up front, one
vectorised call per random stream, as one mean rate (samples/s) per control step:

* ``synthetic``: ``lambda_k = mean * diurnal_k * weekly_k * burst_k * noise_k`` with
  ``diurnal = 1 + a * cos(2 pi (t / 86400 - peak_hour / 24))``, ``weekly = weekend_factor``
  on days 5 and 6 of each week (day 0 = the run's first day), bursts a Poisson process
  of ``bursts_per_day`` events, each multiplying the rate by ``1 + m`` (m uniform in
  ``burst_magnitude``) for an exponential duration of mean ``burst_duration_s``, and
  ``noise = exp(x - s^2 / 2)`` with x a stationary AR(1) of standard deviation s and
  lag-one correlation ``noise_correlation`` (mean of the noise factor: exactly 1).
* ``trace``: a (time, rate) series read from a file, rescaled to ``mean_rate_per_s``,
  linearly interpolated to the control steps and repeated to cover the run, times the
  same noise factor.

The parameters are assumptions chosen to look like a recommendation stream (Kale's
traffic is not public); they are all scenario fields.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat

from hetsim.simulator.limits import PositiveSeconds
from hetsim.workloads.paths import resolve_path

DAY_S = 86400.0
WEEK_S = 7 * DAY_S


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Noise(_Strict):
    """Multiplicative log-normal AR(1) noise with mean 1."""

    cv: NonNegativeFloat = Field(default=0.05, description="std of log-rate per step")
    correlation: float = Field(default=0.9, ge=0.0, lt=1.0, description="AR(1) lag-1 corr")


class SyntheticTraffic(_Strict):
    """Diurnal x weekly x bursts x noise around ``mean_rate_per_s`` (module doc)."""

    kind: Literal["synthetic"] = Field(default="synthetic", description="Traffic kind (synthetic).")
    mean_rate_per_s: PositiveFloat = Field(
        description="Mean sample rate of the stream, in samples per second."
    )
    diurnal_amplitude: float = Field(
        default=0.5,
        ge=0.0,
        lt=1.0,
        description="Relative daily swing a of the rate: 1 + a cos(2 pi "
        "(t / day - peak_hour / 24)) (assumption).",
    )
    peak_hour: float = Field(
        default=20.0,
        ge=0.0,
        lt=24.0,
        description="Hour of the day (0-24) of the daily peak (assumption).",
    )
    weekend_factor: PositiveFloat = Field(
        default=1.15, description="Rate multiplier on days 5 and 6 of each week (assumption)."
    )
    bursts_per_day: NonNegativeFloat = Field(
        default=2.0, description="Mean number of bursts per day, a Poisson process (assumption)."
    )
    burst_magnitude: tuple[NonNegativeFloat, NonNegativeFloat] = Field(
        default=(0.5, 1.5),
        description="Range of m: a burst multiplies the rate by 1 + "
        "m, m uniform in it (assumption).",
    )
    burst_duration_s: PositiveSeconds = Field(
        default=1800.0, description="Mean burst length in seconds, exponential (assumption)."
    )
    noise: Noise = Field(
        default=Noise(), description="Multiplicative log-normal AR(1) noise on the rate, mean 1."
    )


class TraceTraffic(_Strict):
    """A rate series from a CSV/Parquet file at regular intervals, rescaled so the mean
    of its rows is ``mean_rate_per_s``."""

    kind: Literal["trace"] = Field(default="trace", description="Traffic kind (trace).")
    path: str = Field(
        description="CSV or Parquet file of the rate series (relative to the scenario's folder)."
    )
    time_column: str = Field(
        default="time_s", description="Column of times, in seconds, at regular intervals."
    )
    rate_column: str = Field(default="rate_per_s", description="Column of rates.")
    mean_rate_per_s: PositiveFloat = Field(
        description="Mean the series is rescaled to, in samples per second; it is "
        "interpolated to the control steps and repeated to cover the run."
    )
    noise: Noise = Field(
        default=Noise(cv=0.0),
        description="Multiplicative log-normal AR(1) noise on the "
        "rate, mean 1 (default none: cv 0).",
    )


Traffic = Annotated[SyntheticTraffic | TraceTraffic, Field(discriminator="kind")]


def step_times_s(step_s: float, n_steps: int) -> np.ndarray:
    """Midpoint of each control step (seconds)."""
    return (np.arange(n_steps) + 0.5) * step_s


def ar1_noise(noise: Noise, n_steps: int, rng: np.random.Generator) -> np.ndarray:
    """Mean-one log-normal factors whose log is a stationary AR(1) (std ``cv``)."""
    if noise.cv == 0.0:
        return np.ones(n_steps)
    phi = noise.correlation
    z = rng.standard_normal(n_steps) * noise.cv * np.sqrt(1.0 - phi * phi)
    z[0] = rng.standard_normal() * noise.cv  # start in the stationary law
    return np.asarray(np.exp(ar1(z, phi) - 0.5 * noise.cv**2))


def ar1(z: np.ndarray, phi: float) -> np.ndarray:
    """``x[0] = z[0]``, ``x[n] = z[n] + phi x[n-1]``: the recursion scipy's
    ``lfilter([1], [1, -phi], z)`` computes, term for term in the same floating-point
    order (so the same bits), without importing scipy.signal (0.7 s of CPU)."""
    x = np.empty(len(z))
    prev = 0.0
    for i, v in enumerate(z.tolist()):
        prev = v + phi * prev
        x[i] = prev
    return x


def burst_factor(
    spec: SyntheticTraffic, t_s: np.ndarray, horizon_s: float, rng: np.random.Generator
) -> np.ndarray:
    """``1 + sum of active bursts' magnitudes`` at each time in ``t_s``."""
    factor = np.ones_like(t_s)
    count = rng.poisson(spec.bursts_per_day * horizon_s / DAY_S)
    starts = rng.uniform(0.0, horizon_s, count)
    lengths = rng.exponential(spec.burst_duration_s, count)
    lo, hi = spec.burst_magnitude
    mags = rng.uniform(min(lo, hi), max(lo, hi), count)
    for start, length, mag in zip(starts, lengths, mags, strict=True):
        factor[(t_s >= start) & (t_s < start + length)] += mag
    return factor


def synthetic_rates(
    spec: SyntheticTraffic, step_s: float, n_steps: int, rngs: dict[str, np.random.Generator]
) -> np.ndarray:
    """Mean arrival rate (samples/s) of each control step (module doc formula)."""
    t = step_times_s(step_s, n_steps)
    phase = 2.0 * np.pi * (t / DAY_S - spec.peak_hour / 24.0)
    diurnal = 1.0 + spec.diurnal_amplitude * np.cos(phase)
    day = np.floor(t / DAY_S) % 7
    weekly = np.where(day >= 5, spec.weekend_factor, 1.0)
    bursts = burst_factor(spec, t, step_s * n_steps, rngs["bursts"])
    noise = ar1_noise(spec.noise, n_steps, rngs["noise"])
    return np.asarray(spec.mean_rate_per_s * diurnal * weekly * bursts * noise)


def read_rate_series(spec: TraceTraffic, base_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """(time_s, rate) of a trace file, sorted; raises KeyError/ValueError on bad data."""
    import pandas as pd  # only a trace needs it (start-up time)

    path = resolve_path(spec.path, base_dir).resolve()
    frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    for col in (spec.time_column, spec.rate_column):
        if col not in frame.columns:
            raise KeyError(f"column {col!r} not in {spec.path} (has {list(frame.columns)})")
    try:
        time_s = frame[spec.time_column].to_numpy(float)
        rate = frame[spec.rate_column].to_numpy(float)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{spec.path}: non-numeric time or rate ({e})") from None
    order = np.argsort(time_s, kind="stable")
    time_s, rate = time_s[order], rate[order]
    if len(time_s) < 2 or not np.all(np.isfinite(rate)) or rate.min() < 0 or rate.max() <= 0:
        raise ValueError(f"{spec.path}: need >= 2 rows of finite rates >= 0, not all 0")
    if not (np.all(np.isfinite(time_s)) and np.all(np.diff(time_s) > 0)):
        raise ValueError(f"{spec.path}: times must be finite and distinct")
    return time_s - time_s[0], rate


def trace_rates(
    spec: TraceTraffic,
    step_s: float,
    n_steps: int,
    rngs: dict[str, np.random.Generator],
    base_dir: Path,
) -> np.ndarray:
    """Trace rates interpolated to step midpoints, repeated, rescaled, times noise."""
    time_s, rate = read_rate_series(spec, base_dir)
    period_s = time_s[-1] + (time_s[-1] - time_s[-2])  # last row lasts one interval
    t = step_times_s(step_s, n_steps) % period_s
    shape = np.interp(t, time_s, rate)
    shape = shape * (spec.mean_rate_per_s / rate.mean())
    return np.asarray(shape * ar1_noise(spec.noise, n_steps, rngs["noise"]))


def build_rates(
    spec: SyntheticTraffic | TraceTraffic,
    step_s: float,
    n_steps: int,
    rngs: dict[str, np.random.Generator],
    base_dir: Path,
) -> np.ndarray:
    """The per-step mean arrival rate of the whole run (samples/s)."""
    if isinstance(spec, SyntheticTraffic):
        return synthetic_rates(spec, step_s, n_steps, rngs)
    return trace_rates(spec, step_s, n_steps, rngs, base_dir)


def partition_shares(partitions: int, skew: float) -> np.ndarray:
    """Share of the stream carried by each partition: Zipf-like ``(p + 1)^-skew``, sum 1.

    ``skew = 0`` gives equal partitions. Shares are fixed over a run (a simplification:
    production partitions drift slowly).
    """
    weights = (np.arange(partitions) + 1.0) ** -float(skew)
    return np.asarray(weights / weights.sum())
