"""Summary metrics and tables of the cluster workload, each with its definition."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from hetsim.devices.carbon import CARBON_METRICS, carbon_columns
from hetsim.devices.power import cluster_duty_cycle
from hetsim.workloads.cluster.power_cap import inventory_power_models

if TYPE_CHECKING:
    from hetsim.devices.cluster import Cluster
    from hetsim.simulator.engine import Simulation
    from hetsim.workloads.cluster.estimates import Estimator
    from hetsim.workloads.cluster.jobs import JobTable
    from hetsim.workloads.cluster.model import GpuPool, Group
    from hetsim.workloads.cluster.params import ClusterParams

JOB_COLUMNS = (
    "job", "model", "gpus", "submit_s", "start_s", "end_s", "jct_s", "queue_s", "deadline_s",
    "met_deadline", "preemptions", "gpu_type", "group_size", "solo_s",
)  # fmt: skip

METRICS = {
    "jobs": "number of jobs in the run (after skipped trace rows)",
    "completed": "jobs that finished",
    "mean_jct_s": "mean over finished jobs of end_s - submit_s",
    "p50_jct_s": "median of end_s - submit_s",
    "p99_jct_s": "99th percentile of end_s - submit_s",
    "makespan_s": "last end_s minus first submit_s",
    "mean_queue_s": "mean of first start_s - submit_s",
    "deadline_jobs": "jobs with a deadline",
    "dsr": "deadline satisfaction rate: deadline jobs with end_s <= deadline_s / deadline jobs",
    "infeasible_deadlines": "deadline jobs whose deadline is before submit + solo time on the "
    "fastest allowed type (cannot be met even alone)",
    "utilisation": "sum of GPU-seconds allocated (restarts included) / (GPUs x makespan_s)",
    "utilisation_by_type": "the same per GPU type, as 'type:value' pairs",
    "packed_share": "share of allocated GPU-seconds held by groups that ever had >= 2 jobs",
    "work_per_gpu_s": "sum over finished jobs of solo_s x gpus / allocated GPU-seconds: work "
    "done per GPU-second held, in solo reference-type seconds (> 1: interleaving or faster "
    "types do more work per GPU-second; restarts and slower types lower it)",
    "preemptions": "total preemptions (a running group stopped and requeued in a round)",
    "skipped_rows": "trace rows skipped as bad (only with skip_bad_rows)",
    "energy_J": "GPU energy of the inventory over the makespan, J: every GPU at its idle "
    "power (devices/power.yaml) plus, per allocated GPU-second, cluster_duty_cycle x "
    "(f x (power limit - idle) + (1 - f) x (memory-bound draw - idle)) (a kernel runs "
    "that share of allocated time; f = execution.compute_bound_fraction of it at the "
    "power limit, cluster.accelerator_power_cap_w if set); hosts not included",
    "avg_power_W": "energy_J / makespan_s",
    "peak_power_W": "highest per-GPU draw of any type (its power limit if allocated, else idle)",
    "avg_power_W_by_type": "'type:W' pairs joined by ';': a type's energy / (its GPUs x "
    "makespan_s)",
    "peak_power_W_by_type": "'type:W' pairs joined by ';': peak_power_W per GPU type",
    "energy_per_job_J": "energy_J / completed jobs (idle GPUs included)",
    **CARBON_METRICS,
    "carbon_per_job_g": "carbon_g / completed jobs, gCO2e",
}


class ClusterOutcome(Protocol):
    """What the summary reads of a cluster run (workloads.cluster.workload.ClusterWorkload):
    the jobs, the pool and the per-job and per-allocation records kept during the run."""

    sim: Simulation
    cluster: Cluster
    params: ClusterParams
    types: list[str]
    pool: GpuPool
    jobs: JobTable
    est: Estimator
    #: per job: completion time, first start time (nan: not yet), preemptions
    finish: np.ndarray
    first_start: np.ndarray
    preemptions: np.ndarray
    #: running groups by id
    groups: dict[int, Group]
    #: (type, GPUs, start_s, end_s, largest size) of every allocation that ended
    alloc_spans: list[tuple[int, int, float, float, int]]


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def utilisation_table(wl: ClusterOutcome, t0: float, t1: float) -> None:
    """Per-type utilisation in equal time bins (table ``utilisation``)."""
    table = wl.sim.recorder.table("utilisation", ("gpu_type", "start_s", "end_s", "utilisation"))
    edges = np.linspace(t0, t1, wl.params.utilisation_bins + 1)
    busy = np.zeros((len(wl.types), len(edges) - 1))
    for t, g, s, e, _ in wl.alloc_spans:
        overlap = np.clip(np.minimum(edges[1:], e) - np.maximum(edges[:-1], s), 0, None)
        busy[t] += g * overlap
    width = np.diff(edges)
    for t, name in enumerate(wl.types):
        for b in range(len(width)):
            u = busy[t, b] / (wl.pool.total[t] * width[b]) if width[b] > 0 else 0.0
            table.append(name, float(edges[b]), float(edges[b + 1]), float(u))


def summarise(wl: ClusterOutcome, end_s: float) -> dict[str, float | int | str]:
    """The summary row."""
    jb = wl.jobs
    done = ~np.isnan(wl.finish)
    jct = (wl.finish - jb.submit_s)[done]
    t0 = float(jb.submit_s.min())
    last = float(np.nanmax(wl.finish)) if done.any() else end_s
    span = max(last - t0, 1e-12)
    for grp in list(wl.groups.values()):  # runs cut by until_s: account what is allocated
        wl.alloc_spans.append((grp.t, grp.gpus, grp.start_s, end_s, grp.max_size))
    busy = np.zeros(len(wl.types))
    packed = 0.0
    for t, g, s, e, size in wl.alloc_spans:
        busy[t] += g * (e - s)
        packed += g * (e - s) if size >= 2 else 0.0
    has_dl = np.isfinite(jb.deadline_s)
    best = wl.est.best_solo * jb.iterations
    met = done & has_dl & (wl.finish <= jb.deadline_s)
    utilisation_table(wl, t0, last)
    util = busy / (wl.pool.total * span)
    by_type = " ".join(f"{n}:{util[t]:.4f}" for t, n in enumerate(wl.types))
    return {
        "jobs": jb.n,
        "completed": int(done.sum()),
        "mean_jct_s": float(jct.mean()) if len(jct) else float("nan"),
        "p50_jct_s": _pct(jct, 50),
        "p99_jct_s": _pct(jct, 99),
        "makespan_s": span,
        "mean_queue_s": float(np.nanmean(wl.first_start - jb.submit_s)),
        "deadline_jobs": int(has_dl.sum()),
        "dsr": float(met.sum() / has_dl.sum()) if has_dl.any() else float("nan"),
        "infeasible_deadlines": int((has_dl & (jb.submit_s + best > jb.deadline_s)).sum()),
        "utilisation": float(busy.sum() / (wl.pool.total.sum() * span)),
        "utilisation_by_type": by_type,
        "packed_share": float(packed / busy.sum()) if busy.sum() > 0 else 0.0,
        "work_per_gpu_s": float((jb.solo_s * jb.gpus)[done].sum() / busy.sum())
        if busy.sum() > 0
        else 0.0,
        "preemptions": int(wl.preemptions.sum()),
        "skipped_rows": int(jb.skipped_rows),
        **_energy(wl, busy, span, int(done.sum())),
    }


def _energy(wl: ClusterOutcome, busy: np.ndarray, span: float, completed: int) -> dict[str, Any]:
    """Energy of the inventory over the makespan (:data:`CLUSTER_ENERGY_METRICS`): every
    GPU idles, and an allocated GPU-second adds ``duty x (f (limit - idle) + (1 - f)
    (memory_W - idle))`` (devices/power.py ``cluster_duty_cycle``: the share of allocated
    time a kernel runs; ``f``: ``execution.compute_bound_fraction``, the share of kernel
    time at the power limit, the run's cap if any; the rest draws the memory-bound power)."""
    duty = cluster_duty_cycle()
    f = wl.params.execution.compute_bound_fraction
    total, avg, peak = 0.0, {}, {}
    models = inventory_power_models(wl.types, wl.cluster.config)
    if models is None:  # a GPU type of the user's inventory with no power data: no energy
        nan = float("nan")
        return {"energy_J": nan, "avg_power_W": nan, "peak_power_W": nan,
                "avg_power_W_by_type": "", "peak_power_W_by_type": "",
                "energy_per_job_J": nan}  # fmt: skip
    for t, (name, pm) in enumerate(zip(wl.types, models, strict=True)):
        gpus = float(wl.pool.total[t])
        kernel_W = f * (pm.limit_W - pm.idle_W) + (1.0 - f) * (pm.memory_W - pm.idle_W)
        e = pm.idle_W * gpus * span + duty * kernel_W * float(busy[t])
        total += e
        avg[name] = e / (gpus * span) if gpus > 0 else 0.0
        peak[name] = pm.limit_W if busy[t] > 0 else pm.idle_W
    gpu_s = {name: float(wl.pool.total[t]) * span for t, name in enumerate(wl.types)}
    carbon = carbon_columns(total, span, gpu_s, wl.cluster.config.carbon, wl.cluster.load_grid())
    return {
        "energy_J": total,
        "avg_power_W": total / span,
        "peak_power_W": max(peak.values(), default=0.0),
        "avg_power_W_by_type": ";".join(f"{n}:{v:.6g}" for n, v in avg.items()),
        "peak_power_W_by_type": ";".join(f"{n}:{v:.6g}" for n, v in peak.items()),
        "energy_per_job_J": total / completed if completed else float("nan"),
        **carbon,
        "carbon_per_job_g": carbon["carbon_g"] / completed if completed else float("nan"),
    }
