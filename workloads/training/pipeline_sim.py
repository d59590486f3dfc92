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

A unit may hand part of its work to another device (``helper``: SlimPipe's workload
redistribution, :mod:`~hetsim.workloads.training.slice_exchange`): the :class:`Helper`
becomes ready ``send_s`` after the unit starts and the unit ends no earlier than
``return_s`` after the helper ends; meanwhile the unit's device may serve other units'
helpers but starts its next unit only after the unit ends. On its device a helper runs
(``interleave``, default) as soon as it is ready, between two layers of the unit running
there, which it lengthens by its own time, or (``queue``) only when the device is free,
after the unit running there. Either way it waits for a helper already running there
and delays what follows it. Units and helpers are committed in order of start time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hetsim.workloads.training.view import Schedule, Unit

Key = tuple[str, int, int, int]  # (kind, micro, virtual stage, slice)


@dataclass(frozen=True)
class Helper:
    """Part of a unit's work run on another device (module doc)."""

    device: int
    send_s: float  # the inputs' transfer before the helper may start
    work_s: float  # seconds the helper keeps ``device`` busy
    return_s: float  # the results' transfer before the unit may end
    buffer_bytes: float = 0.0  # held on ``device`` while the helper runs


#: one helper as it ran: (start s, end s, buffer bytes), per device
HelperRun = tuple[float, float, float]


def run_schedule(
    sched: Schedule,
    stages: int,
    time_s: Callable[[int, Unit], float],
    p2p_s: float | Callable[[Unit], float],
    helper: Callable[[int, Unit], Helper | None] | None = None,
    helpers_run: list[list[HelperRun]] | None = None,
    partner_priority: str = "interleave",
) -> tuple[list[list[float]], list[list[float]]]:
    """Start and end time of every unit of every device (same order as ``sched.order``).

    ``helper(d, u)``: the part of unit ``u`` on device ``d`` run elsewhere (None: all of
    it on ``d``; a helper on ``d`` itself runs after the unit's own work). When given,
    ``helpers_run`` receives per device the helpers it ran."""
    hop_s = p2p_s if callable(p2p_s) else (lambda u: float(p2p_s))
    v = sched.chunks
    last = v * stages - 1
    done: dict[Key, float] = {}
    starts: list[list[float]] = [[] for _ in range(stages)]
    ends: list[list[float]] = [[] for _ in range(stages)]
    ran: list[list[HelperRun]] = [[] for _ in range(stages)]
    free = [0.0] * stages
    pos = [0] * stages
    waiting = [False] * stages  # its last unit waits for a helper's results
    #: per device: the key of the unit it runs last if nothing has run after it (a
    #: helper arriving while it runs may interleave with it), else None
    running: list[Key | None] = [None] * stages
    helper_free = [0.0] * stages  # when the helpers already placed on the device end
    # per device: (ready s, seq, helper, owner device, owner's own end, owner's key)
    pending: list[list[tuple[float, int, Helper, int, float, Key]]] = [[] for _ in range(stages)]
    seq = 0
    total = sum(len(o) for o in sched.order)
    finished = 0
    while finished < total:
        best: tuple[float, int, int] | None = None  # (start, 0 helper / 1 unit, device)
        for d in range(stages):
            if pending[d]:
                arrives = min(pending[d])[0]
                gap = running[d] is not None and partner_priority == "interleave"
                at = max(helper_free[d], arrives) if gap else max(free[d], arrives)
                best = min(best or (math.inf, 2, 0), (at, 0, d))
            if pos[d] < len(sched.order[d]) and not waiting[d]:
                u = sched.order[d][pos[d]]
                ready = _ready(u, u.chunk * stages + d, last, stages, done, hop_s(u))
                if ready is not None:
                    best = min(best or (math.inf, 2, 0), (max(free[d], ready), 1, d))
        if best is None:
            stuck = {
                d: sched.order[d][pos[d]] for d in range(stages) if pos[d] < len(sched.order[d])
            }
            raise ValueError(f"pipeline schedule deadlocks; next units per stage: {stuck}")
        start, what, d = best
        if what == 0:  # a helper: run it, then the unit it belongs to may end
            item = min(pending[d])
            pending[d].remove(item)
            _, _, job, owner, own_end, key = item
            end = start + job.work_s
            host = running[d]
            if host is not None and start < free[d]:  # between two layers of that unit
                ends[d][-1] += job.work_s
                done[host] = ends[d][-1]
                free[d] += job.work_s
            else:
                free[d] = end
                running[d] = None
            helper_free[d] = end
            ran[d].append((start, end, job.buffer_bytes))
            unit_end = max(own_end, end + job.return_s)
            ends[owner][-1] = unit_end
            done[key] = unit_end
            free[owner] = max(free[owner], unit_end)
            waiting[owner] = False
            finished += 1
            continue
        u = sched.order[d][pos[d]]
        key = (u.kind, u.micro, u.chunk * stages + d, u.slice)
        end = start + time_s(d, u)
        h = helper(d, u) if helper is not None else None
        pos[d] += 1
        starts[d].append(start)
        if h is not None and h.device == d:  # no other device: the work stays here
            end += h.work_s
            h = None
        ends[d].append(end)
        free[d] = end
        running[d] = None
        if h is None or h.work_s <= 0:
            done[key] = end
            finished += 1
            running[d] = key
        else:
            pending[h.device].append((start + h.send_s, seq, h, d, end, key))
            seq += 1
            waiting[d] = True
    if helpers_run is not None:
        helpers_run[:] = ran
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


def bubble_fraction(starts: list[list[float]], ends: list[list[float]],
                    busy_s: Sequence[float] | None = None) -> np.ndarray:  # fmt: skip
    """Per device: idle share of the makespan, ``1 - busy / makespan``; busy is the units'
    spans unless ``busy_s`` gives it (units' own work plus the helpers a device ran: a
    unit waiting for its helper's results is not busy)."""
    makespan = max(max(e) for e in ends if e)
    if busy_s is None:
        busy = np.array([sum(e) - sum(s) for s, e in zip(starts, ends, strict=True)])
    else:
        busy = np.asarray(busy_s, dtype=float)
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
