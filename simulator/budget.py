"""Budgets: a memory and CPU-time limit on a block of work, refused with one line;
an up-front estimate of a run's work, refused past ``--max-events`` or the memory budget.

``with budget(memory_bytes, cpu_s, what):`` lowers this process's address-space limit
to its current size plus ``memory_bytes`` (Linux; the soft limit only, restored on
exit) and arms a CPU-time timer (``ITIMER_VIRTUAL``, so it never disturbs a caller's
wall-clock alarm). Past either, the block stops with :class:`BudgetExceeded`, which
names the budget and how to raise it, instead of growing until the machine gives up.

Before a run, :func:`check_estimate` asks the workload kind for a :class:`WorkEstimate`
(:meth:`workloads.base.Workload.estimate_work`: serving requests x mean output tokens,
cluster jobs x scheduling rounds, training-parallel ranks x microbatches, moe tokens x
layers) and refuses one past ``max_events`` or past the memory budget with one line
giving the estimate and the option that raises the limit. :class:`Budgets` carries the
three limits to each point of a sweep.
"""

from __future__ import annotations

import resource
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

GIB = 1 << 30


DEFAULT_MAX_EVENTS = 10**10
"""Default ``--max-events``: about two days of simulation at the 5 x 10^4 decode
token-steps per second a serving run makes on one (shared) core of the development
machine (``hetsim run`` of 5,000 and 40,000 requests of 64 output tokens: 2.2 x 10^6
more token-steps in 41 s more), and far above every shipped scenario's estimate."""


class BudgetExceeded(RuntimeError):
    """Work that ran past its memory or CPU-time budget."""


class WorkTooLarge(BudgetExceeded):
    """A run whose up-front estimate is past its budget (the message names the option
    that raises it)."""


@dataclass(frozen=True)
class WorkEstimate:
    """What a run will do, estimated from its parameters before it is built: ``events``
    (units of simulated work), ``memory_bytes`` (None: not estimated) and ``basis``, the
    product that gave them in words (``1e9 requests x 256 mean output tokens``)."""

    events: float
    memory_bytes: float | None
    basis: str


@dataclass(frozen=True)
class Budgets:
    """The limits one run (or each sweep point) gets: more memory than now (bytes),
    CPU seconds, estimated events; None: no limit."""

    memory_bytes: int | None = None
    cpu_s: float | None = None
    max_events: float | None = DEFAULT_MAX_EVENTS


def check_estimate(sc: Any, max_events: float | None, memory_bytes: int | None) -> None:
    """Refuse scenario ``sc`` when its workload's estimate exceeds ``max_events`` or
    ``memory_bytes`` (:class:`WorkTooLarge`, one line); kinds without an estimate pass."""
    if getattr(sc, "colocation", None) is not None:  # several workloads: the sum
        parts = [m.cls.estimate_work(m.params) for m in sc.colocation.members]
        parts = [e for e in parts if e is not None]
        est = WorkEstimate(
            sum(e.events for e in parts), sum(e.memory_bytes or 0 for e in parts) or None,
            "; ".join(e.basis for e in parts),
        ) if parts else None  # fmt: skip
    else:
        est = sc.workload_cls.estimate_work(sc.workload)
    if est is None:
        return
    if max_events is not None and est.events > max_events:
        raise WorkTooLarge(
            f"the run is estimated at {est.events:.3g} events ({est.basis}), past the "
            f"budget of {max_events:.3g}; raise it with --max-events N"
        )
    need, have = est.memory_bytes, memory_bytes
    if need is not None and have is not None and need > have:
        raise WorkTooLarge(
            f"the run is estimated to need {need / GIB:.3g} GiB ({est.basis}), "
            f"past its {have / GIB:.3g} GiB memory budget; raise it with "
            "--max-memory-gib"
        )


def _address_space_bytes() -> int | None:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pages * resource.getpagesize()


class _CpuTimeUp(BaseException):
    """Raised by the timer inside the block (BaseException: no ``except Exception``
    in the work swallows it)."""


@contextmanager
def budget(memory_bytes: int | None, cpu_s: float | None, what: str) -> Iterator[None]:
    """Run the block within ``memory_bytes`` more memory and ``cpu_s`` CPU seconds
    (None, or a CPU budget of 0: no limit); past either, raise :class:`BudgetExceeded`
    naming ``what``."""
    if cpu_s is not None and cpu_s <= 0:
        cpu_s = None
    main_thread = threading.current_thread() is threading.main_thread()
    old_limit = resource.getrlimit(resource.RLIMIT_AS)
    used = _address_space_bytes() if memory_bytes is not None else None
    if used is not None and memory_bytes is not None and sys.platform.startswith("linux"):
        soft = used + memory_bytes
        hard = old_limit[1]
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    old_handler = None
    if cpu_s is not None and main_thread:

        def expire(signum: int, frame: FrameType | None) -> None:
            raise _CpuTimeUp

        old_handler = signal.signal(signal.SIGVTALRM, expire)
        signal.setitimer(signal.ITIMER_VIRTUAL, cpu_s)
    try:
        yield
    except MemoryError:
        limit = f"{memory_bytes / GIB:.3g} GiB" if memory_bytes is not None else "memory"
        raise BudgetExceeded(f"{what} needs more than its {limit} memory budget") from None
    except _CpuTimeUp:
        raise BudgetExceeded(f"{what} needs more than its {cpu_s:g} s CPU-time budget") from None
    finally:
        if cpu_s is not None and main_thread:
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
            signal.signal(signal.SIGVTALRM, old_handler)
        resource.setrlimit(resource.RLIMIT_AS, old_limit)
