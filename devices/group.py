"""Communication groups: collectives on a set of devices as SimPy events.

A :class:`CommGroup` is what NCCL calls a communicator: a fixed set of ranks over one
collective fabric. Its collectives run one after another in issue order (one NCCL
stream per communicator), each taking the alpha-beta time of
:func:`devices.collectives.collective_time_s` for the group's size. Every collective
appends a row to the ``collectives`` table and a span on the group's timeline track.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import simpy

from hetsim.devices.collectives import CollectiveFabric, check_op, collective_time_s
from hetsim.simulator.engine import Simulation

COLLECTIVE_COLUMNS = ("group", "op", "algorithm", "ranks", "nbytes", "queued_s", "start_s", "end_s")


class CommGroup:
    """A communicator: ``devices`` running collectives over ``fabric``, in issue order."""

    def __init__(
        self, sim: Simulation, name: str, devices: Sequence[str], fabric: CollectiveFabric
    ) -> None:
        if len(devices) < 1 or len(set(devices)) != len(devices):
            raise ValueError(f"group {name!r}: needs distinct devices, got {list(devices)}")
        self.sim = sim
        self.name = name
        self.devices = tuple(devices)
        self.fabric = fabric
        self._stream = simpy.Resource(sim.env, capacity=1)
        self._rows = sim.recorder.table("collectives", COLLECTIVE_COLUMNS)
        self.track = sim.recorder.track(f"comm:{name}", group="collectives", kind="group")

    @property
    def size(self) -> int:
        """Number of ranks."""
        return len(self.devices)

    def time_s(self, op: str, nbytes: int, algorithm: str | None = None) -> float:
        """Uncontended time of one collective of ``nbytes`` on this group (0 for one rank)."""
        return collective_time_s(op, self.size, nbytes, self.fabric, algorithm)

    def run(self, op: str, nbytes: int, algorithm: str | None = None) -> simpy.Event:
        """Issue a collective now; the event fires (value: end time) when it completes."""
        algo = check_op(op, algorithm)
        return self.sim.env.process(self._run(op, nbytes, algo))

    def _run(self, op: str, nbytes: int, algorithm: str) -> Generator[simpy.Event, Any, float]:
        env = self.sim.env
        queued = float(env.now)
        with self._stream.request() as turn:
            yield turn
            start = float(env.now)
            yield env.timeout(self.time_s(op, nbytes, algorithm))
        end = float(env.now)
        self._rows.append(self.name, op, algorithm, self.size, nbytes, queued, start, end)
        self.sim.recorder.span(self.track, op, start, end, {"nbytes": nbytes})
        return end
