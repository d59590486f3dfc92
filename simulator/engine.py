"""The simulation kernel: a SimPy environment, named random streams and a recorder.

Every piece of a run's state hangs off one :class:`Simulation`; nothing is global, so
two simulations in one process are independent. Devices, links and workloads receive
the simulation and borrow its environment, random streams and recorder.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from heapq import heapify, heappush
from pathlib import Path
from typing import Any

import simpy

from hetsim.simulator.errors import InvariantViolation
from hetsim.simulator.recorder import Recorder
from hetsim.simulator.rng import RandomStreams


class ClockLimit(RuntimeError):
    """An event was scheduled where the clock cannot go: past :data:`MAX_TIME_S` or at
    a non-finite time. (Below the limit float64 keeps every delay over 0.2 ms, so a
    clock never stalls on ``t + d == t``; smaller residues are same-instant events.)"""


MAX_TIME_S = 1e12
"""Latest simulated time (~31,700 years): float64 still resolves 0.2 ms there, and no
experiment needs more. A later event means a bad input (a submit time of 1e30 s, a
restart of 1e308 s) that would otherwise stall the clock or run forever."""


class _Environment(simpy.Environment):
    """``simpy.Environment`` that refuses events the clock cannot reach (ClockLimit)."""

    def schedule(
        self, event: simpy.Event, priority: int = simpy.core.NORMAL, delay: float = 0
    ) -> None:
        at = self._now + delay
        if not at <= MAX_TIME_S:  # also NaN
            raise ClockLimit(f"an event at t={self._now:.6g} s + {delay:.6g} s "
                             f"{_waiter(event)}cannot be scheduled: past the latest "
                             f"simulated time, {MAX_TIME_S:g} s")  # fmt: skip
        # simpy.Environment.schedule, inlined (one call less on every event)
        heappush(self._queue, (at, priority, next(self._eid), event))  # type: ignore[misc]


class Timer:
    """A reusable timer of one callback, pending at most once at a time (a server's
    service completion, a workload's next arrival): :meth:`start` gives the queue entry
    (time, priority, event id) and hence the order of ``env.timeout(delay_s)`` with the
    callback appended, without building a SimPy Timeout each time. SimPy's ``step``
    reads two fields of an event that fired, its callbacks and that it succeeded; the
    timer is that event (it cannot be waited on). Starting it while pending is an error.
    """

    __slots__ = ("_call", "_env", "_ok", "callbacks")

    def __init__(self, sim: Simulation, callback: Callable[[Any], None]) -> None:
        self._env: Any = sim.env
        self._call = callback
        self.callbacks: list[Callable[[Any], None]] | None = None  # None: not pending
        self._ok = True

    @property
    def pending(self) -> bool:
        """Started and not yet fired."""
        return self.callbacks is not None

    def start(self, delay_s: float) -> None:
        """Fire ``delay_s`` seconds from now (checked as simpy.Timeout and
        :class:`_Environment` check a timeout's delay)."""
        if self.callbacks is not None:
            raise InvariantViolation(f"timer of {self._call!r} started while pending")
        env = self._env
        if delay_s < 0:
            raise ValueError(f"Negative delay {delay_s}")
        at = env._now + delay_s
        if not at <= MAX_TIME_S:  # also NaN
            raise ClockLimit(
                f"an event at t={env._now:.6g} s + {delay_s:.6g} s cannot be "
                f"scheduled: past the latest simulated time, {MAX_TIME_S:g} s"
            )
        self.callbacks = [self._call]
        heappush(env._queue, (at, simpy.core.NORMAL, next(env._eid), self))

    def start_at(self, time_s: float) -> None:
        """Fire at ``time_s``, or now if that has passed: :meth:`start` with the delay
        ``max(0, time_s - now)`` (the same arithmetic, so the same event time)."""
        self.start(max(0.0, time_s - self._env._now))


class Alarm:
    """A one-shot callback at an exact simulated time, which can be cancelled: the
    queue entry ``(time_s, NORMAL, next event id)``, with no delay arithmetic, so a
    time built as ``t0 + d1 + d2 ...`` fires exactly there (a mechanism that advances
    several of its own steps in one event schedules their end so). A cancelled alarm
    leaves the queue, so it never moves the clock. Like :class:`Timer`, it is the event
    SimPy steps (it cannot be waited on)."""

    __slots__ = ("_entry", "_env", "_ok", "callbacks")

    def __init__(self, sim: Simulation, time_s: float, callback: Callable[[Any], None]) -> None:
        env: Any = sim.env
        if not env._now <= time_s <= MAX_TIME_S:  # also NaN
            raise ClockLimit(
                f"an alarm at t={time_s:.6g} s cannot be set at t={env._now:.6g} s: in the "
                f"past or past the latest simulated time, {MAX_TIME_S:g} s"
            )
        self.callbacks: list[Callable[[Any], None]] | None = [callback]
        self._ok = True
        self._env = env
        self._entry = (time_s, simpy.core.NORMAL, next(env._eid), self)
        heappush(env._queue, self._entry)

    def cancel(self) -> None:
        """Take the alarm out of the queue (no effect once fired)."""
        if self.callbacks is None:
            return
        self.callbacks = []
        queue = self._env._queue
        queue.remove(self._entry)  # a handful of entries per instance: O(n) is cheap
        heapify(queue)


def _waiter(event: simpy.Event) -> str:
    """``"(process NAME) "`` for the first process waiting on ``event``, if any."""
    for cb in getattr(event, "callbacks", None) or []:
        owner = getattr(cb, "__self__", None)
        gen = getattr(owner, "_generator", None)
        if gen is not None:
            return f"(process {getattr(gen, '__qualname__', gen)}) "
    return ""


class Simulation:
    """One run: owns the ``simpy.Environment``, the random streams and the recorder.

    Same-instant ordering contract: callbacks registered with :meth:`at_end_of_instant`
    run after every event already scheduled for the current time, so a scheduling pass
    sees all arrivals and completions of that instant (one coalesced pass per instant).
    """

    def __init__(self, seed: int = 0, *, record_spans: bool = True) -> None:
        self.env: simpy.Environment = _Environment()
        self.seed = seed
        self.rng = RandomStreams(seed)
        self.recorder = Recorder(record_spans=record_spans)
        self._checks: list[Callable[[], None]] = []
        self._end_of_instant: dict[Any, Callable[[], None]] = {}
        self._pass_pending = False
        #: Runs a nested scenario given as a dict (and the folder its paths resolve in)
        #: and returns its result; set by the app layer's runner, ``None`` elsewhere.
        #: Mechanisms that measure by sub-simulation call it (serving's measured goodput).
        self.run_nested: Callable[[dict[str, Any], Path], Any] | None = None

    @property
    def now(self) -> float:
        """Current simulated time in seconds."""
        return float(self.env.now)

    def advance(self, delay_s: float) -> bool:
        """Move the clock ``delay_s`` ahead without an event where nothing else can
        happen meanwhile: to ``now + delay_s``, the time a process's
        ``yield env.timeout(delay_s)`` resumes at, when no other event is due at or
        before it (a process that advances several of its own steps this way is
        exactly step-by-step, with fewer events). Returns False and does nothing
        when an event is due by then, the delay is negative or the time is past
        :data:`MAX_TIME_S`: the caller yields the timeout instead (which checks)."""
        env: Any = self.env
        at = env._now + delay_s
        if not (delay_s >= 0 and at <= MAX_TIME_S):  # also NaN
            return False
        queue = env._queue
        if queue and queue[0][0] <= at:
            return False
        env._now = at
        return True

    def add_invariant(self, check: Callable[[], None]) -> None:
        """Register a check run by :meth:`check_invariants` (raises on violation)."""
        self._checks.append(check)

    def check_invariants(self) -> None:
        """Run every registered invariant check."""
        for check in self._checks:
            check()

    def at_end_of_instant(self, key: Any, callback: Callable[[], None]) -> None:
        """Run ``callback`` once at the current time, after every other event of it.

        Calls with the same ``key`` in one instant coalesce into one call; distinct keys
        run in the order they were first registered. The passes run when the event queue
        holds nothing else at ``now``, so a scheduling pass sees every arrival and
        completion of its instant, including those triggered by zero-delay chains.
        """
        if key in self._end_of_instant:
            return
        self._end_of_instant[key] = callback
        if not self._pass_pending:
            self._defer_pass()

    def _defer_pass(self) -> None:
        self._pass_pending = True
        simpy.Timeout(self.env, 0).callbacks.append(self._run_passes)

    def _run_passes(self, _: simpy.Event) -> None:
        if self.env.peek() == self.env.now:
            self._defer_pass()  # more work at this instant: go behind it
            return
        self._pass_pending = False
        passes, self._end_of_instant = self._end_of_instant, {}
        for callback in passes.values():
            callback()

    def run(self, until: float | simpy.Event | None = None) -> None:
        """Advance until ``until`` (a time in seconds, an event, or no events remain)."""
        if isinstance(until, int | float) and until < self.now:
            raise InvariantViolation(f"run(until={until}) is before now={self.now}")
        # the objects built before the run (model, tables, imported modules) are set
        # apart from the collector while it runs (gc.freeze): its full passes would walk
        # them all again and again (about 5% of a MoE decode run's time, issue 21).
        # Unfrozen after, so their garbage is collected as before. No result depends on
        # when the collector runs; a caller's own freeze is left as it is.
        freeze = gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        try:
            self.env.run(until=until)
        finally:
            if freeze:
                gc.unfreeze()
