"""Energy of the straggler-detection job: one meter per data-parallel rank.

The ranks are virtual (one catalogue GPU prices them all), so each rank gets its own
:class:`~hetsim.devices.energy_meter.EnergyMeter` on that GPU's power model and the run
is reported with :func:`~hetsim.devices.energy.meters_report`. Per iteration, a rank is
busy for its forward and backward (their simulated times, noise and faults included) at
the compute utilisation of the iteration's model FLOPs (``6 P T``: ``2 P T`` forward,
twice that backward) at the compute roof, clipped at 1; it draws ``memory_W`` (the
memory-bound term; communication counts as memory-bound, :mod:`hetsim.devices.power`)
through the all-reduce; data loading and waiting for the last rank at the collective
are idle. A slowed GPU runs the same FLOPs for longer, at a lower utilisation. Pauses
(eviction, restart) are idle, except the work a restart redoes, which draws each rank's
mean draw above idle over the work done so far (the redone iterations are not
re-simulated: an estimate, labelled in ``energy_redo_J``).

With spans on, each rank's power track holds its mean draw over each window (the
telemetry is per window: no finer timing is simulated).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetsim.devices.carbon import CARBON_METRICS, carbon_columns
from hetsim.devices.cluster import Cluster
from hetsim.devices.energy import (
    ENERGY_METRICS,
    meters_report,
    per_unit,
    record_tables,
    report_columns,
)
from hetsim.devices.energy_meter import POWER_TRACK_SUFFIX, EnergyMeter
from hetsim.devices.power import cap_ratio, compute_roof_flops
from hetsim.devices.spec import DeviceSpec
from hetsim.simulator.recorder import Recorder
from hetsim.workloads.observability.telemetry import OPS, TrainingModel, Window

ENERGY: dict[str, str] = {
    **ENERGY_METRICS,
    "energy_J": "energy of the job's ranks over the run, J: every rank's GPU at idle_W "
    "over the run plus, per iteration, memory_W over its forward, backward and the "
    "all-reduce and the compute utilisation of 6 P T FLOPs at the compute roof over its "
    "forward and backward (devices/power.py); host power not included",
    "energy_accelerator_J": "energy_J (the ranks' GPUs)",
    "energy_host_J": "0: host power is not modelled for the ranks",
    "energy_per_iteration_J": "energy_J / iterations run",
    "energy_mitigation_J": "energy of the ranks during eviction and restart pauses, J "
    "(idle, plus the redone work of restarts: energy_redo_J)",
    "energy_redo_J": "estimate of the energy of the work restarts redo, J: the redone "
    "seconds at each rank's mean draw above idle over the work done before",
    **CARBON_METRICS,
}
"""Energy columns of the observability workload."""


class RankEnergy:
    """The ranks' meters and the run's energy columns (module doc)."""

    def __init__(self, spec: DeviceSpec, model: TrainingModel, ranks: int,
                 recorder: Recorder, meter_model: Any) -> None:  # fmt: skip
        self.spec = spec
        self.recorder = recorder
        spans = recorder.record_spans
        self.meters = []
        #: a rank's device name, zero-padded so that names sort in rank order
        self.names = [f"rank{r:0{len(str(ranks - 1))}d}" for r in range(ranks)]
        for name in self.names:
            if spans:
                recorder.track(name + POWER_TRACK_SUFFIX, group="ranks", kind="power")
            self.meters.append(EnergyMeter(meter_model, recorder, name if spans else ""))
        roof = compute_roof_flops(spec, model.dtype, cap_ratio(spec))
        #: forward + backward of one iteration at the full compute roof
        self.compute_s = 3.0 * model.forward_flops() / roof if roof > 0 else 0.0
        self.work_s = 0.0  # iteration seconds simulated so far
        self.mitigation_J = 0.0
        self.redo_J = 0.0

    def window(self, start_s: float, win: Window) -> None:
        """Account one window's iterations, which started at ``start_s``."""
        pm = self.meters[0].model
        kernel = win.op_s[OPS.index("forward")] + win.op_s[OPS.index("backward")]
        compute = np.minimum(self.compute_s, kernel)  # [rank, iteration]
        comm = float(win.comm_s.sum())
        busy = kernel.sum(axis=1) + comm
        active = (pm.memory_W - pm.idle_W) * busy + (pm.limit_W - pm.memory_W) * compute.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.where(kernel > 0, compute / np.where(kernel > 0, kernel, 1.0), 0.0).max(axis=1)
        peak = pm.memory_W + (pm.limit_W - pm.memory_W) * np.clip(u, 0.0, 1.0)
        window_s = float(win.iteration_s.sum())
        for r, meter in enumerate(self.meters):
            meter.add(float(active[r]), float(busy[r]), float(peak[r]))
            if meter.track:
                self.recorder.counter(meter.track, start_s, pm.idle_W + float(active[r]) / window_s)
                self.recorder.counter(meter.track, start_s + window_s, pm.idle_W)
        self.work_s += window_s

    def pause(self, pause_s: float, redo_s: float) -> None:
        """Account a mitigation pause of ``pause_s`` of which ``redo_s`` redoes work."""
        n = len(self.meters)
        idle_J = self.meters[0].model.idle_W * pause_s * n
        redo = 0.0
        if redo_s > 0 and self.work_s > 0:
            for meter in self.meters:
                extra = meter.active_J / self.work_s * redo_s
                redo += extra
                meter.add(extra, 0.0)
        self.redo_J += redo
        self.mitigation_J += idle_J + redo

    def columns(self, cluster: Cluster, end_s: float, iterations: int) -> dict[str, Any]:
        """The :data:`ENERGY` columns over [0, ``end_s``]; writes the ``energy`` (one row
        per rank) and, with spans, ``power`` tables."""
        spec = self.spec
        rows = [(n, spec.name, spec.kind, m) for n, m in zip(self.names, self.meters, strict=True)]
        rep = meters_report(rows, end_s)
        record_tables(self.recorder, rep)
        out = report_columns(rep)
        out.update(per_unit(rep.total_J, {"energy_per_iteration_J": float(iterations)}))
        out["energy_mitigation_J"] = self.mitigation_J
        out["energy_redo_J"] = self.redo_J
        out.update(carbon_columns(rep.total_J, end_s, {self.spec.name: len(self.meters) * end_s},
                                  cluster.config.carbon, cluster.load_grid()))  # fmt: skip
        return out


FAULT_ENERGY: dict[str, str] = {
    "energy_J": "energy of the job's GPUs over the run, J: every GPU at idle_W over the "
    "run plus, per second of nominal-speed work done (work kept and work later rolled "
    "back), the nominal iteration's mean draw above idle (memory_W over forward, backward "
    "and the all-reduce, the compute utilisation of 6 P T FLOPs at the compute roof over "
    "forward and backward; devices/power.py), and memory_W over checkpoint writes; "
    "recovery, eviction pauses and time lost running slow draw idle_W; host power not "
    "included",
    "energy_accelerator_J": "energy_J (the job's GPUs)",
    "energy_host_J": "0: host power is not modelled for the job",
    "avg_power_W": "mean draw of one GPU of the job over the run, W",
    "peak_power_W": "draw of one GPU running nominal-speed iterations, W",
    "avg_power_W_by_type": "'type:W': avg_power_W by GPU type",
    "peak_power_W_by_type": "'type:W': peak_power_W by GPU type",
    "energy_useful_J": "energy of the work kept, J: its seconds at the running draw",
    "energy_lost_work_J": "energy of work rolled back by restarts, J: lost_work_h at the "
    "running draw (idle included)",
    "energy_recovery_J": "energy of detection and restart time, J (idle_W)",
    "energy_checkpoint_J": "energy of checkpoint writes, J (memory_W)",
    "energy_slow_J": "energy of the time lost running slow, J (idle_W: the ranks wait for "
    "the slowest)",
    "energy_evict_J": "energy of eviction pauses, J (idle_W)",
    "energy_wasted_fraction": "1 - energy_useful_J / energy_J",
    "energy_per_iteration_J": "energy_J / iterations kept (work kept / nominal iteration)",
    **CARBON_METRICS,
}
"""Energy columns of the observability-faults workload."""

JOB_GPU = "job-gpu"
"""Name of the virtual device one GPU of the fault-tolerance job is reported as."""


class JobEnergy:
    """Energy of the fault-tolerance job from its timeline's states (:data:`FAULT_ENERGY`):
    one meter for one GPU of the job, fed by each timeline segment (mode, speed); the
    whole job is ``gpus`` of them."""

    def __init__(self, spec: DeviceSpec, model: TrainingModel, fwd_bwd_s: float,
                 send_s: float, iteration_s: float, gpus: int, recorder: Recorder,
                 meter_model: Any) -> None:  # fmt: skip
        self.spec, self.gpus, self.recorder = spec, gpus, recorder
        spans = recorder.record_spans
        if spans:
            recorder.track(JOB_GPU + POWER_TRACK_SUFFIX, group="observability", kind="power")
        self.meter = EnergyMeter(meter_model, recorder, JOB_GPU if spans else "")
        pm = meter_model
        roof = compute_roof_flops(spec, model.dtype, cap_ratio(spec))
        compute = min(3.0 * model.forward_flops() / roof if roof > 0 else 0.0, fwd_bwd_s)
        busy = fwd_bwd_s + send_s
        #: draw above idle per second of nominal-speed training
        self.run_W = (
            ((pm.memory_W - pm.idle_W) * busy + (pm.limit_W - pm.memory_W) * compute) / iteration_s
            if iteration_s > 0 else 0.0
        )  # fmt: skip
        self.busy_share = busy / iteration_s if iteration_s > 0 else 0.0
        self.kernel_W = pm.busy_W(compute / fwd_bwd_s) if fwd_bwd_s > 0 else pm.memory_W

    def segment(self, start_s: float, dt: float, mode: str, speed: float) -> None:
        """One timeline segment of ``dt`` seconds in ``mode`` ("run" at ``speed``, "ckpt",
        "recover", "evict")."""
        pm = self.meter.model
        if mode == "run":
            above, busy, peak = self.run_W * speed, self.busy_share * speed * dt, self.kernel_W
        elif mode == "ckpt":
            above, busy, peak = pm.memory_W - pm.idle_W, dt, pm.memory_W
        else:
            above, busy, peak = 0.0, 0.0, None
        if dt > 0:
            self.meter.add(above * dt, busy, peak)
        if self.meter.track and dt > 0:
            self.recorder.counter(self.meter.track, start_s, pm.idle_W + above)
            self.recorder.counter(self.meter.track, start_s + dt, pm.idle_W)

    def columns(self, cluster: Cluster, end_s: float, t: Any, iteration_s: float) -> dict[str, Any]:
        """The :data:`FAULT_ENERGY` columns from the timeline ``t``'s state times; writes
        the ``energy`` table (one row: a GPU of the job) and, with spans, ``power``."""
        rep = meters_report([(JOB_GPU, self.spec.name, self.spec.kind, self.meter)], end_s)
        record_tables(self.recorder, rep)
        one = report_columns(rep)
        pm, n = self.meter.model, self.gpus
        total = rep.total_J * n
        running_W = pm.idle_W + self.run_W
        useful = n * running_W * t.work_s
        out: dict[str, Any] = {
            "energy_J": total,
            "energy_accelerator_J": total,
            "energy_host_J": 0.0,
            "avg_power_W": one["avg_power_W"],
            "peak_power_W": one["peak_power_W"],
            "avg_power_W_by_type": one["avg_power_W_by_type"],
            "peak_power_W_by_type": one["peak_power_W_by_type"],
            "energy_useful_J": useful,
            "energy_lost_work_J": n * running_W * t.lost_s,
            "energy_recovery_J": n * pm.idle_W * t.recover_s,
            "energy_checkpoint_J": n * pm.memory_W * t.ckpt_s,
            "energy_slow_J": n * pm.idle_W * t.slow_loss_s,
            "energy_evict_J": n * pm.idle_W * t.evict_s,
            "energy_wasted_fraction": 1.0 - useful / total if total > 0 else float("nan"),
        }
        kept = t.work_s / iteration_s if iteration_s > 0 else 0.0
        out.update(per_unit(total, {"energy_per_iteration_J": kept}))
        out.update(carbon_columns(total, end_s, {self.spec.name: n * end_s},
                                  cluster.config.carbon, cluster.load_grid()))  # fmt: skip
        return out
