"""The ring fabric a topology gives a group of devices.

For a group without a catalogue fabric (PCIe GPUs, NVLink pairs bridged over PCIe,
several nodes on a network), a ring collective is priced as the ring its ranks form in
the given order: rank ``i`` sends to rank ``i + 1 (mod n)`` along the topology's route
(:meth:`devices.topology.Topology.path`). Every directed hop of those routes carries the
ring traffic of each pair that crosses it, so a hop shared by ``m`` pairs in the same
direction gives each ``1/m`` of its bandwidth. The ring then runs at its slowest pair:

* ``bandwidth_Bps``: min over pairs of min over the pair's hops of ``bandwidth / m``;
* efficiency curve: the link efficiency of that bottleneck hop;
* ``alpha_s``: max over pairs of the summed hop latencies of the pair's route.

This is a derivation from the link catalogue, not a fit: the fabric says so in its
``source``. It ignores copy-engine limits and the PCIe switch and root-complex
arbitration beyond the links the topology names.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from hetsim.devices.collectives import AlgorithmFit, CollectiveFabric
from hetsim.devices.topology import Hop, Topology


def ring_routes(topology: Topology, devices: Sequence[str]) -> list[list[Hop]]:
    """Route of each ring pair ``devices[i] -> devices[i + 1]`` (the last wraps)."""
    n = len(devices)
    return [topology.path(devices[i], devices[(i + 1) % n]) for i in range(n)]


def ring_fabric(topology: Topology, devices: Sequence[str]) -> CollectiveFabric:
    """The ring fabric of ``devices`` in this order (module doc); ValueError if a pair
    has no route or the group has fewer than two devices."""
    if len(devices) < 2:
        raise ValueError(f"a ring needs at least two devices, got {list(devices)}")
    routes = ring_routes(topology, devices)
    load = Counter((h.src, h.dst) for route in routes for h in route)
    best: tuple[float, Hop] | None = None
    alpha_s = 0.0
    for route in routes:
        alpha_s = max(alpha_s, sum(h.spec.latency_s for h in route))
        for hop in route:
            share_Bps = hop.spec.bandwidth_Bps / load[(hop.src, hop.dst)]
            if best is None or share_Bps < best[0]:
                best = (share_Bps, hop)
    assert best is not None  # two distinct devices always have a hop between them
    bandwidth_Bps, hop = best
    fit = AlgorithmFit(alpha_s=alpha_s, efficiency=hop.spec.efficiency, basis="topology ring")
    return CollectiveFabric(
        name="topology-ring",
        display_name=f"ring of {len(devices)} over the topology (bottleneck {hop.spec.name})",
        bandwidth_Bps=bandwidth_Bps,
        algorithms={"ring": fit},
        source=f"derived from link types ({hop.spec.name} bottleneck, shared by "
        f"{load[(hop.src, hop.dst)]} ring pair(s)); not fitted",
    )
