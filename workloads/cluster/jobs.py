"""The job table of a cluster run: sources, per-GPU-type speeds and deadlines.

Heterogeneity is data: ``speed[j, t]`` divides job j's GPU stage on GPU type t, taken
from a throughput table (Gavel's measured steps/s, relative to the reference type).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hetsim.workloads.cluster.data import (
    RawJobs,
    csv_rows,
    number,
    read_alibaba_tasks,
    read_muri_trace,
    read_speed_table,
    read_stage_profiles,
)
from hetsim.workloads.cluster.params import ClusterParams, Deadlines, SpeedTable, SyntheticJobs
from hetsim.workloads.cluster.sources import (
    helios_jobs,
    jobs_from_durations,
    philly_jobs,
    poisson_mix,
)
from hetsim.workloads.paths import resolve_path


@dataclass(frozen=True)
class JobTable:
    """Every job of a run, one row each (arrays are never written after construction)."""

    submit_s: np.ndarray  # (n,)
    gpus: np.ndarray  # (n,) GPUs per job (gang-scheduled)
    model: tuple[str, ...]
    iterations: np.ndarray  # (n,)
    stages_s: np.ndarray  # (n, k) per-iteration stage times on the reference type
    speed: np.ndarray  # (n, T) GPU-stage speed on each type relative to the reference
    allowed: np.ndarray  # (n, T) bool: type usable by the job
    deadline_s: np.ndarray  # (n,) absolute deadline, inf for best-effort jobs
    solo_s: np.ndarray  # (n,) solo duration on the reference type (deadline base)
    iter_ref_s: np.ndarray  # (n,) solo iteration time on the reference type, no interference
    skipped_rows: int = 0

    @property
    def n(self) -> int:
        """Number of jobs."""
        return len(self.submit_s)

    def stages_on(self, job: int, t: int) -> np.ndarray:
        """Per-iteration stage times of ``job`` on GPU type index ``t``."""
        s = self.stages_s[job].copy()
        s[1] /= self.speed[job, t]
        return s

    def solo_iter_on(self, job: int, t: int) -> float:
        """Solo iteration time of ``job`` on type ``t`` (no interference factor): the
        reference-type time scaled by the ratio of its stage sums on ``t`` and the reference
        (an assumption where the measured time is not the stage sum)."""
        ref = float(self.stages_s[job].sum())
        return float(self.iter_ref_s[job]) * float(self.stages_on(job, t).sum()) / ref


def synthetic_jobs(
    spec: SyntheticJobs,
    profiles: Mapping[tuple[str, int], tuple[float, ...]],
    rng: np.random.Generator,
) -> RawJobs:
    """Poisson arrivals; GPU count by weight; model uniform; lognormal solo duration."""
    submit, gpus, models = poisson_mix(spec, rng)
    duration = spec.duration_median_s * np.exp(
        spec.duration_sigma * rng.standard_normal(spec.num_jobs)
    )
    return jobs_from_durations(submit, gpus, models, duration, profiles, 0)


def speed_matrix(
    models: tuple[str, ...], types: list[str], spec: SpeedTable, base: Path
) -> np.ndarray:
    """(n, T) GPU-stage speed of each job on each type (0: the table says infeasible)."""
    table = read_speed_table(resolve_path(spec.path, base))
    rows: dict[str, np.ndarray] = {}
    for m in dict.fromkeys(models):
        if m not in spec.model_map:
            rows[m] = np.ones(len(types))  # no per-type data: heterogeneity-blind job
            continue
        name = spec.model_map[m]
        if name not in table:
            raise KeyError(f"speeds.model_map: {name!r} is not in the throughput table")
        thr = table[name]
        if spec.reference_type not in thr:
            raise KeyError(f"speeds.reference_type {spec.reference_type!r} not in the table")
        rows[m] = np.array([_speed(thr, t, spec) for t in types])
    return np.array([rows[m] for m in models])


def _speed(thr: dict[str, float], t: str, spec: SpeedTable) -> float:
    if t in thr:
        return thr[t] / thr[spec.reference_type]
    if t in spec.type_speeds:
        return spec.type_speeds[t]
    raise KeyError(
        f"GPU type {t!r} has no throughput column and no speeds.type_speeds entry; "
        f"table types: {sorted(thr)}"
    )


def read_iteration_times(path: Path) -> dict[tuple[str, int], float]:
    """(model, GPUs) -> measured solo iteration time in s (``iteration_time_ms`` column)."""
    out = {}
    for line, row in csv_rows(path):
        key = (row["model"], int(number(path, line, row, "num_gpu", 1)))
        out[key] = number(path, line, row, "iteration_time_ms") / 1e3
    return out


def solo_iterations(raw: RawJobs, p: ClusterParams, base: Path) -> np.ndarray:
    """Solo iteration time per job on the reference type with ``solo_time: measured`` (as
    Muri's simulator): the trace's ``iteration_time`` column, or for generated jobs the
    measured time of its (model, GPUs) profile; else the sum of its stage times."""
    stage_sum = raw.stages_s.sum(axis=1)
    if p.execution.solo_time == "stage_sum":
        return stage_sum
    if raw.iter_s is not None:  # the trace's own column (Muri's traces), stage sum if absent
        return np.where(np.isnan(raw.iter_s), stage_sum, raw.iter_s)
    table = read_iteration_times(resolve_path(p.stage_profiles_path, base))
    return np.array([
        table.get((m, int(g)), s) for m, g, s in zip(raw.model, raw.gpus, stage_sum, strict=True)
    ])  # fmt: skip


def deadlines(
    solo_s: np.ndarray, submit_s: np.ndarray, spec: Deadlines, rng: np.random.Generator
) -> np.ndarray:
    """Absolute deadlines: submit + U[low, high] x solo duration for a ``fraction`` of jobs."""
    if spec.factor_high < spec.factor_low:
        raise ValueError("deadlines.factor_high must be >= factor_low")
    n = len(solo_s)
    has = rng.random(n) < spec.fraction
    lam = rng.uniform(spec.factor_low, spec.factor_high, n)
    return np.where(has, submit_s + lam * solo_s, np.inf)


def build_jobs(
    p: ClusterParams, types: list[str], base: Path, rngs: dict[str, np.random.Generator]
) -> JobTable:
    """Read or generate the jobs, then attach speeds, type limits and deadlines."""
    spec = p.jobs
    if spec.kind == "synthetic":
        raw = synthetic_jobs(
            spec, read_stage_profiles(resolve_path(p.stage_profiles_path, base)), rngs["jobs"]
        )
    elif spec.kind == "philly":  # workloads.cluster_sources
        raw = philly_jobs(
            spec, base, read_stage_profiles(resolve_path(p.stage_profiles_path, base)), rngs["jobs"]
        )
    elif spec.kind == "helios":
        raw = helios_jobs(
            spec, base, read_stage_profiles(resolve_path(p.stage_profiles_path, base)), rngs["jobs"]
        )
    elif spec.kind == "muri_trace":
        known = set(p.speeds.model_map)
        raw = read_muri_trace(
            resolve_path(spec.path, base),
            known,
            spec.skip_bad_rows,
            spec.max_jobs,
            spec.submit_at_zero,
        )
    else:
        raw = read_alibaba_tasks(
            resolve_path(spec.trace_dir, base) / spec.file,
            set(types),
            spec.skip_bad_rows,
            spec.max_jobs,
        )
    speed = speed_matrix(raw.model, types, p.speeds, base)
    allowed = speed > 0
    for j, limit in enumerate(raw.allowed):
        if limit is not None:
            allowed[j] &= np.array([t in limit for t in types])
    iter_ref = solo_iterations(raw, p, base)
    solo = raw.iterations * iter_ref * p.execution.interference[0]
    dl = deadlines(solo, raw.submit_s, p.deadlines, rngs["deadlines"])
    speed = np.where(allowed, speed, 1.0)  # unused where not allowed; avoids division by 0
    return JobTable(
        raw.submit_s, raw.gpus, raw.model, raw.iterations, raw.stages_s, speed, allowed, dl, solo,
        iter_ref, raw.skipped_rows,
    )  # fmt: skip
