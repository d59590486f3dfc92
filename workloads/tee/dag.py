"""A step as events: a task graph run as SimPy processes on named resources.

A TEE step is a set of tasks (a layer's forward on the accelerator, a crypto pass on an
engine, a copy on one PCIe direction, the CPU's Adam, a commit barrier), each with a
duration, the resource it occupies and the tasks it waits for. :func:`run_tasks` runs
them as SimPy events (a timeout per task, callbacks for the dependencies; no process per
task, for speed): a task waits for its dependencies, then requests its resource (capacity
1: lower ``priority`` first, then request time, then request order) and holds it for its
duration; a task with ``priority > 0`` (background work) requests one event later, so
critical tasks ready at the same instant go first. The resource is not preempted. A task on the
resource ``""`` occupies nothing (a pure delay, such as a verification latency).
:func:`makespan_s` runs the same graph in a private environment, so estimates and the
recorded run come from one code path.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import simpy

from hetsim.simulator.engine import InvariantViolation, Simulation


@dataclass(frozen=True)
class Task:
    """One unit of work: ``duration_s`` on ``resource`` after every task in ``deps``."""

    name: str
    resource: str
    duration_s: float
    deps: tuple[int, ...] = ()
    priority: int = 0


Span = Callable[[str, str, float, float], None]  # (resource, task name, start, end)


def check_tasks(tasks: Sequence[Task]) -> None:
    """Dependencies point to earlier tasks; durations are finite and >= 0."""
    for i, t in enumerate(tasks):
        if not (t.duration_s >= 0 and t.duration_s < float("inf")):
            raise ValueError(f"task {t.name}: duration {t.duration_s} must be finite and >= 0")
        if any(not 0 <= d < i for d in t.deps):
            raise ValueError(f"task {t.name}: dependencies must be earlier tasks")


def run_tasks(
    env: simpy.Environment, tasks: Sequence[Task], span: Span | None = None
) -> simpy.Event:
    """Start every task in ``env``; the returned event fires when all end, with each
    task's end time (a list in task order) as its value.

    Event-driven without a process per task: a task becomes ready when its last
    dependency ends, then requests its resource (queue order: priority, request time,
    request order); a resource runs one task at a time.
    """
    check_tasks(tasks)
    n = len(tasks)
    out = env.event()
    ends = [0.0] * n
    if not n:
        out.succeed(ends)
        return out
    waiting = [len(t.deps) for t in tasks]
    children: list[list[int]] = [[] for _ in range(n)]
    for i, t in enumerate(tasks):
        for d in t.deps:
            children[d].append(i)
    busy: dict[str, bool] = {}
    queues: dict[str, list[tuple[int, float, int, int]]] = {}
    seq = itertools.count()
    left = [n]

    def start(i: int) -> None:
        t = tasks[i]
        t0 = env.now
        ev = env.timeout(t.duration_s)
        ev.callbacks.append(lambda _e: finish(i, t0))

    def request(i: int) -> None:
        res = tasks[i].resource
        if not res:
            start(i)
        elif not busy.get(res, False):
            busy[res] = True
            start(i)
        else:
            heapq.heappush(queues.setdefault(res, []), (tasks[i].priority, env.now, next(seq), i))

    def ready(i: int) -> None:
        if tasks[i].priority > 0 and tasks[i].resource:  # background: one event later
            env.timeout(0).callbacks.append(lambda _e: request(i))
        else:
            request(i)

    def finish(i: int, t0: float) -> None:
        t = tasks[i]
        ends[i] = env.now
        if span is not None and env.now > t0:
            span(t.resource or "delay", t.name, t0, env.now)
        if t.resource:
            q = queues.get(t.resource)
            if q:
                start(heapq.heappop(q)[3])
            else:
                busy[t.resource] = False
        for c in children[i]:
            waiting[c] -= 1
            if waiting[c] == 0:
                ready(c)
        left[0] -= 1
        if left[0] == 0:
            out.succeed(ends)

    for i in range(n):
        if waiting[i] == 0:
            ready(i)
    return out


def task_ends_s(tasks: Sequence[Task]) -> list[float]:
    """End time of every task when the graph runs alone from time 0."""
    env = simpy.Environment()
    ev = run_tasks(env, tasks)
    env.run()
    if not tasks:
        return []
    return [float(x) for x in ev.value or ()]


def makespan_s(tasks: Sequence[Task]) -> float:
    """End of the last task when the graph runs alone from time 0."""
    ends = task_ends_s(tasks)
    return max(ends) if ends else 0.0


def run_repeated(
    sim: Simulation,
    tasks: Sequence[Task],
    repeat_s: float,
    count: int,
    traced: int,
    on_end: Callable[[int, float, float], None],
) -> Generator[simpy.Event, object, None]:
    """Process body that runs the task graph ``count`` times back to back, recording
    spans (one track per resource) for the first ``traced`` runs. Each run must last
    ``repeat_s`` (the closed-form makespan) within 1e-9 relative, else
    ``InvariantViolation``; ``on_end(i, start_s, end_s)`` is called after run i."""
    env, rec = sim.env, sim.recorder
    tracks: dict[str, str] = {}

    def span(res: str, name: str, a: float, b: float) -> None:
        if res not in tracks:
            tracks[res] = rec.track(f"tee.{res}", "tee", "stage")
        rec.span(tracks[res], name, a, b)

    for i in range(count):
        start = env.now
        yield run_tasks(env, tasks, span if i < traced else None)
        if abs(env.now - start - repeat_s) > 1e-9 * max(1.0, repeat_s):
            raise InvariantViolation(f"run {i} took {env.now - start} s, estimated {repeat_s} s")
        on_end(i, start, env.now)
