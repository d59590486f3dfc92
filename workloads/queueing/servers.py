"""Servers of the generic queueing workload: FCFS and processor sharing.

Both are event-driven (timeouts with callbacks, no SimPy process per request) so a
million-request run stays cheap. A server owns the ComputeDevice it runs on and
reports each request's start and end through ``on_done``.

Energy (:mod:`hetsim.devices.energy`): each server's ``compute_s`` holds, per request,
its seconds at the device's full compute roof (the workload sets it); a busy interval
goes to the device's meter at compute utilisation ``compute_s / its duration`` (FCFS:
one request's service; PS: a busy period, whose work is the sum of its requests').
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Sequence

from hetsim.devices.compute import ComputeDevice
from hetsim.simulator.engine import Timer

Done = Callable[[int, int, float, float], None]  # (request, server index, start_s, end_s)


class FcfsServer:
    """One request at a time, in the order given; the rest wait in a local queue."""

    def __init__(self, index: int, device: ComputeDevice, on_done: Done) -> None:
        self.index = index
        self.device = device
        self.env = device.sim.env
        self._timer = Timer(device.sim, self._on_finish)
        self._spans = device.sim.recorder.record_spans  # fixed when the run is built
        self.on_done = on_done
        self.queue: deque[tuple[int, float]] = deque()  # (request, service_s)
        self.busy = False
        self.busy_until_s = 0.0
        self.loaded = True  # False while set-up (a weights load) runs
        self.available_at_s = 0.0  # when set-up finishes (an estimate until it does)
        self._request, self._start_s = -1, 0.0  # the request in service and its start
        #: per request, seconds at the full compute roof (energy; empty: memory-bound)
        self.compute_s: Sequence[float] = ()
        # spans off: busy and compute-roof seconds and the highest utilisation since the
        # last settle_energy
        self._energy_s = self._energy_compute_s = self._energy_u = 0.0

    @property
    def jobs(self) -> int:
        """Requests queued or in service."""
        return len(self.queue) + (1 if self.busy else 0)

    def settle_energy(self) -> None:
        """Add the busy intervals accounted without spans to the device's meter
        (:meth:`~hetsim.devices.energy_meter.EnergyMeter.add`, exact for the linear power
        model)."""
        if self._energy_s <= 0:
            return
        meter = self.device.energy
        pm = meter.model
        active = pm.interval_J(self._energy_s, self._energy_compute_s)
        meter.add(active, self._energy_s, pm.busy_W(self._energy_u))
        self._energy_s = self._energy_compute_s = self._energy_u = 0.0

    def backlog_s(self, now_s: float) -> float:
        """Seconds until everything committed here is done."""
        return max(self.busy_until_s, self.available_at_s) - now_s if self.jobs else 0.0

    def submit(self, request: int, service_s: float) -> None:
        """Queue ``request`` here (starts now if the server is idle)."""
        now = self.env.now
        self.busy_until_s = max(self.busy_until_s, now, self.available_at_s) + service_s
        if not self.busy and self.loaded and not self.queue:  # start_next's case: _start
            self.busy = True
            self._request, self._start_s = request, now
            self._timer.start(service_s)
            return
        self.queue.append((request, service_s))
        self.start_next()

    def start_next(self) -> None:
        """Start the oldest local request if the server is loaded and idle."""
        if self.queue and self.loaded and not self.busy:
            self._start(*self.queue.popleft())

    def on_loaded(self) -> None:
        """Set-up finished: start serving."""
        self.loaded = True
        self.available_at_s = self.env.now
        self.start_next()

    def _start(self, request: int, service_s: float) -> None:
        # one request in service at a time: it and its start are kept here
        self.busy = True
        self._request, self._start_s = request, self.env.now
        self._timer.start(service_s)

    def _on_finish(self, _ev: object) -> None:
        request, start_s = self._request, self._start_s  # the request in service
        end = self.env.now
        device = self.device
        d = end - start_s
        c = self.compute_s[request] if self.compute_s else 0.0
        if self._spans:
            device.record_busy(start_s, end, f"req {request}", utilisation=c / d if d > 0 else 0.0)
        else:  # record_busy's accounting without building a span name no one reads
            device.busy_s += d
            device.ops += 1
            # the energy integral, added to the meter once (settle_energy)
            c = d if c > d else c
            self._energy_s += d
            self._energy_compute_s += c
            if c > self._energy_u * d:
                self._energy_u = c / d
        self.busy = False
        self.on_done(request, self.index, start_s, end)
        if self.queue:
            self.start_next()


class PsServer:
    """Processor sharing: n requests in service each progress at 1/n of the device.

    Uses virtual time: V advances at rate 1/n, so a request with standalone service
    time w that arrives when V = v leaves when V = v + w. Only the earliest virtual
    finish needs a pending timeout; stale timeouts are ignored by a version counter.
    """

    def __init__(self, index: int, device: ComputeDevice, on_done: Done) -> None:
        self.index = index
        self.device = device
        self.env = device.sim.env
        self.on_done = on_done
        self._heap: list[tuple[float, int, float]] = []  # (virtual finish, request, arrival)
        self._v = 0.0
        self._last_s = 0.0
        self._version = 0
        self._busy_since_s = 0.0
        self._pending: list[tuple[int, float]] = []
        self.loaded = True
        self.available_at_s = 0.0
        #: per request, seconds at the full compute roof (energy; empty: memory-bound)
        self.compute_s: Sequence[float] = ()
        self._period_compute_s = 0.0  # compute_s of the requests of this busy period

    @property
    def busy(self) -> bool:
        """True while any request is in service."""
        return bool(self._heap)

    @property
    def jobs(self) -> int:
        """Requests in service or waiting for set-up."""
        return len(self._heap) + len(self._pending)

    def backlog_s(self, now_s: float) -> float:
        """Total remaining standalone work of the requests in service (and pending)."""
        v = self._virtual_now(now_s)
        pending = sum(w for _, w in self._pending)
        wait = max(0.0, self.available_at_s - now_s) if not self.loaded else 0.0
        return wait + pending + sum(f - v for f, _, _ in self._heap)

    def _virtual_now(self, now_s: float) -> float:
        n = len(self._heap)
        return self._v + (now_s - self._last_s) / n if n else self._v

    def submit(self, request: int, service_s: float) -> None:
        """Start sharing the device with ``request`` now."""
        if not self.loaded:
            self._pending.append((request, service_s))
            return
        now = self.env.now
        if not self._heap:
            self._busy_since_s = now
        self._v = self._virtual_now(now)
        self._last_s = now
        heapq.heappush(self._heap, (self._v + service_s, request, now))
        if self.compute_s:
            self._period_compute_s += self.compute_s[request]
        self._schedule()

    def on_loaded(self) -> None:
        """Set-up finished: admit every request that arrived meanwhile."""
        self.loaded = True
        self.available_at_s = self.env.now
        pending, self._pending = self._pending, []
        for request, service_s in pending:
            self.submit(request, service_s)

    def start_next(self) -> None:
        """Nothing to do: a PS server admits requests on arrival."""

    def settle_energy(self) -> None:
        """Nothing to do: every busy period went to the meter as it ended."""

    def _schedule(self) -> None:
        self._version += 1
        if not self._heap:
            return
        version = self._version
        delay = max(0.0, (self._heap[0][0] - self._v) * len(self._heap))
        ev = self.env.timeout(delay)
        ev.callbacks.append(lambda _e: self._finish(version))

    def _finish(self, version: int) -> None:
        if version != self._version:
            return  # superseded by a later arrival
        now = self.env.now
        finish_v, request, arrival = heapq.heappop(self._heap)
        self._v = finish_v
        self._last_s = now
        if not self._heap:
            d, c = now - self._busy_since_s, self._period_compute_s
            self._period_compute_s = 0.0
            self.device.record_busy(self._busy_since_s, now, "busy",
                                    utilisation=c / d if d > 0 else 0.0)  # fmt: skip
        self.on_done(request, self.index, arrival, now)
        self._schedule()
