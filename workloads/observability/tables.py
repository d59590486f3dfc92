"""Output tables and timeline of the straggler-detection workload, and its injection spec.

Tables (the detector's input and the scoring's output):

- ``windows``: one row per analysis window (time span, mean iteration, entry skew);
- ``rank_windows``: one row per rank per window: mean operator times, wait at the
  collective, achieved NIC bandwidth (gradient bytes / own link time), SM clock ratio
  (nominal / observed forward time): per-rank telemetry and node metrics;
- ``telemetry`` (``record_telemetry``): one row per rank per iteration;
- ``findings``: one row per finding with its verdict;
- ``faults``: the ground truth with detection time and cause.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveFloat, model_validator

from hetsim.simulator.recorder import Recorder
from hetsim.workloads.observability.scoring import Straggler
from hetsim.workloads.observability.telemetry import OPS, TrainingModel, Window
from hetsim.workloads.observability.view import Finding


class StragglerKind(BaseModel):
    """How many fail-slow faults of one kind to inject, how severe, how long."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    count: NonNegativeInt = Field(
        default=0,
        description="Faults of this kind injected, each on a distinct "
        "rank at a uniformly drawn iteration.",
    )
    slowdown: tuple[float, float] = Field(
        default=(1.1, 2.0),
        description="Range of the operator-time multiplier of a fault, drawn uniformly.",
    )
    persistent_fraction: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Share of these faults that last to the end of "
        "the run; the rest are transient.",
    )
    mean_transient_iters: PositiveFloat = Field(
        default=150.0, description="Mean length of a transient fault, in iterations (exponential)."
    )

    @model_validator(mode="after")
    def _check(self) -> StragglerKind:
        lo, hi = self.slowdown
        if not 1.0 <= lo <= hi:
            raise ValueError("slowdown must be (low, high) with 1 <= low <= high")
        return self


WINDOW_COLUMNS = ("window", "start_s", "end_s", "first_iteration", "iterations",
                  "mean_iteration_s", "mean_comm_s", "mean_entry_skew_s")  # fmt: skip
RANK_COLUMNS = ("window", "rank", "node", "self_s", "dataload_s", "forward_s", "backward_s",
                "send_s", "wait_s", "nic_Bps", "sm_clock_ratio")  # fmt: skip
TELEMETRY_COLUMNS = ("iteration", "rank", "dataload_s", "forward_s", "backward_s", "send_s",
                     "wait_s", "iteration_s")  # fmt: skip
FINDING_COLUMNS = ("window", "time_s", "rank", "cause", "operator", "score", "true",
                   "fault_id", "truth_cause")  # fmt: skip
FAULT_COLUMNS = ("fault_id", "kind", "cause", "rank", "start_iteration", "end_iteration",
                 "start_s", "factor", "detected_s", "detected_cause", "delay_s")  # fmt: skip


class TableOptions(Protocol):
    """The settings of a straggler-detection scenario that shape its tables
    (workloads.observability.workload.ObservabilityParams)."""

    @property
    def model(self) -> TrainingModel:
        """The trained model (its gradient bytes give the achieved NIC bandwidth)."""
        ...

    @property
    def gpus_per_node(self) -> int:
        """GPUs per node (a rank's node is rank // gpus_per_node)."""
        ...

    @property
    def record_rank_windows(self) -> bool:
        """Whether to write the ``rank_windows`` table."""
        ...

    @property
    def record_telemetry(self) -> bool:
        """Whether to write the ``telemetry`` table (one row per rank-iteration)."""
        ...


class ObservabilityTables:
    """Writes the straggler workload's tables and timeline spans."""

    def __init__(self, recorder: Recorder, params: TableOptions) -> None:
        self.rec = recorder
        self.params = params
        self.grad_bytes = params.model.grad_bytes()
        self._windows = recorder.table("windows", WINDOW_COLUMNS)
        self._ranks = recorder.table("rank_windows", RANK_COLUMNS)
        self._findings = recorder.table("findings", FINDING_COLUMNS)
        self._telemetry = (
            recorder.table("telemetry", TELEMETRY_COLUMNS) if params.record_telemetry else None
        )
        self.job = recorder.track("job", group="observability", kind="job")
        self.fault_track = recorder.track("faults", group="observability", kind="faults")
        self.nominal_forward_s: float | None = None

    def window(self, index: int, start_s: float, first: int, win: Window) -> None:
        """One row for the window, then per-rank (and per-iteration) telemetry."""
        skew = win.entry_s.max(axis=0) - np.median(win.entry_s, axis=0)
        end_s = start_s + float(win.iteration_s.sum())
        self._windows.append(index, start_s, end_s, first, len(win.iteration_s),
                             float(win.iteration_s.mean()), float(win.comm_s.mean()),
                             float(skew.mean()))  # fmt: skip
        self.rec.span(self.job, f"window {index}", start_s, end_s)
        if self.params.record_rank_windows:
            self._rank_rows(index, win)
        if self._telemetry is not None:
            self._telemetry_rows(first, win)

    def _rank_rows(self, index: int, win: Window) -> None:
        mean = win.op_s.mean(axis=2)  # ops x ranks
        wait = win.wait_s.mean(axis=1)
        fwd = mean[OPS.index("forward")]
        if self.nominal_forward_s is None:
            self.nominal_forward_s = float(np.median(fwd))
        nic = self.grad_bytes / mean[OPS.index("send")]
        clock = self.nominal_forward_s / fwd
        selfs = mean.sum(axis=0)
        g = self.params.gpus_per_node
        cols = [selfs, *mean, wait, nic, clock]
        for r in range(mean.shape[1]):
            self._ranks.append(index, r, r // g, *(float(c[r]) for c in cols))

    def _telemetry_rows(self, first: int, win: Window) -> None:
        wait = win.wait_s
        n_ranks, iters = win.entry_s.shape
        for i in range(iters):
            for r in range(n_ranks):
                ops = (float(win.op_s[o, r, i]) for o in range(len(OPS)))
                self._telemetry.append(first + i, r, *ops, float(wait[r, i]),  # type: ignore[union-attr]
                                       float(win.iteration_s[i]))  # fmt: skip

    def finding(self, window: int, time_s: float, f: Finding, fault: Straggler | None) -> None:
        """One row per finding with its verdict."""
        fid = -1 if fault is None else fault.fault_id
        truth = "" if fault is None else fault.cause
        self._findings.append(window, time_s, f.rank, f.cause, f.operator, f.score,
                              fault is not None, fid, truth)  # fmt: skip

    def pause(self, now_s: float, pause_s: float, what: str) -> None:
        """A mitigation pause on the job's timeline."""
        self.rec.span(self.job, what, now_s, now_s + pause_s)

    def faults(self, faults: list[Straggler]) -> None:
        """The ground truth, written once at the end."""
        table = self.rec.table("faults", FAULT_COLUMNS)
        if len(table):
            return
        for f in faults:
            delay = f.detected_s - f.start_s
            table.append(f.fault_id, f.kind, f.cause, f.rank, f.start_iter, f.end_iter,
                         f.start_s, f.factor, f.detected_s, f.detected_cause, delay)  # fmt: skip
            if not math.isnan(f.start_s):
                end = f.start_s if math.isnan(f.detected_s) else f.detected_s
                self.rec.span(self.fault_track, f"{f.kind} r{f.rank}", f.start_s, end, _args(f))


def _args(f: Straggler) -> dict[str, Any]:
    return {"factor": f.factor, "cause": f.cause, "detected_s": f.detected_s}
