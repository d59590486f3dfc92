"""Summary metrics and result tables of the elastic workload (computed once, vectorised).

Freshness comes from the cumulative arrival and consumption curves A(t), D(t) at the
step boundaries (:func:`workloads.elastic_model.oldest_age_s`); everything else is a
sum over the per-step trace the control loop filled.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

import numpy as np

from hetsim.devices.carbon import CARBON_METRICS
from hetsim.devices.energy import ENERGY_METRICS
from hetsim.workloads.elastic.model import oldest_age_s, sample_delays_s

if TYPE_CHECKING:
    from hetsim.simulator.engine import Simulation
    from hetsim.workloads.elastic.params import ElasticParams

METRICS: dict[str, str] = {
    "accumulated_lag_sample_s": "integral of the backlog L(t) over the run (sample-seconds)",
    "mean_lag_samples": "accumulated_lag_sample_s / run length",
    "peak_lag_samples": "max of L(t) at step boundaries",
    "downtime_s": "sum of the downtimes of all rescales (clipped to the run's end)",
    "slo_violation_rate": (
        "fraction of step boundaries at which the oldest unconsumed sample is older than "
        "slo_freshness_s (time-weighted SLO violation)"
    ),
    "slo_violation_samples": (
        "fraction of samples whose consumption delay D^-1(A(s)) - s exceeds slo_freshness_s "
        "(each step's samples take its mid-step sample's delay; unconsumed: age at the end)"
    ),
    "mean_freshness_s": "sample-weighted mean consumption delay",
    "p99_oldest_age_s": "99th percentile over step boundaries of the oldest sample's age",
    "scaling_actions": "number of rescales (replica changes after t = 0)",
    "scale_ups": "rescales that added workers",
    "scale_downs": "rescales that removed workers",
    "gpu_hours": "sum over steps of GPUs held x step_s / 3600 (held through downtime, and by "
    "workers still starting under partial rescaling)",
    "mean_replicas": "time-average of replicas held",
    "gpu_wait_s": "time during which the target exceeded the replicas held while the job was up",
    "forecast_wape": (
        "mean over decisions of sum |forecast - actual| / sum actual over the horizon "
        "(horizons with no arrivals left out; nan without a forecaster in use)"
    ),
    "consumed_fraction": "samples consumed / samples arrived",
    "per_worker_rate_per_s": "cost-model samples/s of one worker (roofline + PS link)",
}


ENERGY: dict[str, str] = {
    **ENERGY_METRICS,
    "energy_job_J": "energy of the GPUs while the job holds them, J: idle_W x GPU-seconds "
    "held (gpu_hours) plus the draw above idle of the samples consumed; each sample keeps "
    "a worker busy for the cost model's time per sample (roofline + PS link, over the "
    "step's true throughput factor) at memory_W plus the compute utilisation of its FLOPs "
    "at the compute roof's share of the way to the power limit (devices/power.py)",
    "energy_per_sample_J": "energy_job_J / samples consumed",
    "energy_per_gpu_hour_J": "energy_job_J / gpu_hours",
    **CARBON_METRICS,
}
"""Energy columns of the elastic workload (beside :data:`METRICS`)."""


class ElasticRun(Protocol):
    """What the metrics and tables read of an elastic run
    (workloads.elastic.workload.ElasticWorkload): its arrival rates and the per-step trace
    its control loop filled."""

    sim: Simulation
    params: ElasticParams
    step_s: float
    #: cost-model samples/s of one worker
    mu_1: float
    #: arrival rate per step (samples/s)
    rates: np.ndarray
    #: per-step columns: replicas, target, uptime_s, capacity_per_s, consumed,
    #: lag_integral, forecast_per_s
    trace: dict[str, np.ndarray]
    #: backlog at each step boundary
    lag_at: np.ndarray
    #: (time_s, from, to, downtime_s) per rescale
    rescales: list[tuple[float, int, int, float]]
    #: WAPE of each forecast decision
    forecast_errors: list[float]
    #: whether the ``timeline`` and ``rescales`` tables were written already
    timeline_written: bool


def cumulative(w: ElasticRun, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A and D (cumulative arrived and consumed samples) at boundaries 0..k."""
    arrived = np.concatenate(([0.0], np.cumsum(w.rates[:k] * w.step_s)))
    consumed = np.concatenate(([0.0], np.cumsum(w.trace["consumed"][:k])))
    return arrived, consumed


def freshness(w: ElasticRun, k: int) -> dict[str, float]:
    """SLO and freshness metrics from the cumulative curves."""
    arrived, consumed = cumulative(w, k)
    age = oldest_age_s(arrived, consumed, w.lag_at[: k + 1], w.step_s)
    delay, counts = sample_delays_s(arrived, consumed, w.step_s)
    slo = w.params.slo_freshness_s
    total = counts.sum()
    return {
        "slo_violation_rate": float(np.mean(age[1:] > slo)),
        "slo_violation_samples": float(counts[delay > slo].sum() / total) if total else 0.0,
        "mean_freshness_s": float((delay * counts).sum() / total) if total else 0.0,
        "p99_oldest_age_s": float(np.percentile(age[1:], 99)),
        "consumed_fraction": float(consumed[-1] / arrived[-1]) if arrived[-1] else 1.0,
    }


def scaling(w: ElasticRun, k: int) -> dict[str, float | int]:
    """Rescale counts, downtime, GPU use and waiting."""
    end_s = k * w.step_s
    ups = sum(1 for _, old, new, _ in w.rescales if new > old)
    replicas = w.trace["replicas"][:k]
    waiting = (w.trace["target"][:k] > replicas) & (w.trace["uptime_s"][:k] > 0)
    return {
        "downtime_s": float(sum(min(d, end_s - t) for t, _, _, d in w.rescales)),
        "scaling_actions": len(w.rescales),
        "scale_ups": ups,
        "scale_downs": len(w.rescales) - ups,
        "gpu_hours": float(w.trace["held"][:k].sum() * w.step_s / 3600.0),
        "mean_replicas": float(replicas.mean()) if k else 0.0,
        "gpu_wait_s": float(waiting.sum() * w.step_s),
    }


def summarise(w: ElasticRun, k: int) -> dict[str, float | int | str]:
    """Every metric of :data:`METRICS` for the first ``k`` steps."""
    integral = float(w.trace["lag_integral"][:k].sum())
    errors = w.forecast_errors
    out: dict[str, float | int | str] = {
        "accumulated_lag_sample_s": integral,
        "mean_lag_samples": integral / (k * w.step_s) if k else 0.0,
        "peak_lag_samples": float(w.lag_at[: k + 1].max()),
        "forecast_wape": float(np.mean(errors)) if errors else math.nan,
        "per_worker_rate_per_s": w.mu_1,
    }
    out.update(scaling(w, k))
    out.update(freshness(w, k))
    return {m: out[m] for m in METRICS}


def write_tables(w: ElasticRun, k: int) -> None:
    """The ``timeline`` table (one row per step) and ``rescales`` (one per rescale)."""
    if w.timeline_written:
        return
    w.timeline_written = True
    arrived, consumed = cumulative(w, k)
    age = oldest_age_s(arrived, consumed, w.lag_at[: k + 1], w.step_s)
    tr = w.trace
    cols = {
        "time_s": np.arange(k) * w.step_s,
        "rate_per_s": w.rates[:k],
        "forecast_per_s": tr["forecast_per_s"][:k],
        "replicas": tr["replicas"][:k],
        "target": tr["target"][:k],
        "uptime_s": tr["uptime_s"][:k],
        "capacity_per_s": tr["capacity_per_s"][:k],
        "consumed_per_s": tr["consumed"][:k] / w.step_s,
        "lag_samples": w.lag_at[1 : k + 1],
        "oldest_age_s": age[1:],
    }
    table = w.sim.recorder.table("timeline", list(cols))
    for row in zip(*(c.tolist() for c in cols.values()), strict=True):
        table.append(*row)
    rescales = w.sim.recorder.table("rescales", ["time_s", "from", "to", "downtime_s"])
    for row in w.rescales:
        rescales.append(*row)
