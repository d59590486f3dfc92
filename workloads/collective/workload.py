"""A collective microbenchmark: one collective repeated on a group of devices.

The group is a :class:`devices.group.CommGroup` (one NCCL-like stream) over the named
catalogue fabric, or over the ring the topology gives
(:func:`workloads.collective.fabric.ring_fabric`). The workload issues
``repetitions`` collectives one after another (``gap_s`` apart) and reports the
median of their durations, which is what collective profilers such as Vidur's and
nccl-tests report. Each duration is the alpha-beta time of
:func:`devices.collectives.collective_time_s`; repetitions are identical unless a future
fabric model adds contention, so the median equals each one today.

Energy: a collective moves data through the GPUs' memory and links and runs no math, so
every device of the group draws the power model's memory-bound term ``memory_W`` (compute
utilisation 0; :mod:`hetsim.devices.power`: communication kernels count as
memory-bound) for each repetition's duration, and idles in the gaps; every other device
of the cluster idles throughout.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import simpy

from hetsim.devices.carbon import CARBON_METRICS
from hetsim.devices.catalogue import fabric_spec
from hetsim.devices.cluster import Cluster
from hetsim.devices.collectives import ALGORITHMS, CollectiveFabric, bus_factor, collective_time_s
from hetsim.devices.energy import ENERGY_METRICS, per_unit, run_energy
from hetsim.devices.group import CommGroup
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, check_steps
from hetsim.workloads.collective.fabric import ring_fabric
from hetsim.workloads.collective.params import FASTEST, CollectiveParams

METRICS: dict[str, str] = {
    "median_time_s": "median over the repetitions of one collective's duration (end - start)",
    "mean_time_s": "mean over the repetitions of one collective's duration",
    "algbw_Bps": "nccl-tests' algorithm bandwidth: nbytes / median_time_s",
    "busbw_Bps": "nccl-tests' bus bandwidth: algbw_Bps x 2(n-1)/n (all-reduce), (n-1)/n "
    "(all-gather, reduce-scatter, all-to-all) or 1 (broadcast), n = ranks",
    "ranks": "devices in the group",
    "nbytes": "message size in bytes (nccl-tests' convention)",
    "collective_fabric": "catalogue fabric name, or 'topology-ring' for the derived ring",
    "collective_algorithm": "algorithm used (after resolving 'fastest' and the op default)",
    "fabric_bandwidth_Bps": "the fabric's bus bandwidth bound per rank per direction",
    **ENERGY_METRICS,
    "energy_per_collective_J": "energy_accelerator_J / repetitions: the group's GPUs at "
    "memory_W (the power model's memory-bound draw, compute utilisation 0) over each "
    "collective and at idle in the gaps, plus every other accelerator idle",
    "collective_energy_J": "energy above idle of one collective over the group, J: ranks x "
    "(memory_W - idle_W) x its mean duration",
    **CARBON_METRICS,
}


@workloads.register("collective")
class CollectiveWorkload(Workload):
    """N repetitions of one collective of a given size on a group of devices."""

    Params = CollectiveParams
    domain = "collective"
    metrics: ClassVar[dict[str, str]] = METRICS

    def __init__(
        self, sim: Simulation, cluster: Cluster, params: CollectiveParams,
        policies: dict[str, Any], base_dir: Path,
    ) -> None:  # fmt: skip
        super().__init__(sim, cluster, params, policies, base_dir)
        devices = params.devices or cluster.device_names(("gpu", "npu"))
        for name in devices:
            cluster.device(name)
        if len(devices) < 2:
            raise ValueError(f"devices: a collective needs at least two devices, got {devices}")
        self.fabric = self._fabric(devices)
        self.algorithm = self._algorithm(len(devices))
        self.group = CommGroup(sim, params.op, devices, self.fabric)
        self.durations_s: list[float] = []
        self.meters = [cluster.device(name).energy for name in devices]

    def _fabric(self, devices: list[str]) -> CollectiveFabric:
        if self.params.fabric is not None:
            return fabric_spec(self.params.fabric)
        return ring_fabric(self.cluster.topology, devices)

    def _algorithm(self, n: int) -> str:
        p = self.params
        if p.algorithm != FASTEST:
            return p.algorithm or ALGORITHMS[p.op][0]
        fitted = [a for a in ALGORITHMS[p.op] if a in self.fabric.algorithms]
        fitted = fitted or [ALGORITHMS[p.op][0]]
        return min(fitted, key=lambda a: collective_time_s(p.op, n, p.nbytes, self.fabric, a))

    def start(self) -> None:
        """Start the repetitions."""
        self.sim.env.process(self._loop())

    def _loop(self) -> Generator[simpy.Event, Any, None]:
        p = self.params
        for k in range(p.repetitions):
            if k and p.gap_s:
                yield self.sim.env.timeout(p.gap_s)
            start = self.sim.now
            yield self.group.run(p.op, p.nbytes, self.algorithm)
            self.durations_s.append(self.sim.now - start)
            for meter in self.meters:  # memory and link traffic: the memory-bound draw
                meter.busy(start, self.sim.now, 0.0)
        self.done.succeed()

    def check_partial(self) -> None:
        """At any moment: repetitions done <= asked, back to back with their gaps from
        t=0, so each ends (non-negative duration, in order) no later than now."""
        d = np.asarray(self.durations_s, dtype=float)
        ends = np.cumsum(d) + np.arange(len(d)) * self.params.gap_s
        check_steps("collective repetitions", self.params.repetitions, len(d), ends,
                    self.sim.now * (1 + 1e-9) + 1e-12)  # fmt: skip

    def check(self) -> None:
        """Every repetition ran once and took a non-negative time."""
        if len(self.durations_s) != self.params.repetitions or min(self.durations_s) < 0:
            raise InvariantViolation(
                f"{len(self.durations_s)} of {self.params.repetitions} collectives ran"
            )

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """See :data:`METRICS`."""
        p = self.params
        t = np.asarray(self.durations_s)
        median_s = float(np.median(t)) if len(t) else 0.0
        n = self.group.size
        algbw = p.nbytes / median_s if median_s > 0 else 0.0
        return {
            "median_time_s": median_s,
            "mean_time_s": float(t.mean()) if len(t) else 0.0,
            "algbw_Bps": algbw,
            "busbw_Bps": algbw * bus_factor(p.op, n),
            "ranks": n,
            "nbytes": p.nbytes,
            "collective_fabric": self.fabric.name,
            "collective_algorithm": self.algorithm,
            "fabric_bandwidth_Bps": self.fabric.bandwidth_Bps,
            **self._energy(end_s),
        }

    def _energy(self, end_s: float) -> dict[str, float | int | str]:
        """The energy and carbon columns (:data:`METRICS`)."""
        _, out = run_energy(self.cluster, self.sim.recorder, end_s)
        reps = float(len(self.durations_s))
        out.update(per_unit(float(out["energy_accelerator_J"]), {"energy_per_collective_J": reps}))
        above = sum(m.active_J for m in self.meters)
        out["collective_energy_J"] = above / reps if reps else float("nan")
        return out
