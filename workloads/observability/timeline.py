"""The job-level timeline of ``observability-faults``: one SimPy process, event to event.

States: ``run`` (training at the speed the active fail-slow faults leave), ``ckpt``
(writing a checkpoint), ``recover`` (detecting a fail-stop fault and restarting), and
``evict`` (replacing a straggler). Events wait in a heap ordered by (time, sequence);
at equal times the end of a state is handled before a new event (documented order).
"""

from __future__ import annotations

import heapq
import math
from itertools import count
from typing import TYPE_CHECKING, Any, Protocol

from hetsim.simulator.engine import InvariantViolation
from hetsim.workloads.observability.faults import Fault
from hetsim.workloads.observability.telemetry import iteration_slowdown
from hetsim.workloads.observability.view import (
    Finding,
    MitigationView,
    OracleEventView,
    OracleFault,
)

if TYPE_CHECKING:
    import numpy as np
    import simpy

    from hetsim.simulator.engine import Simulation
    from hetsim.workloads.observability.telemetry import BaseTimes

STOP_COLUMNS = (
    "time_s",
    "cause",
    "component",
    "rank",
    "detected",
    "detect_s",
    "lost_work_s",
    "state",
)
SLOW_COLUMNS = ("fault_id", "kind", "cause", "rank", "start_s", "end_s", "factor", "detected",
                "action", "action_s")  # fmt: skip


class RecoveryTimes(Protocol):
    """The pause lengths of a fault-tolerance scenario that the timeline charges
    (workloads.observability.job.FaultJobParams), in seconds."""

    @property
    def checkpoint_s(self) -> float:
        """Writing one checkpoint."""
        ...

    @property
    def restart_s(self) -> float:
        """Rescheduling, reloading and warming up after a restart."""
        ...

    @property
    def watchdog_s(self) -> float:
        """The collective timeout that catches undetected fail-stop faults."""
        ...

    @property
    def replace_s(self) -> float:
        """Evicting a rank and bringing in a spare."""
        ...

    @property
    def manual_detect_s(self) -> float:
        """Operators finding a straggler the detector missed."""
        ...


class FaultJob(Protocol):
    """The training job a timeline walks (workloads.observability.job.FaultJobWorkload):
    its injected faults and false alarms, checkpoint interval, policies and simulation."""

    sim: Simulation
    params: RecoveryTimes
    #: decision point -> policy ("detector", "checkpoint", "mitigation")
    policies: dict[str, Any]
    #: what classifies each fault: the black-box detector, or a telemetry detector's probe
    #: (workloads.observability.probe.TelemetryProbe)
    detector: Any
    #: fires when the job's wall-clock horizon is reached
    done: simpy.Event
    #: nominal operator and collective times (for the fail-slow slowdown)
    base: BaseTimes
    #: wall-clock duration (s)
    horizon: float
    #: work between checkpoints (s)
    interval_s: float
    #: fail-stop and fail-slow faults injected, and false-alarm times (s)
    stops: list[Fault]
    slows: list[Fault]
    alarms: np.ndarray
    #: prices each timeline segment (workloads.observability.energy.JobEnergy)
    energy: Any


class JobTimeline:
    """State, accounting and event handlers of one long training job."""

    def __init__(self, job: FaultJob) -> None:
        self.job = job
        self.sim = job.sim
        self._seq = count()
        self._heap: list[tuple[float, int, str, Any]] = []
        for f in job.stops:
            self._push(f.start_s, "stop", f)
        for f in job.slows:
            self._push(f.start_s, "slow", f)
        for t in job.alarms:
            self._push(float(t), "alarm", None)
        self.mode, self.mode_until = "run", math.inf
        self.work_s = self.saved_s = 0.0
        self.next_ckpt = job.interval_s
        self.active: dict[int, Fault] = {}
        self.run_s = self.ckpt_s = self.recover_s = self.evict_s = 0.0
        self.lost_s = self.slow_loss_s = self.detect_s = 0.0
        self.fail_stops = self.mitigated = self.checkpoints = 0
        self.mode_start = 0.0
        rec = self.sim.recorder
        self.stop_rows = rec.table("interruptions", STOP_COLUMNS)
        self.slow_rows = rec.table("fail_slow", SLOW_COLUMNS)
        self.track = rec.track("job", group="observability", kind="job")

    def _push(self, t: float, kind: str, payload: Any) -> None:
        heapq.heappush(self._heap, (t, next(self._seq), kind, payload))

    # ---- the loop ----------------------------------------------------------------
    def run(self) -> Any:
        """SimPy process: advance to the next event until the horizon."""
        horizon = self.job.horizon
        while self.sim.now < horizon:
            now = self.sim.now
            t_evt = self._heap[0][0] if self._heap else math.inf
            t_mode = self.mode_until if self.mode != "run" else math.inf
            t_ckpt = math.inf
            if self.mode == "run":
                t_ckpt = now + max(0.0, self.next_ckpt - self.work_s) * self._slowdown()
            t = min(t_evt, t_mode, t_ckpt, horizon)
            self._account(t - now)
            yield self.sim.env.timeout(t - now)
            if t >= horizon:
                break
            if t_mode <= t:
                self._end_mode()
            elif t_evt <= t:
                _, _, kind, payload = heapq.heappop(self._heap)
                getattr(self, f"_on_{kind}")(payload)
            else:
                self._enter("ckpt", self.job.params.checkpoint_s)
        self._span_end()
        self.job.done.succeed()

    def _slowdown(self) -> float:
        active = [(f.kind, f.factor) for f in self.active.values()]
        return iteration_slowdown(self.job.base, active) if active else 1.0

    def _account(self, dt: float) -> None:
        if dt < 0:
            raise InvariantViolation(f"time went back by {-dt} s")
        if self.mode == "run":
            speed = 1.0 / self._slowdown()
            self.work_s += dt * speed
            self.run_s += dt
            self.slow_loss_s += dt * (1.0 - speed)
        else:
            speed = 0.0
            name = f"{self.mode}_s"
            setattr(self, name, getattr(self, name) + dt)
        self.job.energy.segment(self.sim.now, dt, self.mode, speed)

    def _enter(self, mode: str, duration_s: float) -> None:
        self._span_end()
        self.mode, self.mode_until, self.mode_start = mode, self.sim.now + duration_s, self.sim.now

    def _span_end(self) -> None:
        if self.mode != "run" and self.sim.now > self.mode_start:
            self.sim.recorder.span(self.track, self.mode, self.mode_start, self.sim.now)

    def _end_mode(self) -> None:
        if self.mode == "ckpt":
            self.saved_s = self.work_s
            self.checkpoints += 1
        self.next_ckpt = self.saved_s + self.job.interval_s
        self._span_end()
        self.mode, self.mode_until = "run", math.inf

    # ---- handlers ----------------------------------------------------------------
    def _truth(self, f: Fault) -> OracleFault:
        return OracleFault(f.fault_id, f.category, f.kind, f.cause, f.rank, f.start_s,
                         self.sim.now - f.start_s)  # fmt: skip

    def _rollback(self, recovery_s: float) -> float:
        lost = self.work_s - self.saved_s
        self.lost_s += lost
        self.work_s = self.saved_s
        self._enter("recover", recovery_s)
        return lost

    def _on_stop(self, f: Fault) -> None:
        p = self.job.params
        d = self.job.detector.classify(OracleEventView(self.sim.now, self._truth(f)))
        delay = min(d.delay_s, p.watchdog_s) if d.detected else p.watchdog_s
        self.fail_stops += 1
        self.detect_s += delay
        state = self.mode
        self.active.pop(next((k for k, s in self.active.items() if s.rank == f.rank), -1), None)
        lost = self._rollback(delay + p.restart_s)
        self.stop_rows.append(f.start_s, f.kind, f.cause, f.rank, d.detected, delay, lost, state)

    def _on_slow(self, f: Fault) -> None:
        self.active[f.fault_id] = f
        if math.isfinite(f.end_s):
            self._push(f.end_s, "slow_end", f)
        d = self.job.detector.classify(OracleEventView(self.sim.now, self._truth(f)))
        manual = self.job.params.manual_detect_s
        delay = min(d.delay_s, manual) if d.detected else manual
        if f.start_s + delay < f.end_s:
            self._push(f.start_s + delay, "detect", (f, d.cause if d.detected else f.cause))
        else:
            self._slow_row(f, False, "none")

    def _on_slow_end(self, f: Fault) -> None:
        self.active.pop(f.fault_id, None)

    def _on_detect(self, payload: tuple[Fault, str]) -> None:
        f, cause = payload
        if f.fault_id not in self.active:
            return self._slow_row(f, True, "gone")
        if self.mode != "run":
            return self._push(self.mode_until, "detect", payload)
        action = self._decide(Finding(f.rank, cause, "model", 1.0))  # type: ignore[arg-type]
        if action != "ignore":
            self.active.pop(f.fault_id)
            self.mitigated += 1
        self._slow_row(f, True, action)
        self._act(action)

    def _on_alarm(self, _: None) -> None:
        if self.mode == "run":
            self._act(self._decide(Finding(-1, "compute", "model", 0.5)))

    def _decide(self, finding: Finding) -> str:
        p = self.job.params
        view = MitigationView(self.sim.now, finding, self._slowdown(),
                              self.work_s - self.saved_s, p.restart_s, p.replace_s)  # fmt: skip
        action = str(self.job.policies["mitigation"].decide(view))
        if action not in ("evict", "restart", "ignore"):
            raise InvariantViolation(f"mitigation returned {action!r}")
        return action

    def _act(self, action: str) -> None:
        if action == "evict":
            self._enter("evict", self.job.params.replace_s)
        elif action == "restart":
            self._rollback(self.job.params.restart_s)

    def _slow_row(self, f: Fault, detected: bool, action: str) -> None:
        self.slow_rows.append(f.fault_id, f.kind, f.cause, f.rank, f.start_s, f.end_s,
                              f.factor, detected, action, self.sim.now)  # fmt: skip
