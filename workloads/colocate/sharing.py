"""How a GPU two workloads hold at once is shared: each owner's memory and speed.

``exclusive`` never shares (the ledger refuses a second owner). On a device two or more
workloads name in ``devices:``:

* ``partition`` (MIG/MPS-style): each owner gets ``fraction`` of the compute and of the
  memory (default: an equal split among the owners). Its work on the device runs
  ``1 / fraction`` times longer, and its memory pool shows ``fraction x capacity``
  (allocations are accounted in the one shared pool, tagged by owner). A hard split:
  capacity an owner leaves idle is not lent to the other (as MIG slices).
* ``time-sliced``: owners take turns of ``slice_s`` on the whole GPU, each switch
  costing ``context_switch_s``. Priced as the worst case, every owner busy: an owner's
  work runs ``n x slice_s / (slice_s - context_switch_s)`` times longer with ``n``
  owners. Memory is not isolated by hardware; each owner is capped at its fraction as
  under ``partition`` (as an operator caps each process: vLLM's
  gpu_memory_utilization, PyTorch's per-process memory fraction), so one owner's
  allocations never fail for the other's.

Only ``serving`` and ``training-jobs`` price their work by the share (the serving
instance's iteration times, the gang's step time: the slowest device of the instance or
gang); other kinds may not hold a shared device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hetsim.devices.memory import MemoryPool, OutOfMemory

SHARE_AWARE = ("serving", "training-jobs")


def slowdowns(col: Any) -> dict[str, dict[str, float]]:
    """Workload -> device -> factor its work on the device takes longer (shared only)."""
    s = col.sharing
    out: dict[str, dict[str, float]] = {m.name: {} for m in col.members}
    for d, owners in col.shared.items():
        for o in owners:
            if s.model == "partition":
                out[o][d] = 1.0 / fraction(col, o, owners)
            elif s.model == "time-sliced":
                out[o][d] = len(owners) * s.slice_s / (s.slice_s - s.context_switch_s)
    return out


def fraction(col: Any, owner: str, owners: tuple[str, ...]) -> float:
    """``owner``'s share of a partitioned device held by ``owners``."""
    given = col.sharing.fractions
    if owner in given:
        return float(given[owner])
    left = 1.0 - sum(given.get(o, 0.0) for o in owners)
    rest = [o for o in owners if o not in given]
    return left / len(rest)


class PoolShare:
    """One owner's view of a shared device's memory pool: ``capacity_bytes`` is its
    share; allocations go to the shared pool, tagged
    ``<owner>:<tag>``, so the pool's own accounting and invariant cover every owner."""

    def __init__(self, pool: MemoryPool, owner: str, fraction: float) -> None:
        self.pool, self.owner = pool, owner
        self.capacity_bytes = int(pool.capacity_bytes * fraction)
        self.name = pool.name
        self._used = 0

    @property
    def used_bytes(self) -> int:
        """Bytes this owner holds."""
        return self._used

    @property
    def free_bytes(self) -> int:
        """Bytes this owner could still allocate (its share, and what the pool has)."""
        return min(self.capacity_bytes - self._used, self.pool.free_bytes)

    def can_fit(self, nbytes: int) -> bool:
        """Whether an allocation of ``nbytes`` would succeed now."""
        return 0 <= nbytes <= self.free_bytes

    def allocate(self, tag: str, nbytes: int) -> None:
        """Allocate in the shared pool under ``<owner>:<tag>`` (OutOfMemory past the share)."""
        if nbytes > self.free_bytes:
            raise OutOfMemory(self.name, f"{self.owner}:{tag}", int(nbytes), self.free_bytes)
        self.pool.allocate(f"{self.owner}:{tag}", nbytes)
        self._used += int(nbytes)

    def free(self, tag: str, nbytes: int | None = None) -> int:
        """Release this owner's ``tag`` (all of it if None)."""
        amount = self.pool.free(f"{self.owner}:{tag}", nbytes)
        self._used -= amount
        return amount

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)


class _ScaledTransformer:
    """An iteration price ``factor()`` times slower (serving on a shared GPU; the factor
    is read at each price, so a pause of the other owner takes effect at once)."""

    def __init__(self, inner: Any, factor: Callable[[], float]) -> None:
        self._inner, self._factor = inner, factor

    def step_s(self, *args: Any, **kwargs: Any) -> float:
        """The inner step time x factor."""
        return float(self._inner.step_s(*args, **kwargs)) * self._factor()

    def decode_steps_s(self, *args: Any, **kwargs: Any) -> Any:
        """The inner decode-run step times x factor."""
        f = self._factor()
        return [float(t) * f for t in self._inner.decode_steps_s(*args, **kwargs)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _ScaledCost:
    """A serving instance's cost with its transformer priced ``factor()`` times slower."""

    def __init__(self, inner: Any, factor: Callable[[], float]) -> None:
        self._inner = inner
        self.transformer = _ScaledTransformer(inner.transformer, factor)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def share_serving(w: Any, factors: dict[str, float]) -> None:
    """Price each serving instance placed on a shared device by its slowest device's
    factor, read from ``factors`` at each iteration (the arbiter's deferral sets a
    device's factor to 1 while training is paused there)."""
    if not factors:
        return
    load = w.load

    def shared_load(inst: Any, devs: list[str], on_ready: Any = None) -> None:
        if any(factors.get(d, 1.0) != 1.0 for d in devs):
            mine = tuple(devs)
            inst.cost = _ScaledCost(inst.cost, lambda: max(factors.get(d, 1.0) for d in mine))
            inst._step_s = inst.cost.transformer.step_s
        load(inst, devs, on_ready)

    w.load = shared_load
