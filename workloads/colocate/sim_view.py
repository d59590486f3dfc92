"""The simulation as one workload of a multi-workload run sees it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hetsim.simulator.engine import Simulation
from hetsim.simulator.recorder import Recorder, Table


class RecorderView:
    """The shared recorder with this workload's table names prefixed ``<name>.``
    (two workloads of one kind keep their tables apart); tracks, spans and counters are
    the shared timeline's."""

    def __init__(self, recorder: Recorder, prefix: str) -> None:
        self._recorder, self._prefix = recorder, prefix

    def table(self, name: str, columns: Sequence[str]) -> Table:
        """The table ``<prefix>.<name>``, created with ``columns`` on first use."""
        return self._recorder.table(f"{self._prefix}.{name}", columns)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._recorder, name)


class SimulationView:
    """One workload's view of the shared :class:`~simulator.engine.Simulation` when
    another workload of its kind runs beside it: the same environment, clock, invariants
    and end-of-instant passes; random streams named ``<name>:<stream>`` (the two draw
    independently) and tables named ``<name>.<table>`` (:class:`RecorderView`). A
    workload alone of its kind gets the simulation itself (the streams and tables it
    has when run alone)."""

    def __init__(self, sim: Simulation, name: str) -> None:
        self._sim, self._name = sim, name
        self.recorder = RecorderView(sim.recorder, name)

    def rng(self, stream: str) -> np.random.Generator:
        """The random stream ``<name>:<stream>`` of the run."""
        return self._sim.rng(f"{self._name}:{stream}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sim, name)
