"""Straggler detection on a data-parallel training job with per-rank telemetry.

N ranks run ``iterations`` synchronous iterations (``observability_telemetry``: per-rank
dataload, forward, backward, own link time; the all-reduce starts at the last arrival
and runs at the slowest link). Fail-slow faults (GPU slowdown, host CPU contention,
data-loader stall, link degradation) are injected on distinct ranks with ground truth
(rank, first and last iteration, factor, cause). Every ``window_iters`` iterations the
``detector`` policy analyses the window's telemetry; each finding is scored against the
truth and handed to the ``mitigation`` policy (evict and replace the rank, restart from
the last checkpoint, or ignore). SimPy carries only the job-level timeline: one event
per window and one per mitigation pause; the ranks x iterations work is numpy.
Energy: one meter per rank (:mod:`.energy`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, PositiveInt, field_validator

from hetsim.devices.cluster import Cluster
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.limits import MAX_DEVICES, MAX_GPUS_PER_NODE, PositiveSeconds
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, WorkloadParams, conserve
from hetsim.workloads.observability.energy import ENERGY, RankEnergy
from hetsim.workloads.observability.faults import FAIL_SLOW_CAUSE
from hetsim.workloads.observability.scoring import Straggler, Tally, score
from hetsim.workloads.observability.tables import ObservabilityTables, StragglerKind
from hetsim.workloads.observability.telemetry import (
    COMPUTE_OPS,
    FAULT_OPS,
    OPS,
    CommConfig,
    NoiseModel,
    TrainingModel,
    Window,
    base_times,
    rank_factors,
    simulate_window,
)
from hetsim.workloads.observability.view import (
    Finding,
    MitigationView,
    OracleFault,
    OracleWindowView,
    WindowView,
)


class ObservabilityParams(WorkloadParams):
    """The ``workload:`` block of a straggler-detection scenario."""

    kind: Literal["observability"] = Field(
        default="observability", description="Workload kind (observability)."
    )
    ranks: int = Field(
        default=2048, ge=2, le=MAX_DEVICES, description="Data-parallel ranks of the training job."
    )
    gpus_per_node: int = Field(
        default=8,
        gt=0,
        le=MAX_GPUS_PER_NODE,
        description="GPUs per node (rank r is on node r // "
        "gpus_per_node; a node's ranks share its noise).",
    )
    iterations: PositiveInt = Field(default=1000, description="Training iterations run.")
    window_iters: int = Field(
        default=50, ge=2, description="Iterations per analysis window handed to the detector."
    )
    gpu: str | None = Field(default=None, description="device whose roofline prices compute")
    model: TrainingModel = Field(
        default=TrainingModel(), description="Work of one data-parallel rank per iteration."
    )
    comm: CommConfig = Field(
        default=CommConfig(link="ib-hdr"),
        description="The gradient all-reduce: a collective fabric by name, or an alpha-beta link.",
    )
    noise: NoiseModel = Field(
        default=NoiseModel(), description="Run-to-run variation of operator times (reconstruction)."
    )
    link_telemetry: Literal["collective", "own"] = Field(
        "collective",
        description="what a rank's 'send' operator shows: the ring all-reduce's duration "
        "(the same on every rank, as a ring exposes it) or its own link time (idealised)",
    )
    stragglers: dict[str, StragglerKind] = Field(
        default_factory=dict,
        description="Fail-slow faults to inject, by kind (count, slowdown, persistence).",
    )
    replace_s: PositiveSeconds = Field(
        default=60.0, description="Seconds to evict a rank and bring in a spare (reconstruction)."
    )
    restart_s: PositiveSeconds = Field(
        default=600.0, description="Seconds to restart the job from a checkpoint (reconstruction)."
    )
    checkpoint_iters: PositiveInt = Field(
        default=500,
        description="Iterations between checkpoints; a restart redoes the work "
        "since the last one (writing cost not modelled).",
    )
    record_rank_windows: bool = Field(
        default=True, description="Write the per-rank, per-window table."
    )
    record_telemetry: bool = Field(
        default=False, description="Write one telemetry row per rank-iteration (small runs only)."
    )

    @field_validator("stragglers")
    @classmethod
    def _kinds(cls, v: dict[str, StragglerKind]) -> dict[str, StragglerKind]:
        bad = sorted(set(v) - set(FAULT_OPS))
        if bad:
            raise ValueError(f"unknown straggler kind(s) {bad}; valid: {sorted(FAULT_OPS)}")
        return v


@workloads.register("observability")
class ObservabilityWorkload(Workload):
    """Data-parallel training with injected stragglers, a detector and a mitigation."""

    Params = ObservabilityParams
    domain = "observability"
    decision_points: ClassVar[dict[str, str]] = {"detector": "kair", "mitigation": "ignore"}
    metrics: ClassVar[dict[str, str]] = {
        "faults_injected": "fail-slow faults injected (distinct ranks)",
        "faults_detected": "faults named by at least one true finding while active",
        "findings": "findings over all windows (one per flagged rank per window)",
        "false_findings": "findings whose rank had no fault active in that window",
        "rank_precision": "true findings / findings",
        "rank_recall": "faults_detected / faults_injected",
        "rank_f1": "2 P R / (P + R) of rank_precision and rank_recall",
        "false_alarms_per_window": "false_findings / windows analysed",
        "false_alarm_rank_rate": "false_findings / (windows x ranks)",
        "compute_precision": (
            "true findings saying compute whose fault is compute / findings saying compute"
        ),
        "compute_recall": "compute faults whose first true finding said compute / compute faults",
        "compute_f1": "2 P R / (P + R) of compute precision and recall",
        "comm_precision": "as compute_precision for communication",
        "comm_recall": "as compute_recall for communication",
        "comm_f1": "2 P R / (P + R) of comm precision and recall",
        "mean_delay_s": "mean over detected faults of first true finding time - fault start",
        "p50_delay_s": "median of the same delays",
        "windows": "analysis windows run",
        "nominal_iteration_s": "noise- and fault-free iteration time (kernel classes with "
        "model.architecture, else the device roofline; plus the collective model)",
        "mean_iteration_s": "mean simulated iteration time",
        "slowdown": "mean_iteration_s / nominal_iteration_s",
        "evictions": "ranks evicted and replaced by the mitigation policy",
        "restarts": "restarts from checkpoint ordered by the mitigation policy",
        "mitigation_s": "pauses for evictions and restarts, including redone work",
        "makespan_s": "simulated time of the whole run",
        **ENERGY,
    }

    def __init__(
        self,
        sim: Simulation,
        cluster: Cluster,
        params: ObservabilityParams,
        policies: dict[str, Any],
        base_dir: Path,
    ) -> None:
        super().__init__(sim, cluster, params, policies, base_dir)
        if not hasattr(policies["detector"], "detect"):
            raise ValueError("the detector policy cannot analyse per-rank telemetry")
        gpu = cluster.accelerator(params.gpu, "gpu")
        self.base = base_times(params.model, params.comm, cluster.device(gpu), params.ranks)
        self.rng = sim.rng("observability.noise")
        self.rank_factor = rank_factors(params.noise, params.ranks, sim.rng("observability.ranks"))
        self.faults = self._inject(sim.rng("observability.faults"))
        self.tables = ObservabilityTables(sim.recorder, params)
        self.tally = Tally()
        self.iteration = 0
        self.windows = 0
        self.busy_s = 0.0
        self.mitigation_s = 0.0
        self.evictions = 0
        self.restarts = 0
        self.checkpoint_s = 0.0  # time of the last checkpoint
        dev = cluster.device(gpu)
        self.energy = RankEnergy(dev.spec, params.model, params.ranks, sim.recorder,
                                 dev.energy.model)  # fmt: skip
        self._energy_out: dict[str, Any] | None = None

    # ---- injection ---------------------------------------------------------------
    def _inject(self, rng: np.random.Generator) -> list[Straggler]:
        """Fail-slow faults on distinct ranks; each is active for at least one window."""
        p = self.params
        total = sum(k.count for k in p.stragglers.values())
        if total > p.ranks:
            raise ValueError(f"{total} stragglers need as many ranks; have {p.ranks}")
        ranks = rng.choice(p.ranks, size=total, replace=False)
        out: list[Straggler] = []
        latest = max(1, p.iterations - p.window_iters)
        for kind in sorted(p.stragglers):
            spec = p.stragglers[kind]
            for _ in range(spec.count):
                start = int(rng.integers(0, latest))
                end = p.iterations
                if rng.random() >= spec.persistent_fraction:
                    end = min(
                        p.iterations,
                        start + max(1, round(rng.exponential(spec.mean_transient_iters))),
                    )
                factor = float(rng.uniform(*spec.slowdown))
                r = int(ranks[len(out)])
                out.append(Straggler(len(out), kind, FAIL_SLOW_CAUSE[kind], r, start, end, factor))
        return out

    def _fault_factor(self, first: int, iters: int) -> np.ndarray:
        """Operator multipliers ``[op, rank, iteration]`` of the faults active in the window."""
        mult = np.ones((len(OPS), self.params.ranks, iters))
        for f in self.faults:
            if f.active(first, first + iters):
                lo, hi = max(f.start_iter - first, 0), min(f.end_iter - first, iters)
                for op in FAULT_OPS[f.kind]:
                    mult[OPS.index(op), f.rank, lo:hi] *= f.factor
        return mult

    # ---- the timeline ------------------------------------------------------------
    def start(self) -> None:
        """Start the job's process: one window of iterations per step."""
        self.sim.env.process(self._run())

    def _run(self) -> Any:
        p = self.params
        while self.iteration < p.iterations:
            first, iters = self.iteration, min(p.window_iters, p.iterations - self.iteration)
            win = simulate_window(
                self.base, p.noise, self.rank_factor, self._fault_factor(first, iters), self.rng,
                p.gpus_per_node, p.link_telemetry,
            )  # fmt: skip
            self._stamp_starts(first, win)
            window_s = float(win.iteration_s.sum())
            yield self.sim.env.timeout(window_s)
            self.busy_s += window_s
            self.energy.window(self.sim.now - window_s, win)
            self.iteration += iters
            self.tables.window(self.windows, self.sim.now - window_s, first, win)
            pause = self._analyse(first, iters, win, window_s)
            self.windows += 1
            if pause > 0:
                yield self.sim.env.timeout(pause)
        self.done.succeed()

    def _stamp_starts(self, first: int, win: Window) -> None:
        """Record the start time of faults whose first iteration is in this window."""
        starts = self.sim.now + np.concatenate([[0.0], np.cumsum(win.iteration_s)[:-1]])
        for f in self.faults:
            if first <= f.start_iter < first + len(starts):
                f.start_s = float(starts[f.start_iter - first])

    def _truth(self, first: int, iters: int) -> tuple[OracleFault, ...]:
        now = self.sim.now
        return tuple(
            OracleFault(
                f.fault_id, "fail-slow", f.kind, f.cause, f.rank, f.start_s, now - f.start_s
            )
            for f in self.faults
            if f.active(first, first + iters)
        )

    def _analyse(self, first: int, iters: int, win: Window, window_s: float) -> float:
        """Run the detector on the window, score and mitigate; returns the pause in seconds."""
        truth = self._truth(first, iters)
        view = WindowView(
            self.sim.now, self.windows, first, window_s, OPS, COMPUTE_OPS,
            win.op_s, win.entry_s, win.comm_s, win.iteration_s,
        )  # fmt: skip
        detector = self.policies["detector"]
        if getattr(detector, "oracle", False):  # labelled upper bound: sees the faults
            findings = detector.detect(OracleWindowView(view, truth))
        else:
            findings = detector.detect(view)
        by_rank = {t.rank: self.faults[t.fault_id] for t in truth}
        slowdown = float(win.iteration_s.mean()) / self.base.iteration_s()
        actions = []
        for finding in findings:
            fault = by_rank.get(finding.rank)
            self._score(finding, fault)
            actions.append((finding, self._mitigate(finding, slowdown)))
        return self._apply(actions)

    def _score(self, finding: Finding, fault: Straggler | None) -> None:
        self.tally.add(finding.cause, fault)
        if fault is not None and math.isnan(fault.detected_s):
            fault.detected_s = self.sim.now
            fault.detected_cause = finding.cause
        self.tables.finding(self.windows, self.sim.now, finding, fault)

    def _mitigate(self, finding: Finding, slowdown: float) -> str:
        since = self.sim.now - self.checkpoint_s
        view = MitigationView(
            self.sim.now, finding, slowdown, since, self.params.restart_s, self.params.replace_s
        )
        action = self.policies["mitigation"].decide(view)
        if action not in ("evict", "restart", "ignore"):
            raise InvariantViolation(f"mitigation returned {action!r}")
        return str(action)

    def _apply(self, actions: list[tuple[Finding, str]]) -> float:
        """End the faults of evicted ranks; one pause per window (the costliest remedy)."""
        kinds = {a for _, a in actions}
        for finding, action in actions:
            if action in ("evict", "restart"):
                for f in self.faults:
                    if f.rank == finding.rank and f.end_iter > self.iteration:
                        f.end_iter = max(f.start_iter, self.iteration)
        self.evictions += sum(a == "evict" for _, a in actions)
        pause = redo = 0.0
        if "restart" in kinds:
            self.restarts += 1
            redo = self.sim.now - self.checkpoint_s
            pause = self.params.restart_s + redo
            self.checkpoint_s = self.sim.now + pause
        elif "evict" in kinds:
            pause = self.params.replace_s
        if pause:
            self.energy.pause(pause, redo)
        if pause:
            self.tables.pause(self.sim.now, pause, "restart" if "restart" in kinds else "evict")
        self.mitigation_s += pause
        self._maybe_checkpoint()
        return pause

    def _maybe_checkpoint(self) -> None:
        """Checkpoints are taken every ``checkpoint_iters`` iterations (cost not modelled here)."""
        if self.iteration % self.params.checkpoint_iters < self.params.window_iters:
            self.checkpoint_s = self.sim.now

    # ---- results -----------------------------------------------------------------
    def horizon_s(self) -> float | None:
        """Nominal duration of the run."""
        return self.params.iterations * self.base.iteration_s()

    def check(self) -> None:
        """Every iteration ran once; every detected fault was detected after it started."""
        if self.iteration != self.params.iterations:
            raise InvariantViolation(f"ran {self.iteration} of {self.params.iterations} iterations")
        for f in self.faults:
            if f.detected_s < f.start_s:
                raise InvariantViolation(f"fault {f.fault_id} detected before it started")

    def check_partial(self) -> None:
        """At any moment: the iterations of the windows recorded are those run, the rest
        in flight or to come; no fault detected before it started or after now."""
        p, windows = self.params, self.tables._windows
        recorded = int(windows.column("iterations").sum()) if len(windows) else 0
        if len(windows) != self.windows or recorded != self.iteration:
            raise InvariantViolation(
                f"observability: {len(windows)} windows of {recorded} iterations recorded, "
                f"{self.windows} windows of {self.iteration} iterations run"
            )
        in_flight = min(p.window_iters, p.iterations - self.iteration)
        conserve("observability iterations", p.iterations, self.iteration, in_flight,
                 p.iterations - self.iteration - in_flight)  # fmt: skip
        for f in self.faults:
            if f.detected_s < f.start_s or f.detected_s > self.sim.now:
                raise InvariantViolation(
                    f"observability fault {f.fault_id} detected at {f.detected_s} s, outside "
                    f"[{f.start_s}, {self.sim.now}] s"
                )

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """Detection quality (see :mod:`workloads.observability_scoring`) and run figures."""
        self.tables.faults(self.faults)
        out: dict[str, float | int | str] = dict(
            score(self.faults, self.tally, self.windows, self.params.ranks)
        )
        mean_it = self.busy_s / max(self.iteration, 1)
        out |= {
            "windows": self.windows,
            "nominal_iteration_s": self.base.iteration_s(),
            "mean_iteration_s": mean_it,
            "slowdown": mean_it / self.base.iteration_s(),
            "evictions": self.evictions,
            "restarts": self.restarts,
            "mitigation_s": self.mitigation_s,
            "makespan_s": end_s,
        }
        if self._energy_out is None:  # the energy tables are written once
            self._energy_out = self.energy.columns(self.cluster, end_s, self.iteration)
        out |= self._energy_out
        return out
