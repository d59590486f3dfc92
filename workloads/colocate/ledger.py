"""Who owns each GPU of a multi-workload run over time."""

from __future__ import annotations

import itertools
import math

from hetsim.simulator.engine import InvariantViolation, Simulation

OWNER_COLUMNS = ("device", "owner", "start_s", "end_s")


class Ledger:
    """Ownership of accelerators: at most one owner per device at any time, except on
    the ``shared`` devices of a sharing model other than exclusive.

    :meth:`assign` refuses a device that has an owner; :meth:`release` ends the
    current one. Every interval is kept (table ``device_owners``), and :meth:`check`
    verifies from the intervals alone that no two overlap on a device and that every
    workload used a device only while it owned it."""

    def __init__(self, sim: Simulation, shared: set[str] | None = None) -> None:
        self.sim = sim
        #: devices several workloads may own at once (a sharing model other than exclusive)
        self.shared = set(shared or ())
        self.current: dict[tuple[str, str], float] = {}  # (device, owner) -> since
        self._owners: dict[str, set[str]] = {}
        self.intervals: list[tuple[str, str, float, float]] = []
        self.changes = 0

    def assign(self, device: str, owner: str) -> None:
        """``owner`` takes ``device`` now (raises if another holds it)."""
        held = self._owners.setdefault(device, set())
        if owner in held or (held and device not in self.shared):
            other = ", ".join(sorted(held))
            raise InvariantViolation(
                f"{device}: {owner} takes it while {other} owns it (exclusive sharing)"
            )
        held.add(owner)
        self.current[(device, owner)] = self.sim.now

    def release(self, device: str, owner: str) -> None:
        """``owner`` gives ``device`` up now."""
        since = self.current.pop((device, owner), None)
        if since is None:
            raise InvariantViolation(f"{device}: {owner} releases it but does not own it")
        self._owners[device].discard(owner)
        self.intervals.append((device, owner, since, self.sim.now))
        self.changes += 1

    def owners(self, device: str) -> tuple[str, ...]:
        """The current owners of ``device`` (sorted; one unless it is shared)."""
        return tuple(sorted(self._owners.get(device, ())))

    def move(self, device: str, src: str, dst: str) -> None:
        """``device`` passes from ``src`` to ``dst`` at this instant."""
        self.release(device, src)
        self.assign(device, dst)

    def all_intervals(self, end_s: float) -> list[tuple[str, str, float, float]]:
        """Every ownership interval, open ones cut at ``end_s``."""
        return self.intervals + [(d, o, s, end_s) for (d, o), s in self.current.items()]

    def check(self, end_s: float, used: dict[str, list[tuple[str, float, float]]]) -> None:
        """No device with two owners at once; each workload's use of a device (``used``:
        owner -> (device, start, end)) lies within its ownership of it."""
        spans = sorted(self.all_intervals(end_s))
        by_dev: dict[str, list[tuple[str, float, float]]] = {}
        for d, o, s, e in spans:
            by_dev.setdefault(d, []).append((o, s, e))
        for d, rows in by_dev.items():
            if d in self.shared:
                continue  # several owners at once by the sharing model
            rows.sort(key=lambda r: (r[1], r[2]))
            for (o1, _, e1), (o2, s2, _) in itertools.pairwise(rows):
                if s2 < e1:
                    raise InvariantViolation(f"{d}: owned by {o1} and {o2} at once (t={s2:.6g} s)")
        for owner, uses in used.items():
            for d, s, e in uses:
                ok = any(o == owner and a <= s + 1e-9 and e <= b + 1e-9
                         for o, a, b in by_dev.get(d, []))  # fmt: skip
                if not ok and e > s and math.isfinite(e):
                    raise InvariantViolation(
                        f"{owner} used {d} over [{s:.6g}, {e:.6g}] s without owning it"
                    )
