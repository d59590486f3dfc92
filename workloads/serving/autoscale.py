"""Autoscaling of a serving deployment: provision units (warm-up), drain and release them.

Every ``period_s`` of the ``serving.scaling`` policy the mechanism builds a
:class:`~schedulers.serving.view.ScaleView` (measured arrival rate over the policy's
window, outstanding requests, SLO attainment of the requests finished in the window,
the units with their goodput estimates and prices, the free GPUs per type and the
configs) and executes the policy's :class:`~schedulers.serving.view.ScaleDecision`:

* **scale out**: the new instances are placed on free GPUs (a TP group on one node) and
  provisioned now (their cost starts); each cold-starts (``workload.cold_start``: image
  pull and the model's download from remote storage, then its weights from its node's
  CPU over the topology, ``weight bytes / tp`` per GPU as at start, then the engine
  warm-up), and the unit joins the routing pools only once every instance of it is
  ready; a unit that does not fit the free GPUs, or one whose KV cache cannot hold the
  run's longest request (the engine would refuse to start), is refused instead;
* **scale in**: every instance of the unit leaves the routing pools at once (no new
  request, no new KV hand-off), finishes what it holds, and is released (cost stops,
  GPUs and memory return to the free pool) when its queues, batch and KV are empty.

A unit is a routing group: a combo replica of prefill and decode instances, or a group
of colocated instances (the initial colocated deployment is one group; every added
colocated instance is its own). Rows go to the tables ``scale_events`` and ``scaling``.
"""

from __future__ import annotations

import bisect
import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from hetsim.simulator.engine import InvariantViolation
from hetsim.workloads.serving.deploy import config_key, place
from hetsim.workloads.serving.instance import Instance
from hetsim.workloads.serving.view import (
    DeploymentView,
    LazyTuple,
    ScaleView,
    UnitState,
    UnitView,
)

if TYPE_CHECKING:
    import numpy as np
    import simpy

    from hetsim.devices.cluster import Cluster
    from hetsim.simulator.engine import Simulation
    from hetsim.workloads.serving.deploy import Config, Slo
    from hetsim.workloads.serving.estimate import Lengths
    from hetsim.workloads.serving.metrics import RequestTimes
    from hetsim.workloads.serving.view import InstanceSpec

EVENT_COLUMNS = ("time_s", "action", "group", "instances", "gpus", "usd_per_hour")
WINDOW_COLUMNS = (
    "time_s", "rate_per_s", "capacity_rps", "utilisation", "outstanding", "attainment",
    "active", "warming", "draining", "gpus", "usd_per_hour",
)  # fmt: skip


class ScaledDeployment(Protocol):
    """The serving run an autoscaler measures and resizes
    (workloads.serving.workload.ServingWorkload): its requests so far, its instances with
    their devices and routing pools, the free GPUs, and how to start a new instance."""

    sim: Simulation
    cluster: Cluster
    #: fires when every request has finished
    done: simpy.Event
    #: per-request arrival, first-token and finish times and lengths
    times: RequestTimes
    slo: Slo
    #: the priced (GPU type, TP) configurations, estimated on the held-out ``sizing``
    configs: dict[tuple[str, int], Config]
    sizing: Lengths
    #: every instance ever started, by number, and the devices of each
    instances: list[Instance]
    placement: list[list[str]]
    #: routing pools: colocated or prefill instances, and decode instances
    entry: list[Instance]
    decode: list[Instance]
    #: free GPUs: type -> node -> device names
    _free: dict[str, dict[str, list[str]]]
    #: arrival times of all requests, in order; requests finished so far
    _arrival: list[float]
    _finished: int

    def meets(self) -> np.ndarray:
        """Per request: finished within its class's TTFT and TPOT targets."""
        ...

    def price_per_gpu_hour(self, gpu_type: str) -> float:
        """$/GPU-hour of ``gpu_type`` under the run's preset."""
        ...

    def make_instance(self, s: InstanceSpec) -> Instance:
        """A new instance of spec ``s``, numbered next (placement is the caller's)."""
        ...

    def load(
        self, inst: Instance, devs: list[str], on_ready: Callable[[], None] | None = None
    ) -> None:
        """Allocate weights and KV on ``devs``, load the weights, then mark ``inst`` ready
        and call ``on_ready``."""
        ...

    def kv_shortfall(self, s: InstanceSpec) -> str:
        """Why an instance of ``s`` cannot hold the run's longest request; "" if it can."""
        ...


@dataclass
class Unit:
    """A scaling unit's instances and lifecycle."""

    group: int
    members: list[Instance]
    added_s: float
    state: UnitState = "active"
    ready: int = 0
    released: int = 0
    drain_s: float | None = field(default=None)


class Autoscaler:
    """Runs the ``serving.scaling`` policy on a period and carries out its decisions."""

    def __init__(self, w: ScaledDeployment, policy: Any) -> None:
        self.w, self.policy, self.sim = w, policy, w.sim
        self.units: dict[int, Unit] = {}
        for inst in w.instances:
            unit = self.units.setdefault(inst.group, Unit(inst.group, [], 0.0))
            unit.members.append(inst)
        self.scale_out = 0
        self.scale_in = 0
        self.refused = 0
        self.gpus_now = sum(s.cost.tp for s in w.instances)
        self.gpus_peak = self.gpus_now
        self.events = self.sim.recorder.table("scale_events", EVENT_COLUMNS)
        self.rows = self.sim.recorder.table("scaling", WINDOW_COLUMNS)

    def start(self) -> None:
        """Wake the policy every ``period_s`` (never when it is None)."""
        if self.policy.period_s is not None:
            self.sim.env.process(self._loop(float(self.policy.period_s)))

    def _loop(self, period_s: float) -> Any:
        while not self.w.done.triggered:
            yield self.sim.env.timeout(period_s)
            if self.w.done.triggered:
                return
            self.step()

    # ---- one decision --------------------------------------------------------------
    def step(self) -> None:
        """Build the view, ask the policy, carry out its decision."""
        view = self.view()
        self.rows.append(
            view.now_s, view.rate_per_s, view.capacity_rps,
            view.rate_per_s / view.capacity_rps if view.capacity_rps > 0 else float("inf"),
            view.outstanding, view.attainment,
            *(sum(u.state == s for u in view.units) for s in ("active", "warming", "draining")),
            self.gpus_now, sum(self._usd_h(m) for u in self.units.values() for m in u.members
                               if m.released_s is None),
        )  # fmt: skip
        decision = self.policy.decide(view)
        for group in decision.drain:
            self.drain(group)
        if decision.add:
            self.add(tuple(decision.add))

    def view(self) -> ScaleView:
        """The frozen view a scaling policy decides from."""
        w, now = self.w, float(self.sim.now)
        win = float(self.policy.window_s)
        arrived = bisect.bisect_right(w._arrival, now)
        first = bisect.bisect_right(w._arrival, now - win)
        rate = (arrived - first) / min(win, now) if now > 0 else 0.0
        t = w.times
        fin = (t.finish_s > now - win) & (t.finish_s <= now)
        attain = float(w.meets()[fin].mean()) if fin.any() else float("nan")
        units = tuple(self._unit_view(u) for u in sorted(self.units.values(), key=_key))
        cap = sum(u.goodput_rps for u in units if u.state != "draining")
        free = tuple((k, sum(len(d) for d in nodes.values())) for k, nodes in w._free.items())
        # lengths from history only: prompts of the window's arrivals, outputs of the
        # window's finished requests (the sizing sample's means before any)
        prompt = float(t.prompt[first:arrived].mean()) if arrived > first else w.sizing.prompt_mean
        output = float(t.output[fin].mean()) if fin.any() else w.sizing.output_mean
        dep = DeploymentView(
            rate, prompt, output, w.slo.ttft_s, w.slo.tpot_s,
            free, LazyTuple(lambda: tuple(c.view for c in w.configs.values())),
        )  # fmt: skip
        disagg = any(s.role != "mixed" for s in w.instances)
        return ScaleView(now, win, rate, arrived - w._finished, attain, cap, disagg, units, dep)

    def _unit_view(self, u: Unit) -> UnitView:
        by_role: dict[str, float] = {}
        for m in u.members:
            by_role[m.role] = by_role.get(m.role, 0.0) + m.goodput_rps
        good = by_role.get("mixed", 0.0) + min(by_role.get("prefill", 0.0),
                                               by_role.get("decode", 0.0))  # fmt: skip
        return UnitView(
            u.group, u.state, len(u.members), sum(m.cost.tp for m in u.members), good,
            sum(self._usd_h(m) for m in u.members), u.added_s,
        )  # fmt: skip

    def _usd_h(self, inst: Instance) -> float:
        return self.w.price_per_gpu_hour(inst.cost.spec.name) * inst.cost.tp

    # ---- scale out -------------------------------------------------------------------
    def add(self, specs: tuple[Any, ...]) -> None:
        """Provision ``specs`` as one new unit; it joins routing when all are ready."""
        w = self.w
        for s in specs:
            if config_key(s) not in w.configs:
                raise InvariantViolation(f"scaling: {s.gpu_type} tp={s.tp} is not a config")
        if any(w.kv_shortfall(s) for s in specs):
            self.refused += 1
            self._event("refused-kv", -1, specs)
            return
        free = copy.deepcopy(w._free)
        try:
            devs = place(specs, free)
        except ValueError:
            self.refused += 1
            self._event("refused", -1, specs)
            return
        w._free = free
        group = max(self.units, default=-1) + 1
        for other in w.instances:
            group = max(group, other.group + 1)
        unit = Unit(group, [], float(self.sim.now), state="warming")
        self.units[group] = unit
        for s, d in zip(specs, devs, strict=True):
            s = s._replace(group=group)
            inst = w.make_instance(s)
            w.placement.append(d)
            unit.members.append(inst)
            self.gpus_now += inst.cost.tp
            w.load(inst, d, functools.partial(self._ready, unit))
        self.gpus_peak = max(self.gpus_peak, self.gpus_now)
        self.scale_out += 1
        self._event("scale-out", group, specs)

    def _ready(self, unit: Unit) -> None:
        unit.ready += 1
        if unit.ready < len(unit.members) or unit.state != "warming":
            return
        unit.state = "active"
        for m in unit.members:
            (self.w.decode if m.role == "decode" else self.w.entry).append(m)
        self._event("ready", unit.group, ())

    # ---- scale in ------------------------------------------------------------------------
    def drain(self, group: int) -> None:
        """Stop routing to ``group``; release each instance once it is empty."""
        unit = self.units.get(group)
        if unit is None or unit.state != "active":
            state = "unknown" if unit is None else unit.state
            raise InvariantViolation(f"scaling: cannot drain group {group} ({state})")
        w = self.w
        entry = [s for s in w.entry if s.group != group]
        decode = [s for s in w.decode if s.group != group]
        if not entry or (any(s.role == "prefill" for s in entry) and not decode):
            raise InvariantViolation(f"scaling: draining group {group} leaves no instance")
        w.entry[:], w.decode[:] = entry, decode
        unit.state, unit.drain_s = "draining", float(self.sim.now)
        self.scale_in += 1
        self._event("drain", group, ())
        for m in unit.members:
            m.draining = True
            m.on_drained = self._release
        for m in list(unit.members):
            m.check_drained()

    def _release(self, inst: Instance) -> None:
        w = self.w
        inst.released_s = float(self.sim.now)
        devs = w.placement[inst.number]
        for d in devs:
            w.cluster.memory(d).free("weights")
            w.cluster.memory(d).free("kv-cache")
            node = w.cluster.device(d).node
            w._free[inst.cost.spec.name].setdefault(node, []).append(d)
        self.gpus_now -= inst.cost.tp
        unit = self.units[inst.group]
        unit.released += 1
        if unit.released == len(unit.members):
            del self.units[inst.group]
            self._event("released", inst.group, ())

    def _event(self, action: str, group: int, specs: tuple[Any, ...]) -> None:
        gpus = sum(s.tp for s in specs)
        usd = sum(self.w.price_per_gpu_hour(s.gpu_type) * s.tp for s in specs)
        names = "+".join(f"{s.role}:{s.gpu_type}/tp{s.tp}" for s in specs)
        self.events.append(float(self.sim.now), action, group, names, gpus, usd)


def _key(u: Unit) -> int:
    return u.group
