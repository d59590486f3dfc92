"""Copy channels (PCIe, NVLink): FIFO copy engines on one direction of a link.

A :class:`Link` is one direction of a physical link with ``engines`` DMA copy engines
(a ``simpy.Resource`` of that capacity, served first come, first served). A copy waits
for a free engine, then holds it for the link's alpha-beta time
``spec.transfer_time_s(nbytes) = latency_s + nbytes / (bandwidth_Bps * efficiency)``.
Concurrent copies therefore queue; they do not share bandwidth (that is the network's
fair sharing, :mod:`devices.network`). With several engines each copy still gets the
full per-direction bandwidth: a simplification that holds when one engine cannot fill
the link on its own, which is why GPUs have more than one.

A full-duplex link is two independent directions: :class:`DuplexLink`. A copy that
occupies several links at once (a pipelined multi-hop copy) is :func:`hold_links`.

Every copy appends a row to the ``copies`` table and records a busy span on the
engine's track (``<link>`` for one engine, ``<link>#<i>`` for engine ``i`` of several).
"""

from __future__ import annotations

import heapq
from collections.abc import Generator, Sequence
from contextlib import ExitStack
from typing import Any

import simpy

from hetsim.devices.spec import LinkSpec
from hetsim.simulator.engine import Simulation

COPY_COLUMNS = ("link", "name", "nbytes", "queued_s", "start_s", "end_s")


class Link:
    """One direction of a link: FIFO copy engines moving bytes at the spec's alpha-beta time."""

    def __init__(
        self,
        sim: Simulation,
        spec: LinkSpec,
        name: str,
        engines: int = 1,
        group: str = "links",
    ) -> None:
        if engines < 1:
            raise ValueError(f"link {name!r}: needs at least one copy engine, got {engines}")
        self.sim = sim
        self.spec = spec
        self.name = name
        self.engines = engines
        self._resource = simpy.Resource(sim.env, capacity=engines)
        self._free_engines = list(range(engines))
        self._tracks = [
            sim.recorder.track(name if engines == 1 else f"{name}#{i}", group, "link")
            for i in range(engines)
        ]
        self._copies = sim.recorder.table("copies", COPY_COLUMNS)
        self.busy_s = 0.0
        self.bytes_moved = 0
        self.copies_done = 0

    @property
    def queue_length(self) -> int:
        """Copies waiting for an engine now."""
        return len(self._resource.queue)

    @property
    def in_flight(self) -> int:
        """Copies holding an engine now."""
        return self._resource.count

    def copy_time_s(self, nbytes: int) -> float:
        """Time of one copy of ``nbytes`` alone on the link (no queueing)."""
        return self.spec.transfer_time_s(nbytes)

    def copy(self, nbytes: int, name: str = "") -> Generator[simpy.Event, Any, float]:
        """SimPy process: wait for an engine, move ``nbytes``; returns the end time.

        Use as ``yield sim.env.process(link.copy(n))`` or see :meth:`transfer`.
        """
        return hold_links([self], self.spec.transfer_time_s(nbytes), nbytes, name)

    def transfer(self, nbytes: int, name: str = "") -> simpy.Event:
        """Start a copy now; the returned event fires (value: end time) when it completes."""
        return self.sim.env.process(self.copy(nbytes, name))

    def utilisation(self, horizon_s: float) -> float:
        """Busy engine-time over ``horizon_s`` of wall time and all engines (0..1)."""
        if horizon_s <= 0:
            return 0.0
        return self.busy_s / (horizon_s * self.engines)

    def _account(
        self, engine: int, name: str, nbytes: int, queued_s: float, start_s: float, end_s: float
    ) -> None:
        self.busy_s += end_s - start_s
        self.bytes_moved += nbytes
        self.copies_done += 1
        self._copies.append(self.name, name, nbytes, queued_s, start_s, end_s)
        self.sim.recorder.span(self._tracks[engine], name or "copy", start_s, end_s, None)

    def __repr__(self) -> str:
        return f"Link({self.name!r}, {self.spec.name}, engines={self.engines})"


def hold_links(
    links: Sequence[Link], duration_s: float, nbytes: int, name: str = ""
) -> Generator[simpy.Event, Any, float]:
    """SimPy process: hold one engine of every link in ``links`` at once for ``duration_s``.

    This is one copy occupying all of its links together (a pipelined multi-hop copy, or
    a single-link copy when ``links`` has one element). Engines are requested in link-name
    order, the usual global lock order, so copies over crossing paths cannot deadlock.
    The copy is recorded on every link. Returns the end time.
    """
    if not links:
        raise ValueError("hold_links needs at least one link")
    env = links[0].sim.env
    queued_s = float(env.now)
    held: list[tuple[Link, int]] = []
    with ExitStack() as requests:
        try:
            for link in sorted(links, key=lambda x: x.name):
                yield requests.enter_context(link._resource.request())
                held.append((link, heapq.heappop(link._free_engines)))
            start_s = float(env.now)
            yield env.timeout(duration_s)
        finally:
            for link, engine in held:
                heapq.heappush(link._free_engines, engine)
    end_s = float(env.now)
    for link, engine in held:
        link._account(engine, name, nbytes, queued_s, start_s, end_s)
    return end_s


class DuplexLink:
    """A full-duplex physical link between ``a`` and ``b``: two independent :class:`Link` s.

    Each direction has the spec's full per-direction bandwidth and its own engines,
    named ``<name>:<a>-><b>`` and ``<name>:<b>-><a>``.
    """

    def __init__(
        self,
        sim: Simulation,
        spec: LinkSpec,
        name: str,
        a: str,
        b: str,
        engines: int = 1,
        group: str = "links",
    ) -> None:
        if a == b:
            raise ValueError(f"duplex link {name!r}: both ends are {a!r}")
        self.name = name
        self.ends = (a, b)
        self._links = {
            (a, b): Link(sim, spec, f"{name}:{a}->{b}", engines, group),
            (b, a): Link(sim, spec, f"{name}:{b}->{a}", engines, group),
        }

    def direction(self, src: str, dst: str) -> Link:
        """The :class:`Link` carrying bytes from ``src`` to ``dst``."""
        try:
            return self._links[(src, dst)]
        except KeyError:
            raise KeyError(
                f"duplex link {self.name!r} joins {self.ends}, not {src!r}->{dst!r}"
            ) from None

    def transfer(self, src: str, dst: str, nbytes: int, name: str = "") -> simpy.Event:
        """Start a copy from ``src`` to ``dst``; the event fires when it completes."""
        return self.direction(src, dst).transfer(nbytes, name)
