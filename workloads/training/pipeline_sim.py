"""Pipeline schedule execution as list scheduling: per-device unit orders plus dependencies.

Device ``d`` holds chunks ``c = 0..v-1``; chunk ``c`` of device ``d`` is virtual stage
``c * p + d``. A forward unit on virtual stage ``k`` starts after the same unit's forward on
stage ``k - 1`` ended and its activation crossed the link (``p2p_s``; zero on the same
device); a backward unit after the backward on stage ``k + 1`` (or, on the last stage, the
unit's own forward). A weight-gradient unit W (zero-bubble schedules) starts after the
same unit's B on the same stage, with no transfer. ``p2p_s`` may be a function of the unit
(slices of unequal length).
Each device runs its units in the order the schedule gives, each as
soon as its dependency is met and the device is free. A schedule whose orders wait on each
other forever is a ValueError.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from hetsim.workloads.training.view import Schedule, Unit

Key = tuple[str, int, int, int]  # (kind, micro, virtual stage, slice)


def run_schedule(
    sched: Schedule,
    stages: int,
    time_s: Callable[[int, Unit], float],
    p2p_s: float | Callable[[Unit], float],
) -> tuple[list[list[float]], list[list[float]]]:
    """Start and end time of every unit of every device (same order as ``sched.order``)."""
    hop_s = p2p_s if callable(p2p_s) else (lambda u: float(p2p_s))
    v = sched.chunks
    last = v * stages - 1
    done: dict[Key, float] = {}
    starts: list[list[float]] = [[] for _ in range(stages)]
    ends: list[list[float]] = [[] for _ in range(stages)]
    free = [0.0] * stages
    pos = [0] * stages
    total = sum(len(o) for o in sched.order)
    finished = 0
    while finished < total:
        progress = False
        for d in range(stages):
            while pos[d] < len(sched.order[d]):
                u = sched.order[d][pos[d]]
                ready = _ready(u, u.chunk * stages + d, last, stages, done, hop_s(u))
                if ready is None:
                    break
                start = max(free[d], ready)
                end = start + time_s(d, u)
                done[(u.kind, u.micro, u.chunk * stages + d, u.slice)] = end
                starts[d].append(start)
                ends[d].append(end)
                free[d] = end
                pos[d] += 1
                finished += 1
                progress = True
        if not progress:
            stuck = {
                d: sched.order[d][pos[d]] for d in range(stages) if pos[d] < len(sched.order[d])
            }
            raise ValueError(f"pipeline schedule deadlocks; next units per stage: {stuck}")
    return starts, ends


def _ready(u: Unit, k: int, last: int, p: int, done: dict[Key, float],
           p2p_s: float) -> float | None:  # fmt: skip
    """When unit ``u`` on virtual stage ``k`` may start (None: its dependency is not done)."""
    if u.kind == "F":
        if k == 0:
            return 0.0
        dep, other_device = ("F", u.micro, k - 1, u.slice), True
    elif u.kind == "W":
        dep, other_device = ("B", u.micro, k, u.slice), False
    elif k == last:
        dep, other_device = ("F", u.micro, k, u.slice), False
    else:
        dep, other_device = ("B", u.micro, k + 1, u.slice), True
    t = done.get(dep)
    if t is None:
        return None
    hop = other_device and p > 1
    return t + (p2p_s if hop else 0.0)


def bubble_fraction(starts: list[list[float]], ends: list[list[float]]) -> np.ndarray:
    """Per device: idle share of the makespan, ``1 - busy / makespan``."""
    makespan = max(max(e) for e in ends if e)
    busy = np.array([sum(e) - sum(s) for s, e in zip(starts, ends, strict=True)])
    return 1.0 - busy / makespan


def peak_in_flight(order: tuple[Unit, ...], act_bytes: Callable[[Unit], float]) -> float:
    """Peak activation bytes held by one device: + at each forward, - at each backward,
    in execution order (a unit's activations are held from its forward to its backward;
    with split backward units, to its W: the weight gradients need the layer inputs)."""
    release = "W" if any(u.kind == "W" for u in order) else "B"
    held, peak = 0.0, 0.0
    for u in order:
        if u.kind == "F":
            held += act_bytes(u)
            peak = max(peak, held)
        elif u.kind == release:
            held -= act_bytes(u)
    return peak


def unit_conservation(
    what: str, order: Sequence[Sequence[Unit]], starts: Sequence[Sequence[float]],
    ends: Sequence[Sequence[float]], micro_batches: int, recorded: int,
) -> None:  # fmt: skip
    """Conservation of microbatches through the pipeline: on every stage, each of the
    ``micro_batches`` has the same forward units, each forward unit exactly one backward
    that starts after it ends and, where the backward is split, exactly one W that starts
    after that B ends; every unit has a finite, ordered time; ``recorded`` (rows of the
    units table) counts every unit once. Raises naming the stage and the unit."""
    from hetsim.simulator.engine import InvariantViolation

    total = sum(len(o) for o in order)
    if recorded != total:
        raise InvariantViolation(f"{what}: {recorded} units recorded of {total} scheduled")
    for d, units in enumerate(order):
        if not len(units) == len(starts[d]) == len(ends[d]):
            raise InvariantViolation(f"{what}: stage {d} has {len(units)} units, "
                                     f"{len(starts[d])} timed")  # fmt: skip
        fwd: dict[tuple[int, int, int], float] = {}
        bwd: dict[tuple[int, int, int], float] = {}
        bwd_end: dict[tuple[int, int, int], float] = {}
        wgt: dict[tuple[int, int, int], float] = {}
        for u, a, b in zip(units, starts[d], ends[d], strict=True):
            key = (u.micro, u.chunk, u.slice)
            if not (math.isfinite(a) and math.isfinite(b) and 0 <= a <= b):
                raise InvariantViolation(f"{what}: stage {d} unit {u} runs [{a}, {b}] s")
            seen = {"F": fwd, "B": bwd, "W": wgt}[u.kind]
            if key in seen or not 0 <= u.micro < micro_batches:
                raise InvariantViolation(f"{what}: stage {d} unit {u} repeated or of no "
                                         "microbatch")  # fmt: skip
            seen[key] = b if u.kind == "F" else a
            if u.kind == "B":
                bwd_end[key] = b
        if wgt and set(wgt) != set(bwd):
            key = min(set(wgt) ^ set(bwd))
            raise InvariantViolation(f"{what}: stage {d} microbatch {key[0]} (chunk {key[1]}, "
                                     f"slice {key[2]}) has a B without W or the "
                                     "reverse")  # fmt: skip
        late_w = [k for k in wgt if wgt[k] < bwd_end.get(k, math.inf)]
        if late_w:
            raise InvariantViolation(f"{what}: stage {d} microbatch {late_w[0][0]} starts its "
                                     "weight gradient before its backward ends")  # fmt: skip
        if set(fwd) != set(bwd):
            key = min(set(fwd) ^ set(bwd))
            raise InvariantViolation(f"{what}: stage {d} microbatch {key[0]} (chunk {key[1]}, "
                                     f"slice {key[2]}) has a forward without backward or "
                                     "the reverse")  # fmt: skip
        early = [k for k in fwd if bwd[k] < fwd[k]]
        if early:
            raise InvariantViolation(f"{what}: stage {d} microbatch {early[0][0]} starts its "
                                     "backward before its forward ends")  # fmt: skip
        per_micro = {m: 0 for m in range(micro_batches)}
        for m, _, _ in fwd:
            per_micro[m] += 1
        if len(set(per_micro.values())) > 1:
            m = min(per_micro, key=lambda k: per_micro[k])
            raise InvariantViolation(f"{what}: stage {d} runs {per_micro[m]} forward units of "
                                     f"microbatch {m}, others more")  # fmt: skip
