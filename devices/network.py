"""Network fabric with max-min fair sharing of flows (links with ``sharing: fair``).

A flow moves ``nbytes`` over a path of links. It first waits the path latency (sum of
its links' latencies), then joins the fabric. Whenever a flow joins or leaves, the rates
of all active flows are recomputed by progressive filling (water-filling):

1. every link's capacity is shared equally among the unfrozen flows crossing it;
2. the link(s) with the smallest equal share are the bottleneck: each flow through them
   is frozen at that share, and its rate is taken off every other link on its path;
3. repeat until every flow is frozen.

The result is the max-min fair allocation: no flow can get faster without slowing a
flow that is already no faster than it. Between recomputations rates are constant, so
each flow's remaining bytes fall linearly; the network schedules one timeout at the
earliest completion. SimPy timeouts cannot be cancelled, so each schedule carries a
version number and a timeout whose version is stale does nothing.

Flows whose completions fall within a tolerance (``rel_tol`` of their size, or
``time_tol_s`` at their rate) of the earliest one finish in that same instant, so flows
that end together in exact arithmetic end together here despite float rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from hetsim.simulator.engine import InvariantViolation, Simulation

FLOW_COLUMNS = ("network", "name", "nbytes", "path", "queued_s", "start_s", "end_s")


@dataclass(frozen=True)
class NetLink:
    """One fair-shared link of the fabric (one direction)."""

    name: str
    capacity_Bps: float
    latency_s: float = 0.0


@dataclass
class Flow:
    """An active or finished flow; ``rate_Bps`` is its current max-min fair rate."""

    fid: int
    name: str
    path: tuple[str, ...]
    nbytes: int
    queued_s: float
    done: simpy.Event
    start_s: float = float("nan")
    end_s: float = float("nan")
    remaining_bytes: float = 0.0
    delivered_bytes: float = 0.0
    rate_Bps: float = 0.0
    rate_history: list[tuple[float, float]] = field(default_factory=list)  # (time_s, rate)


def max_min_rates(
    paths: dict[int, tuple[str, ...]], capacity_Bps: dict[str, float]
) -> dict[int, float]:
    """Max-min fair rate of each flow (by id) given its path, by progressive filling."""
    spare = {name: capacity_Bps[name] for p in paths.values() for name in p}
    users: dict[str, set[int]] = {name: set() for name in spare}
    for fid, p in paths.items():
        for name in p:
            users[name].add(fid)
    rates: dict[int, float] = {}
    while users:
        share = min(spare[n] / len(u) for n, u in users.items())
        limit = share * (1.0 + 1e-12)
        frozen = {f for n, u in users.items() if spare[n] / len(u) <= limit for f in u}
        for fid in sorted(frozen):
            rates[fid] = share
            for name in paths[fid]:
                spare[name] = max(0.0, spare[name] - share)
                users[name].discard(fid)
        users = {n: u for n, u in users.items() if u}
    return rates


class FlowNetwork:
    """A fabric of fair-shared links carrying flows at max-min fair rates.

    ``on_recompute``, if set, is called with the network after every recomputation of
    rates (a debug hook for tests and tracing). Every flow appends a row to the
    ``flows`` table; every recomputation records each link's load (B/s) as a counter.
    """

    def __init__(
        self,
        sim: Simulation,
        name: str = "network",
        *,
        rel_tol: float = 1e-9,
        time_tol_s: float = 1e-12,
        group: str = "links",
    ) -> None:
        self.sim = sim
        self.name = name
        self.group = group
        self.rel_tol = rel_tol
        self.time_tol_s = time_tol_s
        self.links: dict[str, NetLink] = {}
        self._capacity_Bps: dict[str, float] = {}  # link -> capacity, read at every recompute
        self.active: dict[int, Flow] = {}
        self.on_recompute: Callable[[FlowNetwork], None] | None = None
        self.bytes_delivered = 0.0
        self._next_fid = 0
        self._version = 0
        self._last_update_s = sim.now
        self._last_load: dict[str, float] = {}
        self._flows = sim.recorder.table("flows", FLOW_COLUMNS)
        sim.add_invariant(self._check_capacity)

    def add_link(self, name: str, capacity_Bps: float, latency_s: float = 0.0) -> NetLink:
        """Add a fair-shared link of ``capacity_Bps`` (one direction) and ``latency_s``."""
        if name in self.links:
            raise ValueError(f"network {self.name!r}: link {name!r} already exists")
        if capacity_Bps <= 0 or latency_s < 0:
            raise ValueError(f"link {name!r}: capacity must be > 0 and latency >= 0")
        link = self.links[name] = NetLink(name, float(capacity_Bps), float(latency_s))
        self._capacity_Bps[name] = link.capacity_Bps
        self.sim.recorder.track(f"{self.name}:{name}", self.group, "link")
        return link

    def path_latency_s(self, path: list[str]) -> float:
        """Sum of the latencies of the links on ``path``."""
        return sum(self.links[n].latency_s for n in path)

    def transfer(self, path: list[str], nbytes: int, name: str = "") -> simpy.Event:
        """Send ``nbytes`` along ``path``; the event fires (value: the :class:`Flow`) at the end."""
        self._validate(path, nbytes)
        flow = Flow(
            self._next_fid, name, tuple(path), int(nbytes), self.sim.now, self.sim.env.event()
        )
        self._next_fid += 1
        self.sim.env.process(self._start_after_latency(flow))
        return flow.done

    def link_load_Bps(self) -> dict[str, float]:
        """Sum of the current rates of the active flows on each link."""
        load = dict.fromkeys(self.links, 0.0)
        for flow in self.active.values():
            for n in flow.path:
                load[n] += flow.rate_Bps
        return load

    def _validate(self, path: list[str], nbytes: int) -> None:
        if not path:
            raise ValueError(f"network {self.name!r}: a flow needs a non-empty path")
        unknown = [n for n in path if n not in self.links]
        if unknown:
            raise KeyError(f"network {self.name!r}: unknown links {unknown}")
        if len(set(path)) != len(path):
            raise ValueError(f"network {self.name!r}: path {path} repeats a link")
        if nbytes < 0:
            raise ValueError(f"negative flow size {nbytes}")

    def _start_after_latency(self, flow: Flow) -> Generator[simpy.Event, Any, None]:
        latency_s = self.path_latency_s(list(flow.path))
        if latency_s > 0:
            yield self.sim.env.timeout(latency_s)
        flow.start_s = self.sim.now
        if flow.nbytes == 0:
            self._finish(flow)
            return
        self._advance()
        flow.remaining_bytes = float(flow.nbytes)
        self.active[flow.fid] = flow
        self._reschedule()

    def _advance(self) -> None:
        """Move every active flow forward by the time since the last update."""
        elapsed = self.sim.now - self._last_update_s
        self._last_update_s = self.sim.now
        if elapsed <= 0:
            return
        for flow in self.active.values():
            moved = min(flow.remaining_bytes, flow.rate_Bps * elapsed)
            flow.remaining_bytes -= moved
            flow.delivered_bytes += moved

    def _reschedule(self) -> None:
        """Recompute fair rates and schedule the earliest completion."""
        paths = {fid: f.path for fid, f in self.active.items()}
        for fid, rate in max_min_rates(paths, self._capacity_Bps).items():
            flow = self.active[fid]
            if rate != flow.rate_Bps:
                flow.rate_history.append((self.sim.now, rate))
            flow.rate_Bps = rate
        self._record_load()
        if self.on_recompute is not None:
            self.on_recompute(self)
        self._version += 1
        if not self.active:
            return
        first = min(self.active.values(), key=lambda f: (f.remaining_bytes / f.rate_Bps, f.fid))
        timeout = self.sim.env.timeout(first.remaining_bytes / first.rate_Bps)
        version = self._version
        timeout.callbacks.append(lambda _: self._on_timeout(version, first.fid))

    def _on_timeout(self, version: int, due_fid: int) -> None:
        if version != self._version:
            return  # a later arrival or departure rescheduled: stale timeout
        self._advance()
        done = [f for f in self.active.values() if f.fid == due_fid or self._is_done(f)]
        for flow in sorted(done, key=lambda f: f.fid):
            del self.active[flow.fid]
            flow.remaining_bytes = 0.0  # float dust within tolerance: not delivered bytes
            flow.rate_Bps = 0.0
            self._finish(flow)
        self._reschedule()

    def _is_done(self, flow: Flow) -> bool:
        tol = max(self.rel_tol * flow.nbytes, self.time_tol_s * flow.rate_Bps)
        return flow.remaining_bytes <= tol

    def _finish(self, flow: Flow) -> None:
        flow.end_s = self.sim.now
        self.bytes_delivered += flow.delivered_bytes
        path = ">".join(flow.path)
        self._flows.append(
            self.name, flow.name, flow.nbytes, path, flow.queued_s, flow.start_s, flow.end_s
        )
        flow.done.succeed(flow)

    def _record_load(self) -> None:
        """Counter sample of each link whose load changed at this recomputation."""
        for n, load in self.link_load_Bps().items():
            if self._last_load.get(n, 0.0) != load:
                self._last_load[n] = load
                self.sim.recorder.counter(f"{self.name}:{n}", self.sim.now, load)

    def _check_capacity(self) -> None:
        for n, load in self.link_load_Bps().items():
            if load > self.links[n].capacity_Bps * (1.0 + 1e-9):
                raise InvariantViolation(
                    f"network {self.name!r}: link {n!r} carries {load} B/s > capacity "
                    f"{self.links[n].capacity_Bps}"
                )
