"""A long training job under fail-stop and fail-slow faults: checkpoints, recovery, ETTR.

The job's N GPUs train in lock-step at the nominal iteration time of
``observability_telemetry`` (roofline compute + collective model). Over ``duration_days``
of wall time:

- fail-stop faults (Llama 3 rates by cause, or a replayed trace) stop the job; the
  ``detector`` (a black-box model such as KAIOPS-style) finds each after its delay, or
  the collective watchdog does after ``watchdog_s``; the job then restarts
  (``restart_s``) from its last completed checkpoint, losing the work since. A failure
  during recovery restarts the recovery; a failure while a checkpoint is being written
  loses that checkpoint.
- fail-slow faults slow the whole job (a synchronous job runs at its slowest rank) until
  they end or the detector finds them (operators do, after ``manual_detect_s``, when it
  misses them) and the ``mitigation`` policy evicts the rank (``replace_s`` pause) or
  restarts from the checkpoint without it.
- false alarms of the detector go to the mitigation policy too.
- checkpoints are written every ``interval_s`` seconds of work (``checkpoint`` policy),
  each pausing training for ``checkpoint_s``.

One SimPy process walks the timeline from event to event (a fault, a detection, the end
of a pause, a checkpoint due); nothing is simulated per iteration.
ETTR = work kept (seconds of nominal-speed training) / wall time.

Energy (:class:`~hetsim.workloads.observability.energy.JobEnergy`): each timeline
segment is priced by its state, so the energy of lost work, recovery, checkpoints,
evictions and running slow comes out of the same state times as ETTR.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveInt

from hetsim.devices.cluster import Cluster
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.limits import MAX_DEVICES, PositiveDays, PositiveSeconds
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, WorkloadParams
from hetsim.workloads.observability.energy import FAULT_ENERGY, JobEnergy
from hetsim.workloads.observability.faults import (
    SECONDS_PER_DAY,
    FailSlowKind,
    FailStopModel,
    ettr_exact,
    ettr_first_order,
    sample_fail_slow,
    sample_fail_stop,
)
from hetsim.workloads.observability.probe import ProbeParams, TelemetryProbe
from hetsim.workloads.observability.telemetry import (
    CommConfig,
    NoiseModel,
    TrainingModel,
    base_times,
)
from hetsim.workloads.observability.timeline import JobTimeline
from hetsim.workloads.observability.view import (
    CheckpointView,
    JobView,
    daly_interval_s,
    young_interval_s,
)


class FaultJobParams(WorkloadParams):
    """The ``workload:`` block of a fault-tolerance scenario."""

    kind: Literal["observability-faults"] = Field(
        default="observability-faults", description="Workload kind (observability-faults)."
    )
    gpus: int = Field(
        default=10_000,
        ge=1,
        le=MAX_DEVICES,
        description="GPUs (data-parallel ranks) of the training "
        "job, each exposed to the fault rates.",
    )
    duration_days: PositiveDays = Field(
        default=30.0, description="Length of the job, in days of simulated time."
    )
    gpu: str | None = Field(
        default=None,
        description="Cluster device whose cost prices an iteration (null: the first GPU or NPU).",
    )
    model: TrainingModel = Field(
        default=TrainingModel(params=70e9, tokens_per_rank=8192),
        description="Work of one data-parallel rank per iteration "
        "(default: 70e9 parameters, 8192 tokens per rank).",
    )
    comm: CommConfig = Field(
        default=CommConfig(fabric="h100-ib-ndr-multinode"),
        description="The gradient all-reduce: a collective fabric by name, or an alpha-beta link.",
    )
    fail_stop: FailStopModel = Field(
        default=FailStopModel(),
        description="Fail-stop faults: the Llama 3 table (scaled), "
        "explicit rates, a trace, or none.",
    )
    fail_slow: dict[str, FailSlowKind] = Field(
        default_factory=dict,
        description="Fail-slow faults to inject, by kind (rate per GPU-day, slowdown, duration).",
    )
    checkpoint_s: PositiveSeconds = Field(
        default=120.0, description="Seconds to write one checkpoint (reconstruction)."
    )
    restart_s: PositiveSeconds = Field(
        default=600.0,
        description="Seconds to reschedule, reload and warm up after a failure (reconstruction).",
    )
    watchdog_s: PositiveSeconds = Field(
        default=600.0,
        description="Collective timeout in seconds that catches faults no detector reported.",
    )
    replace_s: PositiveSeconds = Field(
        default=300.0, description="Seconds to evict a rank and bring in a spare."
    )
    manual_detect_s: PositiveSeconds = Field(
        default=86_400.0,
        description="Seconds until operators find a straggler the "
        "detector missed (reconstruction).",
    )
    gpus_per_node: PositiveInt = Field(
        default=8,
        description="GPUs per node of the job; read by no computation at present (node grouping "
        "comes from probe.gpus_per_node and fail_stop.trace_gpus_per_node).",
    )
    noise: NoiseModel = Field(
        default=NoiseModel(),
        description="Telemetry noise of the probe a telemetry detector runs on.",
    )
    probe: ProbeParams = Field(
        default=ProbeParams(),
        description="Size of the telemetry probe a telemetry detector runs on.",
    )


@workloads.register("observability-faults")
class FaultJobWorkload(Workload):
    """A long synchronous training job under injected faults, with checkpoints and recovery."""

    Params = FaultJobParams
    domain = "observability"
    decision_points: ClassVar[dict[str, str]] = {
        "detector": "kaiops",
        "checkpoint": "young-daly",
        "mitigation": "evict-replace",
    }
    metrics: ClassVar[dict[str, str]] = {
        "fail_stops": "fail-stop faults during the run (including during recovery)",
        "job_mtbf_h": "wall time / fail_stops, hours",
        "expected_mtbf_h": "1 / (N x rate per GPU-hour) of the configured fail-stop model",
        "interval_s": "work between checkpoints chosen by the checkpoint policy",
        "young_s": "Young's interval sqrt(2 C M) for the expected MTBF",
        "daly_s": "Daly's interval for the expected MTBF",
        "ettr": "work kept (nominal-speed seconds) / wall time",
        "ettr_first_order": "1 - (C/tau + (tau/2 + R)/M), R = mean recovery observed",
        "ettr_exact": "tau / (M e^{R/M} (e^{(tau+C)/M} - 1)), same R and M (fail-stop only)",
        "goodput_tokens_per_s": "ettr x gpus x tokens_per_rank / nominal iteration time",
        "nominal_iteration_s": "fault-free iteration time",
        "lost_work_h": "work rolled back by restarts, hours",
        "recovery_h": "time spent detecting and restarting, hours",
        "checkpoint_h": "time spent writing checkpoints, hours",
        "slow_loss_h": "training time lost to running slow (1 - speed) x run time, hours",
        "evict_h": "time paused for evictions, hours",
        "mean_recovery_s": "restart_s + mean_detect_s (R of the closed forms)",
        "mean_detect_s": "mean time from fail-stop fault to its detection",
        "fail_slows": "fail-slow faults injected",
        "fail_slows_mitigated": "fail-slow faults detected and mitigated",
        "false_alarms": "false alarms of the detector",
        "checkpoints": "checkpoints completed",
        **FAULT_ENERGY,
    }

    def __init__(
        self,
        sim: Simulation,
        cluster: Cluster,
        params: FaultJobParams,
        policies: dict[str, Any],
        base_dir: Path,
    ) -> None:
        super().__init__(sim, cluster, params, policies, base_dir)
        det = policies["detector"]
        name = cluster.accelerator(params.gpu, "gpu")
        self.base = base_times(params.model, params.comm, cluster.device(name), params.gpus)
        #: what decides detection: a black-box model (an oracle: KAIOPS-style), or a
        #: telemetry detector (Kair, z-score, threshold) run on the mechanism's probe
        self.detector: Any
        if hasattr(det, "classify") and hasattr(det, "false_alarms"):
            self.detector = det
        elif hasattr(det, "detect"):
            self.detector = TelemetryProbe(det, self.base, params.noise, params.probe,
                                           sim.rng("observability.probe"))  # fmt: skip
        else:
            raise ValueError(
                "policies.detector: needs a black-box model (kaiops) or a telemetry detector"
            )
        self.horizon = params.duration_days * SECONDS_PER_DAY
        self.stops = sample_fail_stop(
            params.fail_stop,
            params.gpus,
            self.horizon,
            sim.rng("observability.fail_stop"),
            base_dir,
        )
        self.slows = sample_fail_slow(
            params.fail_slow, params.gpus, self.horizon, sim.rng("observability.fail_slow"),
            first_id=len(self.stops),
        )  # fmt: skip
        if isinstance(self.detector, TelemetryProbe):
            self.detector.set_factors({f.fault_id: f.factor for f in self.slows})
        self.alarms = self.detector.false_alarms(JobView(params.gpus, self.horizon))
        self.expected_mtbf_s = self._expected_mtbf_s()
        view = CheckpointView(
            params.checkpoint_s, params.restart_s + params.watchdog_s,
            self.expected_mtbf_s, self.base.iteration_s(),
        )  # fmt: skip
        self.interval_s = float(policies["checkpoint"].interval_s(view))
        if not self.interval_s > 0:  # inf means never checkpoint (no fail-stop faults)
            raise ValueError(f"checkpoint policy returned interval {self.interval_s}")
        b, dev = self.base, cluster.device(name)
        self.energy = JobEnergy(dev.spec, params.model, b.forward_s + b.backward_s, b.send_s,
                                b.iteration_s(), params.gpus, sim.recorder,
                                dev.energy.model)  # fmt: skip
        self._energy_out: dict[str, Any] | None = None
        self.timeline = JobTimeline(self)

    def _expected_mtbf_s(self) -> float:
        """``1 / (N r)`` for sampled rates; the replayed trace's mean gap otherwise."""
        rate = sum(self.params.fail_stop.rates().values()) * self.params.gpus / SECONDS_PER_DAY
        if rate > 0:
            return 1.0 / rate
        if self.stops:
            return self.horizon / len(self.stops)
        return math.inf

    def start(self) -> None:
        """Start the job's timeline process."""
        self.sim.env.process(self.timeline.run())

    def horizon_s(self) -> float | None:
        """The job's wall-clock duration."""
        return self.horizon

    def check(self) -> None:
        """Time is conserved: every second of wall time is in exactly one state."""
        t = self.timeline
        total = t.run_s + t.ckpt_s + t.recover_s + t.evict_s
        if abs(total - self.horizon) > 1e-6 * self.horizon:
            raise InvariantViolation(f"states cover {total} s of a {self.horizon} s run")
        if t.work_s > t.run_s + 1e-6:
            raise InvariantViolation("more work kept than time spent running")

    def check_partial(self) -> None:
        """At any moment: the states cover the time run so far plus the segment in flight
        (accounted when it starts), never past the horizon; work kept <= time running."""
        t, now = self.timeline, self.sim.now
        total = t.run_s + t.ckpt_s + t.recover_s + t.evict_s
        eps = 1e-9 * max(self.horizon, 1.0)
        if not now - eps <= total <= self.horizon + eps:
            raise InvariantViolation(
                f"observability-faults: states cover {total} s at t={now} s of a "
                f"{self.horizon} s run"
            )
        if t.work_s > t.run_s + 1e-6 or t.saved_s > t.work_s + 1e-6:
            raise InvariantViolation(
                f"observability-faults: {t.work_s} s of work kept ({t.saved_s} s saved) "
                f"in {t.run_s} s running"
            )

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """Fault, recovery and efficiency figures (see :attr:`metrics`)."""
        t, p = self.timeline, self.params
        n_stop = t.fail_stops
        mtbf = self.expected_mtbf_s
        rec = p.restart_s + (t.detect_s / n_stop if n_stop else p.watchdog_s)
        ettr = t.work_s / self.horizon
        finite = math.isfinite(mtbf)
        h = 3600.0
        return {
            "fail_stops": n_stop,
            "job_mtbf_h": self.horizon / n_stop / h if n_stop else math.inf,
            "expected_mtbf_h": mtbf / h,
            "interval_s": self.interval_s,
            "young_s": young_interval_s(p.checkpoint_s, mtbf) if finite else math.inf,
            "daly_s": daly_interval_s(p.checkpoint_s, mtbf) if finite else math.inf,
            "ettr": ettr,
            "ettr_first_order": (
                ettr_first_order(self.interval_s, p.checkpoint_s, rec, mtbf) if finite else 1.0
            ),
            "ettr_exact": ettr_exact(self.interval_s, p.checkpoint_s, rec, mtbf) if finite else 1.0,
            "goodput_tokens_per_s": ettr
            * p.gpus
            * p.model.tokens_per_rank
            / self.base.iteration_s(),
            "nominal_iteration_s": self.base.iteration_s(),
            "lost_work_h": t.lost_s / h,
            "recovery_h": t.recover_s / h,
            "checkpoint_h": t.ckpt_s / h,
            "slow_loss_h": t.slow_loss_s / h,
            "evict_h": t.evict_s / h,
            "mean_recovery_s": rec,
            "mean_detect_s": t.detect_s / n_stop if n_stop else math.nan,
            "fail_slows": len(self.slows),
            "fail_slows_mitigated": t.mitigated,
            "false_alarms": len(self.alarms),
            "checkpoints": t.checkpoints,
            **self._energy(end_s),
        }

    def _energy(self, end_s: float) -> dict[str, Any]:
        """The :data:`FAULT_ENERGY` columns (the tables are written once)."""
        if self._energy_out is None:
            self._energy_out = self.energy.columns(self.cluster, end_s, self.timeline,
                                                   self.base.iteration_s())  # fmt: skip
        return self._energy_out
