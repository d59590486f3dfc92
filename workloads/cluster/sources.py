"""Job sources drawn from the public Philly and Helios derivatives (not per-job replays).

Neither trace's per-job log is available here (../shared/data/philly/SOURCE.md,
../shared/data/helios/SOURCE.md), so both sources generate jobs from what the files
support, each mapping documented in docs/cluster.md:

- ``philly``: solo durations resampled (with replacement) from Philly's job run times;
  Poisson arrivals at a given rate; GPU counts by weight (default: Muri trace1's
  Philly-derived counts). The run times are taken as solo durations on the reference type
  (ASSUMPTION: Philly ran P100/P40-class GPUs; the file has no GPU type).
- ``helios``: one cluster's GPU-job summary row: Poisson arrivals at gpu_job_num / trace
  span (x ``rate_scale``); lognormal durations with the row's median and mean
  (``sigma = sqrt(2 ln(mean / median))``); GPU counts from a two-point mix: the median
  count w.p. 1 - p, else B = the smallest power of two >= 8 (one 8-GPU node) with
  p = (mean - median) / (B - median) <= 1/2, so both the mean and the median match
  (RECONSTRUCTION: the summary gives only mean and median).

Models are drawn uniformly from the source's list and get their stage profiles like the
synthetic source; iterations = duration / iteration time of the profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from hetsim.workloads.cluster.data import (
    STAGES,
    HeliosStats,
    RawJobs,
    read_helios_summary,
    read_runtimes,
)
from hetsim.workloads.cluster.params import HeliosJobs, PhillyJobs, SyntheticJobs
from hetsim.workloads.paths import resolve_path

DAY_S = 86400.0
#: largest GPU count of the stage-profile table (Muri's traces go up to 32)
MAX_HELIOS_GPUS = 32


def poisson_mix(
    spec: PhillyJobs | SyntheticJobs, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Submit times (Poisson at ``arrival_rate_per_s``), GPU counts drawn by weight and
    models drawn uniformly, for ``num_jobs`` jobs, in that draw order."""
    n = spec.num_jobs
    submit = np.cumsum(rng.exponential(1.0 / spec.arrival_rate_per_s, n))
    counts = np.array([c for c, _ in spec.gpu_counts], dtype=np.int64)
    weights = np.array([w for _, w in spec.gpu_counts], dtype=float)
    gpus = rng.choice(counts, size=n, p=weights / weights.sum())
    models = [spec.models[i] for i in rng.integers(0, len(spec.models), n)]
    return submit, gpus, models


def jobs_from_durations(
    submit_s: np.ndarray, gpus: np.ndarray, models: list[str], duration_s: np.ndarray,
    profiles: Mapping[tuple[str, int], tuple[float, ...]], skipped: int,
) -> RawJobs:  # fmt: skip
    """RawJobs with each job's stage profile and iterations = duration / iteration time."""
    n = len(submit_s)
    stages = np.empty((n, len(STAGES)))
    for j in range(n):
        key = (models[j], int(gpus[j]))
        if key not in profiles:
            raise KeyError(f"no stage profile for model {key[0]!r} on {key[1]} GPUs")
        stages[j] = profiles[key]
    iters = np.maximum(1, np.round(duration_s / stages.sum(axis=1))).astype(np.int64)
    return RawJobs(submit_s, gpus.astype(np.int64), tuple(models), iters, stages, (None,) * n,
                   skipped)  # fmt: skip


def philly_jobs(
    spec: PhillyJobs, base: Path, profiles: Mapping[tuple[str, int], tuple[float, ...]],
    rng: np.random.Generator,
) -> RawJobs:  # fmt: skip
    """Philly run times resampled as solo durations; Poisson arrivals; weighted GPU counts."""
    runtimes, bad = read_runtimes(resolve_path(spec.runtime_path, base), spec.skip_bad_rows,
                                  spec.min_runtime_s)  # fmt: skip
    submit, gpus, models = poisson_mix(spec, rng)
    duration = runtimes[rng.integers(0, len(runtimes), spec.num_jobs)]
    return jobs_from_durations(submit, gpus, models, duration, profiles, bad)


def helios_gpu_mix(stats: HeliosStats) -> tuple[np.ndarray, np.ndarray]:
    """GPU counts and probabilities of the two-point mix matching the mean and median."""
    low = round(stats.median_gpus)
    if stats.mean_gpus <= low:
        return np.array([low]), np.array([1.0])
    big = 8
    while (stats.mean_gpus - low) / (big - low) > 0.5:
        big *= 2
        if big > MAX_HELIOS_GPUS:
            raise ValueError(f"mean of {stats.mean_gpus} GPUs needs jobs over 32 GPUs")
    p = (stats.mean_gpus - low) / (big - low)
    return np.array([low, big]), np.array([1.0 - p, p])


def helios_jobs(
    spec: HeliosJobs, base: Path, profiles: Mapping[tuple[str, int], tuple[float, ...]],
    rng: np.random.Generator,
) -> RawJobs:  # fmt: skip
    """Jobs matched to one Helios cluster's GPU-job summary (rate, durations, GPUs)."""
    stats, bad = read_helios_summary(
        resolve_path(spec.summary_path, base), spec.cluster, spec.skip_bad_rows
    )
    rate = stats.gpu_jobs / (spec.period_days * DAY_S) * spec.rate_scale
    n = spec.num_jobs
    submit = np.cumsum(rng.exponential(1.0 / rate, n))
    counts, probs = helios_gpu_mix(stats)
    gpus = rng.choice(counts, size=n, p=probs)
    models = [spec.models[i] for i in rng.integers(0, len(spec.models), n)]
    sigma = float(np.sqrt(2.0 * np.log(stats.mean_run_s / stats.median_run_s)))
    duration = stats.median_run_s * np.exp(sigma * rng.standard_normal(n))
    return jobs_from_durations(submit, gpus, models, duration, profiles, bad)
