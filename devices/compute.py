"""Compute devices (GPU, NPU, CPU) as SimPy resources priced by the roofline cost model."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from hetsim.devices.energy_meter import POWER_TRACK_SUFFIX, EnergyMeter
from hetsim.devices.power import power_model
from hetsim.devices.roofline import OpCost, op_cost, op_times_s
from hetsim.devices.spec import DeviceSpec
from hetsim.simulator.engine import Simulation


class ComputeDevice:
    """One device instance: a ``simpy.Resource`` of ``streams`` concurrent kernels.

    Mechanisms either hold :attr:`resource` themselves (``execute``) or keep their own
    queue and only ask the device for costs (:meth:`op_time_s`) and report busy time
    (:meth:`record_busy`), which is how hot paths avoid a SimPy process per op.
    """

    def __init__(
        self,
        sim: Simulation,
        spec: DeviceSpec,
        name: str,
        *,
        node: str = "",
        streams: int = 1,
    ) -> None:
        if streams < 1:
            raise ValueError(f"device {name}: streams must be >= 1")
        self.sim = sim
        self.spec = spec
        self.name = name
        self.node = node
        self.resource = simpy.Resource(sim.env, capacity=streams)
        self.busy_s = 0.0
        self.ops = 0
        self.track = sim.recorder.track(name, group=node or "devices", kind="device")
        sim.recorder.track(name + POWER_TRACK_SUFFIX, group=node or "devices", kind="power")
        #: the device's energy over the run (:mod:`devices.energy`)
        self.energy = EnergyMeter(power_model(spec), sim.recorder, name)

    def __repr__(self) -> str:
        return f"ComputeDevice({self.name!r}, {self.spec.name})"

    def op_cost(self, flops: float, nbytes: float, dtype: str = "fp16") -> OpCost:
        """Roofline breakdown of one op on this device."""
        return op_cost(self.spec, flops, nbytes, dtype)

    def op_time_s(self, flops: float, nbytes: float, dtype: str = "fp16") -> float:
        """Seconds one op with ``flops`` FLOPs and ``nbytes`` memory traffic takes here."""
        return op_cost(self.spec, flops, nbytes, dtype).time_s

    def op_times_s(self, flops: np.ndarray, nbytes: np.ndarray, dtype: str = "fp16") -> np.ndarray:
        """:meth:`op_time_s` of many ops at once (numpy arrays)."""
        return op_times_s(self.spec, flops, nbytes, dtype)

    def record_busy(
        self,
        start_s: float,
        end_s: float,
        name: str,
        args: dict[str, Any] | None = None,
        utilisation: float | None = None,
    ) -> None:
        """Account a busy interval (and draw it on this device's timeline); with a
        compute ``utilisation`` (0: memory-bound, 1: compute-bound; :mod:`devices.power`)
        its energy goes to :attr:`energy` too (None: the mechanism does not price power)."""
        self.busy_s += end_s - start_s
        self.ops += 1
        self.sim.recorder.span(self.track, name, start_s, end_s, args)
        if utilisation is not None:
            self.energy.busy(start_s, end_s, utilisation)

    def execute(
        self, flops: float, nbytes: float, dtype: str = "fp16", name: str = "op"
    ) -> Generator[simpy.Event, Any, float]:
        """SimPy process: wait for a stream, run the op for its roofline time, release.

        Returns the op's duration in seconds.
        """
        env = self.sim.env
        with self.resource.request() as req:
            yield req
            start = env.now
            cost = self.op_cost(flops, nbytes, dtype)
            duration = cost.time_s
            yield env.timeout(duration)
            u = cost.compute_s / duration if duration > 0 else 0.0
            self.record_busy(start, env.now, name, utilisation=u)
        return duration

    def utilisation(self, horizon_s: float) -> float:
        """Busy time over ``horizon_s`` divided by the number of streams."""
        if horizon_s <= 0:
            return 0.0
        return self.busy_s / (horizon_s * self.resource.capacity)
