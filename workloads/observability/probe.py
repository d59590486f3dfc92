"""A telemetry detector (Kair, z-score, threshold) inside the job-level fault workload.

The long job (``observability-faults``) has no per-iteration telemetry. To let a
telemetry detector decide there, the mechanism runs it on a probe: a replica of
``probe.ranks`` ranks with the job's nominal operator times, noise model and persistent
rank factors (``observability.telemetry``). For each fail-slow fault the probe injects it
on one rank, with the fault's kind and severity, and feeds windows of ``window_iters``
iterations to the detector (after ``lead_windows`` healthy windows: a fault starts on a
running job, so a detector that compares a rank with its own history has one) until it
reports that rank (detected after that many windows'
wall time, with the cause it named) or ``max_windows`` pass (missed: operators find it
after ``manual_detect_s``). Fail-stop faults are not in the telemetry (the job stops):
the collective watchdog finds them after ``watchdog_s``. False alarms: findings in
``clean_windows`` fault-free probe windows give a rate per rank-second, scaled to the
job's GPUs, drawn as a Poisson process over the run. The probe is the mechanism's; the
detector sees only the telemetry (``WindowView``), never the fault.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from hetsim.workloads.observability.telemetry import (
    COMPUTE_OPS,
    FAULT_OPS,
    OPS,
    BaseTimes,
    NoiseModel,
    rank_factors,
    simulate_window,
)
from hetsim.workloads.observability.view import (
    Detection,
    JobView,
    OracleEventView,
    WindowDetector,
    WindowView,
)


class ProbeParams(BaseModel):
    """Size of the telemetry probe (``workload.probe``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ranks: int = Field(
        default=64,
        ge=2,
        le=4096,
        description="Ranks of the telemetry probe job a window detector watches.",
    )
    window_iters: int = Field(
        default=50, ge=2, description="Iterations per telemetry window fed to the detector."
    )
    max_windows: PositiveInt = Field(default=20, description="windows before a miss")
    lead_windows: int = Field(
        default=4, ge=0, description="healthy windows fed to the detector before each fault"
    )
    clean_windows: PositiveInt = Field(default=8, description="fault-free windows for alarms")
    gpus_per_node: PositiveInt = Field(
        default=8,
        description="GPUs per node of the probe (ranks on one node share its per-node noise).",
    )
    link_telemetry: str = Field(
        default="collective",
        pattern="^(collective|own)$",
        description="What a probe rank's send operator shows: the all-reduce's "
        "duration (collective) or its own link time (own).",
    )


class TelemetryProbe:
    """Runs a window detector on probe telemetry; answers as an event detector would."""

    def __init__(
        self,
        detector: WindowDetector,
        base: BaseTimes,
        noise: NoiseModel,
        params: ProbeParams,
        rng: np.random.Generator,
    ) -> None:
        self.detector, self.base, self.noise, self.p, self.rng = detector, base, noise, params, rng
        self.rank_factor = rank_factors(noise, params.ranks, rng)
        self.window_s = params.window_iters * base.iteration_s()
        self._fate: dict[int, Detection] = {}
        self._factor: dict[int, float] = {}
        self.windows = 0
        self.alarm_rate_per_s = 0.0

    def _window(self, fault: tuple[str, float] | None, now_s: float) -> WindowView:
        p = self.p
        mult = np.ones((len(OPS), p.ranks, p.window_iters))
        if fault is not None:
            kind, factor = fault
            for op in FAULT_OPS[kind]:
                mult[OPS.index(op), self.fault_rank] *= factor
        win = simulate_window(self.base, self.noise, self.rank_factor, mult, self.rng,
                              p.gpus_per_node, p.link_telemetry)  # fmt: skip
        self.windows += 1
        return WindowView(now_s, self.windows, 0, float(win.iteration_s.sum()), OPS,
                          COMPUTE_OPS, win.op_s, win.entry_s, win.comm_s,
                          win.iteration_s)  # fmt: skip

    @property
    def fault_rank(self) -> int:
        """The probe rank a fault is injected on (the middle one)."""
        return self.p.ranks // 2

    def classify(self, view: OracleEventView) -> Detection:
        """Once per fault: the detector's verdict on probe telemetry with the fault."""
        f = view.fault
        if f.fault_id in self._fate:
            return self._fate[f.fault_id]
        if f.category != "fail-slow" or f.kind not in FAULT_OPS:
            d = Detection(False, 0.0, "unknown")  # not visible in telemetry: the watchdog
        else:
            d = Detection(False, 0.0, "unknown")
            factor = self._factor.get(f.fault_id, 1.0)
            for _ in range(self.p.lead_windows):
                self.detector.detect(self._window(None, 0.0))
            for w in range(self.p.max_windows):
                found = [x for x in self.detector.detect(self._window((f.kind, factor), 0.0))
                         if x.rank == self.fault_rank]  # fmt: skip
                if found:
                    d = Detection(True, (w + 1) * self.window_s, str(found[0].cause))
                    break
        self._fate[f.fault_id] = d
        return d

    def set_factors(self, factors: dict[int, float]) -> None:
        """The fail-slow faults' slowdown factors (the probe injects them)."""
        self._factor = dict(factors)

    def false_alarms(self, view: JobView) -> np.ndarray:
        """Poisson alarm times: findings per rank-second in clean probe windows, x GPUs."""
        findings = sum(len(self.detector.detect(self._window(None, 0.0)))
                       for _ in range(self.p.clean_windows))  # fmt: skip
        per_rank_s = findings / (self.p.clean_windows * self.window_s * self.p.ranks)
        self.alarm_rate_per_s = per_rank_s * view.gpus
        n = int(self.rng.poisson(self.alarm_rate_per_s * view.horizon_s))
        return np.sort(self.rng.uniform(0.0, view.horizon_s, n))
