"""Elastic online training: a live sample stream, a rescalable job, lag and freshness.

A recommendation model trains on a stream whose rate lambda(t) swings by day and
week and bursts at events (:mod:`workloads.elastic_traffic`). A synchronous
parameter-server job on ``n`` GPUs consumes it at ``mu_eff(n)`` samples/s
(:mod:`workloads.elastic_model`: roofline + PS link per worker, contention, PS
bandwidth cap, most-loaded worker). What it cannot consume piles up as lag. The
mechanism advances in control steps of ``step_s`` (one SimPy timeout per step, the
backlog a fluid with exact per-step integration) and asks three decision points:

* ``autoscaler`` every ``sync_period_s``: the desired replica count, from a view of
  lag, utilisation, the cost model's throughput table and (if wanted) a forecast;
* ``forecaster`` whenever the autoscaler wants a forecast horizon;
* ``balance`` for each replica count: which worker reads which partition.

A replica change is applied at the next step boundary when the job is up: a
scale-down at once, a scale-up as far as free GPUs allow (the rest waits for GPUs).
Each change stops consumption for its downtime (checkpoint, start, rebalance,
shuffle). The first decision, at t = 0, sets the starting size with no downtime.

Energy (:mod:`hetsim.devices.energy`): a worker is busy ``1 / (mu_1 x f_k)`` per sample
it consumes (the cost model's time per sample, roofline plus PS link, over step ``k``'s
true throughput factor) at compute utilisation ``f_k x flops_per_sample / roof x mu_1``;
communication counts as memory-bound. The rest of a held GPU's time (downtime, waiting at
the synchronisation, an empty backlog, a worker starting) is idle. Workers occupy the
pool's first GPUs in order and share a step's samples equally (the total does not depend
on the split: the power model is linear); GPUs held by background tenants are counted
idle (their work is not modelled). The draw is a step average (the fluid model has no
finer timing).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from hetsim.devices.cluster import Cluster
from hetsim.devices.energy import per_unit, run_energy
from hetsim.devices.power import cap_ratio, compute_roof_flops
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.registry import link_types, workloads
from hetsim.workloads.base import Workload
from hetsim.workloads.elastic.metrics import ENERGY, METRICS, summarise, write_tables
from hetsim.workloads.elastic.model import (
    fluid_step,
    per_worker_rate_per_s,
    scaling_curve,
)
from hetsim.workloads.elastic.params import ElasticParams
from hetsim.workloads.elastic.traffic import DAY_S, build_rates, partition_shares
from hetsim.workloads.elastic.view import (
    BalanceView,
    ForecastView,
    OracleForecastView,
    ScaleView,
    frozen,
)


@workloads.register("elastic")
class ElasticWorkload(Workload):
    """Online training fed by a time-varying stream: lag, rescale downtime, GPU pool."""

    Params = ElasticParams
    domain = "elastic"
    decision_points: ClassVar[dict[str, str]] = {
        "autoscaler": "kale",
        "forecaster": "holt-winters",
        "balance": "rebalance",
    }
    metrics: ClassVar[dict[str, str]] = {**METRICS, **ENERGY}

    def __init__(
        self,
        sim: Simulation,
        cluster: Cluster,
        params: ElasticParams,
        policies: dict[str, Any],
        base_dir: Path,
    ) -> None:
        super().__init__(sim, cluster, params, policies, base_dir)
        p = params
        self.autoscaler = policies["autoscaler"]
        self.forecaster = policies["forecaster"]
        self.balancer = policies["balance"]
        self.step_s = p.step_s
        self.n_steps = math.ceil(p.duration_s / p.step_s - 1e-9)
        names = ("bursts", "noise", "throughput")
        rngs = {k: sim.rng(f"elastic.{k}") for k in names}
        self.rates = build_rates(p.traffic, p.step_s, self.n_steps, rngs, base_dir)
        self.shares = frozen(partition_shares(p.partitions, p.partition_skew))
        gpus = self._pool_gpus(cluster)
        self.pool_size = len(gpus)
        self.max_replicas = p.max_replicas or self.pool_size
        if self.max_replicas > self.pool_size:
            raise ValueError(f"max_replicas {self.max_replicas} > {self.pool_size} pool GPUs")
        self.mu_1 = self._per_worker_rate(cluster, gpus[0])
        self.gpus = gpus
        spec = cluster.device(gpus[0]).spec
        roof = compute_roof_flops(spec, p.job.dtype, cap_ratio(spec))
        #: seconds of one sample at the full compute roof (energy)
        self.sample_compute_s = p.job.flops_per_sample / roof if roof > 0 else 0.0
        self._energy_out: dict[str, float | int | str] | None = None
        self.est = frozen(self._throughput_table())
        cv = p.job.throughput_noise_cv
        z = rngs["throughput"].standard_normal(self.n_steps)
        self.true_factor = p.job.efficiency_vs_estimate * np.exp(cv * z - 0.5 * cv * cv)
        self.background = self._background_gpus()
        self.sync_steps = max(1, round(self.autoscaler.sync_period_s / p.step_s))
        self.horizon_steps = math.ceil(self.autoscaler.horizon_s / p.step_s - 1e-9)
        self._init_state()

    # ---- set-up -----------------------------------------------------------------
    def _pool_gpus(self, cluster: Cluster) -> list[str]:
        names = cluster.usable(
            ("gpu", "npu", "server"), "the elastic workload", self.params.pool.gpus or None
        )
        if not names:
            raise ValueError("the cluster has no gpu/npu/server device for the GPU pool")
        types = {cluster.device(n).spec.name for n in names}
        if len(types) > 1:
            raise ValueError(f"the GPU pool must be one device type, got {sorted(types)}")
        return list(names)

    def _per_worker_rate(self, cluster: Cluster, gpu: str) -> float:
        job = self.params.job
        return per_worker_rate_per_s(
            cluster.device(gpu),
            link_types.get(job.worker_link),
            job.batch_per_worker,
            job.flops_per_sample,
            job.hbm_bytes_per_sample,
            job.ps_bytes_per_sample,
            job.dtype,
        )

    def _throughput_table(self) -> np.ndarray:
        """Cost-model ``mu_eff(n)`` for n = 0..max under the balance policy's placement."""
        job = self.params.job
        ps_Bps = link_types.get(job.ps_link).bandwidth_Bps * job.ps_shards
        cap = ps_Bps / job.ps_bytes_per_sample if job.ps_bytes_per_sample > 0 else math.inf
        n = np.arange(self.max_replicas + 1)
        mu = scaling_curve(n, self.mu_1, job.kappa, cap)
        self.f_max = np.ones(len(n))
        for k in range(1, len(n)):
            loads = np.asarray(self.balancer.assign(BalanceView(k, self.shares)), dtype=float)
            if loads.shape != (k,) or abs(loads.sum() - 1.0) > 1e-9 or loads.min() < 0:
                raise InvariantViolation(f"balance gave loads {loads} for {k} workers")
            self.f_max[k] = float(loads.max())
        out = mu / np.maximum(n * self.f_max, 1e-300)
        out[0] = 0.0
        return np.asarray(out)

    def _background_gpus(self) -> np.ndarray:
        pool = self.params.pool
        t = (np.arange(self.n_steps) + 0.5) * self.step_s
        phase = 2 * np.pi * (t / DAY_S - pool.background_peak_hour / 24)
        held = self.pool_size * pool.background_fraction
        held = held * (1 + pool.background_amplitude * np.cos(phase))
        return np.asarray(np.clip(np.round(held), 0, self.pool_size), dtype=int)

    def _init_state(self) -> None:
        k = self.n_steps
        self.replicas = self.target = self.params.initial_replicas
        self.lag = 0.0
        self.down_until_s = 0.0
        #: partial rescaling: (replicas, ready time) of workers starting in the background
        self.pending: tuple[int, float] | None = None
        self.steps_done = 0
        self.trace = {
            "replicas": np.zeros(k, dtype=int),
            "held": np.zeros(k, dtype=int),  # GPUs held: replicas, or workers starting
            "target": np.zeros(k, dtype=int),
            "uptime_s": np.zeros(k),
            "capacity_per_s": np.zeros(k),
            "consumed": np.zeros(k),
            "lag_integral": np.zeros(k),
            "forecast_per_s": np.full(k, np.nan),
        }
        self.lag_at = np.zeros(k + 1)
        self.rescales: list[tuple[float, int, int, float]] = []
        self.forecast_errors: list[float] = []
        self.timeline_written = False
        self.job_track = self.sim.recorder.track("elastic/job", group="elastic", kind="job")

    # ---- the control loop ----------------------------------------------------------
    def start(self) -> None:
        """Start the control loop (one SimPy timeout per control step)."""
        self.sim.env.process(self._loop())

    def _loop(self) -> Generator[Any, Any, None]:
        for k in range(self.n_steps):
            if k % self.sync_steps == 0:
                self._sync(k)
            self._apply_target(k)
            self._advance(k)
            self.steps_done = k + 1
            yield self.sim.env.timeout(self.step_s)
        self.done.succeed()

    def _apply_target(self, k: int) -> None:
        now = k * self.step_s
        if self.pending is not None:
            self._join_pending(k, now)
            return
        if self.target == self.replicas or now < self.down_until_s - 1e-9:
            return
        old = self.replicas
        if self.target < old:
            new = self.target
        else:
            free = self.pool_size - int(self.background[k]) - old
            new = min(self.target, old + max(free, 0))
        if new == old:
            return  # waiting for free GPUs
        self.replicas = new
        if k == 0:
            return  # the starting size: no rescale
        rescale = self.params.rescale
        if rescale.mode == "partial" and new > old:  # old workers consume while new start
            self.replicas = old
            self.pending = (new, now + rescale.pod_start_s)
            return
        downtime = (rescale.up_s if new > old else rescale.down_s) + self.balancer.extra_downtime_s
        self.down_until_s = now + downtime
        self.rescales.append((now, old, new, downtime))
        self.sim.recorder.span(self.job_track, f"rescale {old}->{new}", now, now + downtime)

    def _join_pending(self, k: int, now: float) -> None:
        """Partial rescaling: the started workers join once their pods are up; the job
        pauses for the rebalance only."""
        assert self.pending is not None
        new, ready_s = self.pending
        if now < ready_s - 1e-9:
            return
        self.pending = None
        old = self.replicas
        downtime = self.params.rescale.up_s + self.balancer.extra_downtime_s
        self.replicas = new
        self.down_until_s = now + downtime
        self.rescales.append((now, old, new, downtime))
        self.sim.recorder.span(self.job_track, f"rescale {old}->{new}", now, now + downtime)

    def _advance(self, k: int) -> None:
        step = self.step_s
        t = k * step
        up_s = min(step, max(0.0, t + step - max(t, self.down_until_s)))
        capacity = float(self.est[self.replicas] * self.true_factor[k]) * up_s / step
        lag, consumed, integral = fluid_step(self.lag, float(self.rates[k]), capacity, step)
        tr = self.trace
        tr["replicas"][k] = self.replicas
        tr["held"][k] = self.replicas if self.pending is None else self.pending[0]
        tr["target"][k] = self.target
        tr["uptime_s"][k] = up_s
        tr["capacity_per_s"][k] = capacity
        tr["consumed"][k] = consumed
        tr["lag_integral"][k] = integral
        self.lag = lag
        self.lag_at[k + 1] = lag

    # ---- decisions ----------------------------------------------------------------
    def _sync(self, k: int) -> None:
        forecast = self._forecast(k) if self.horizon_steps > 0 and k > 0 else None
        view = self._scale_view(k, forecast)
        wanted = int(self.autoscaler.decide(view))
        self.target = min(max(wanted, self.params.min_replicas), self.max_replicas)

    def _forecast(self, k: int) -> np.ndarray:
        h = self.horizon_steps
        past = ForecastView(k * self.step_s, self.step_s, frozen(self.rates[:k]), h)
        view: ForecastView | OracleForecastView = past
        if self.forecaster.needs_future:  # an oracle (labelled): the true path
            view = OracleForecastView(past, frozen(self.rates[k : k + h]))
        path = np.asarray(self.forecaster.forecast(view), dtype=float)
        if path.shape != (h,) or not np.all(np.isfinite(path)):
            raise InvariantViolation(f"forecaster returned shape {path.shape} (want ({h},))")
        truth = self.rates[k : k + h]
        arrived = float(truth.sum())
        if arrived > 0:  # WAPE is undefined over a horizon with no arrivals
            self.forecast_errors.append(float(np.abs(path[: len(truth)] - truth).sum()) / arrived)
        self.trace["forecast_per_s"][k] = path[0]
        return frozen(path)

    def _scale_view(self, k: int, forecast: np.ndarray | None) -> ScaleView:
        lo = max(0, k - self.sync_steps)
        tr, step = self.trace, self.step_s
        consumed = float(tr["consumed"][lo:k].sum())
        up_s = float(tr["uptime_s"][lo:k].sum())
        cap = float(tr["capacity_per_s"][lo:k].sum()) * step
        backlogged = k > lo and bool(np.all(self.lag_at[lo + 1 : k + 1] > 0.0))
        span_s = max((k - lo) * step, step)
        now = k * step
        rescale = self.params.rescale
        extra = self.balancer.extra_downtime_s
        return ScaleView(
            now, step, self.replicas, self.target, now >= self.down_until_s - 1e-9,
            max(0.0, now - self.down_until_s), self.lag,
            float(self.rates[lo:k].sum()) * step / span_s, consumed / span_s,
            consumed / cap if cap > 0 else math.nan,
            consumed / up_s if backlogged and up_s > 0 else math.nan,
            self.est, self.params.min_replicas, self.max_replicas,
            self.pool_size - int(self.background[min(k, self.n_steps - 1)]) - self.replicas,
            rescale.up_s + extra, rescale.down_s + extra, forecast,
        )  # fmt: skip

    # ---- results -----------------------------------------------------------------
    def horizon_s(self) -> float | None:
        """The run's simulated length."""
        return self.n_steps * self.step_s

    def check(self) -> None:
        """Conservation: arrived = consumed + lag; lag >= 0; replicas within the pool."""
        k = self.steps_done
        arrived = float(self.rates[:k].sum()) * self.step_s
        consumed = float(self.trace["consumed"][:k].sum())
        if abs(arrived - consumed - self.lag) > 1e-6 * max(arrived, 1.0):
            raise InvariantViolation(f"arrived {arrived} != consumed {consumed} + lag {self.lag}")
        if self.lag_at.min() < 0 or self.trace["replicas"][:k].max() > self.pool_size:
            raise InvariantViolation("negative lag or more replicas than pool GPUs")

    def check_partial(self) -> None:
        """The same conservation over the steps run so far (``until_s`` cut the run):
        arrived = consumed + lag, lag >= 0, replicas within the pool."""
        if self.steps_done > self.n_steps:
            raise InvariantViolation(f"elastic: {self.steps_done} of {self.n_steps} steps ran")
        if self.steps_done:
            self.check()

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """Lag, freshness, downtime, SLO and cost figures (see :attr:`metrics`)."""
        k = self.steps_done
        if self.params.record_timeline:
            write_tables(self, k)
        return {**summarise(self, k), **self._energy(k, end_s)}

    def _energy(self, k: int, end_s: float) -> dict[str, float | int | str]:
        """The :data:`ENERGY` columns of the first ``k`` steps (module doc); the
        workers' draw goes to the pool GPUs' meters once."""
        if self._energy_out is not None:
            return self._energy_out
        tr, step = self.trace, self.step_s
        n = tr["replicas"][:k]
        consumed = tr["consumed"][:k]
        busy = consumed / (self.mu_1 * self.true_factor[:k])  # worker-seconds per step
        compute = consumed * self.sample_compute_s
        per = np.maximum(n, 1)
        rec = self.sim.recorder
        job_active = 0.0
        for i, name in enumerate(self.gpus[: int(n.max()) if k else 0]):
            meter = self.cluster.device(name).energy
            pm = meter.model
            on = n > i
            b, c = np.where(on, busy / per, 0.0), np.where(on, compute / per, 0.0)
            c = np.minimum(c, b)
            active = (pm.memory_W - pm.idle_W) * b + (pm.limit_W - pm.memory_W) * c
            with np.errstate(divide="ignore", invalid="ignore"):
                draw = np.where(b > 0, pm.idle_W + active / np.where(b > 0, b, 1.0), pm.idle_W)
            meter.add(float(active.sum()), float(b.sum()), float(draw.max()))
            job_active += float(active.sum())
            if rec.record_spans and meter.track:  # the step-average draw, where it changes
                avg = pm.idle_W + active / step
                change = np.flatnonzero(np.diff(avg, prepend=np.nan) != 0)
                for j in change.tolist():
                    rec.counter(meter.track, j * step, float(avg[j]))
                rec.counter(meter.track, k * step, pm.idle_W)
        _, out = run_energy(self.cluster, rec, end_s)
        held_s = float(tr["held"][:k].sum()) * step
        idle_W = self.cluster.device(self.gpus[0]).energy.model.idle_W
        job_J = idle_W * held_s + job_active
        out["energy_job_J"] = job_J
        out.update(per_unit(job_J, {"energy_per_sample_J": float(consumed.sum()),
                                    "energy_per_gpu_hour_J": held_s / 3600.0}))  # fmt: skip
        self._energy_out = out
        return out
