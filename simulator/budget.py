"""Budgets: a memory and CPU-time limit on a block of work, refused with one line.

``with budget(memory_bytes, cpu_s, what):`` lowers this process's address-space limit
to its current size plus ``memory_bytes`` (Linux; the soft limit only, restored on
exit) and arms a CPU-time timer (``ITIMER_VIRTUAL``, so it never disturbs a caller's
wall-clock alarm). Past either, the block stops with :class:`BudgetExceeded`, which
names the budget and how to raise it, instead of growing until the machine gives up.
"""

from __future__ import annotations

import resource
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

GIB = 1 << 30


class BudgetExceeded(RuntimeError):
    """Work that ran past its memory or CPU-time budget."""


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
    (None: no limit); past either, raise :class:`BudgetExceeded` naming ``what``."""
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
