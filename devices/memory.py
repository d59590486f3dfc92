"""Memory pools (HBM, host DRAM) that account every allocation by tag.

A pool is bookkeeping, not a SimPy resource: allocating takes no simulated time. Running
out is an :class:`OutOfMemory` exception raised *before* anything changes, so the
mechanism that asked can handle it (swap, evict, queue the request) and the pool never
overruns silently. Every change records a counter sample (bytes in use) on the pool's
track, and the pool registers an invariant with the simulation (in use <= capacity, no
tag below zero).
"""

from __future__ import annotations

from hetsim.simulator.engine import InvariantViolation, Simulation


class OutOfMemory(Exception):
    """An allocation that does not fit in its pool; nothing was allocated."""

    def __init__(self, pool: str, tag: str, requested_bytes: int, free_bytes: int) -> None:
        self.pool = pool
        self.tag = tag
        self.requested_bytes = requested_bytes
        self.free_bytes = free_bytes
        # args are the constructor's, so SimPy and pickle can rebuild it as type(e)(*e.args)
        super().__init__(pool, tag, requested_bytes, free_bytes)

    def __str__(self) -> str:
        return (
            f"out of memory in pool {self.pool!r}: tag {self.tag!r} asked for "
            f"{self.requested_bytes} bytes, only {self.free_bytes} bytes free"
        )


class MemoryPool:
    """A fixed-capacity memory (one GPU's HBM, one host's DRAM) with per-tag accounting."""

    def __init__(
        self, sim: Simulation, name: str, capacity_bytes: int, group: str = "memory"
    ) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"pool {name!r}: capacity must be >= 0, got {capacity_bytes}")
        self.sim = sim
        self.name = name
        self.capacity_bytes = int(capacity_bytes)
        self._by_tag: dict[str, int] = {}
        self._used_bytes = 0
        self._peak_bytes = 0
        self.track = sim.recorder.track(name, group, "memory")
        sim.add_invariant(self._check)

    @property
    def used_bytes(self) -> int:
        """Bytes allocated now, over all tags."""
        return self._used_bytes

    @property
    def free_bytes(self) -> int:
        """Bytes still available."""
        return self.capacity_bytes - self._used_bytes

    @property
    def peak_bytes(self) -> int:
        """Highest ``used_bytes`` seen so far."""
        return self._peak_bytes

    def usage_by_tag(self) -> dict[str, int]:
        """Bytes held per tag (a copy; tags with nothing held are left out)."""
        return dict(self._by_tag)

    def can_fit(self, nbytes: int) -> bool:
        """Whether an allocation of ``nbytes`` would succeed now."""
        return 0 <= nbytes <= self.free_bytes

    def allocate(self, tag: str, nbytes: int) -> None:
        """Add ``nbytes`` to ``tag``; raises :class:`OutOfMemory` (changing nothing)."""
        if nbytes < 0:
            raise ValueError(f"pool {self.name!r}: negative allocation {nbytes} for {tag!r}")
        if nbytes > self.free_bytes:
            raise OutOfMemory(self.name, tag, int(nbytes), self.free_bytes)
        self._by_tag[tag] = self._by_tag.get(tag, 0) + int(nbytes)
        self._used_bytes += int(nbytes)
        self._peak_bytes = max(self._peak_bytes, self._used_bytes)
        self._sample()

    def free(self, tag: str, nbytes: int | None = None) -> int:
        """Release ``nbytes`` of ``tag`` (all of it if None); returns the bytes released.

        Freeing more than the tag holds (or an unknown tag with a size) is a ValueError.
        """
        held = self._by_tag.get(tag, 0)
        amount = held if nbytes is None else int(nbytes)
        if amount < 0 or amount > held:
            raise ValueError(
                f"pool {self.name!r}: cannot free {amount} bytes of tag {tag!r}, it holds {held}"
            )
        if amount == held:
            self._by_tag.pop(tag, None)
        else:
            self._by_tag[tag] = held - amount
        self._used_bytes -= amount
        self._sample()
        return amount

    def _sample(self) -> None:
        self.sim.recorder.counter(self.track, self.sim.now, self._used_bytes)

    def _check(self) -> None:
        if self._used_bytes > self.capacity_bytes:
            raise InvariantViolation(
                f"pool {self.name!r}: {self._used_bytes} bytes used > capacity "
                f"{self.capacity_bytes}"
            )
        negative = {t: b for t, b in self._by_tag.items() if b < 0}
        if negative or sum(self._by_tag.values()) != self._used_bytes:
            raise InvariantViolation(
                f"pool {self.name!r}: tag accounting broken ({self._by_tag}, "
                f"used {self._used_bytes})"
            )

    def __repr__(self) -> str:
        return f"MemoryPool({self.name!r}, used={self._used_bytes}/{self.capacity_bytes})"
