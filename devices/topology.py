"""Topology: a graph of devices, switches and the links between them.

Nodes of the graph are devices (``<machine>/<device>``, e.g. ``server/gpu3``) and
switches (NVSwitch, a network switch). Each edge is a full-duplex physical link with
attributes ``name``, ``spec`` (a :class:`~devices.spec.LinkSpec`), ``spec_name``,
``bandwidth_Bps`` (per direction, peak) and ``latency_s``. The topology itself holds no
simulation state; :class:`TopologyLinks` binds it to a simulation with one SimPy
:class:`~devices.link.Link` per edge direction. Compute devices are built elsewhere; a
:class:`DeviceEntry` only names a device, its type and its machine.

Routing: :meth:`Topology.path` is the route with the least store-and-forward time for a
reference copy of ``route_nbytes`` (default 1 MiB), i.e. Dijkstra with each hop weighted
``latency_s + route_nbytes / effective bandwidth``; ties go to the first route networkx
finds, which is deterministic for a given construction order (the graph is a
:class:`~devices.graph.LinkGraph`, whose Dijkstra is networkx's, so networkx is not
imported by a run; ``graph.to_networkx()`` gives it for analysis). Routes are cached.

Copy time over a route of hops h (two modes, ``pipelined`` is the default):

- ``pipelined`` (cut-through; what NVSwitch and DMA through a host bridge do for large
  copies): ``sum_h latency_h + nbytes / min_h bandwidth_h``; the copy holds every hop's
  link at once for that time;
- ``store_and_forward``: ``sum_h (latency_h + nbytes / bandwidth_h)``; the copy holds each
  hop's link in turn, so it pays every hop in full (a copy staged through host memory).

Bandwidth means the spec's effective bandwidth for ``nbytes`` (peak times efficiency).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import simpy

from hetsim.devices.graph import LinkGraph
from hetsim.devices.link import DuplexLink, Link, hold_links
from hetsim.devices.network import FlowNetwork
from hetsim.devices.spec import LinkSpec
from hetsim.simulator.engine import Simulation

CopyMode = Literal["pipelined", "store_and_forward"]
SpecSource = Callable[[str], LinkSpec] | Mapping[str, LinkSpec] | None


@dataclass(frozen=True)
class DeviceEntry:
    """A device (or switch) in the topology: full name, type name and machine."""

    name: str
    type_name: str
    node: str
    is_switch: bool = False
    params: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Hop:
    """One directed hop of a route: from ``src`` to ``dst`` over edge ``link``."""

    src: str
    dst: str
    link: str
    spec: LinkSpec


class Topology:
    """Devices, switches and duplex links of a cluster, with routing and copy times."""

    def __init__(self, route_nbytes: int = 1 << 20, mode: CopyMode = "pipelined") -> None:
        self.graph = LinkGraph()
        self.route_nbytes = route_nbytes
        self.mode: CopyMode = mode
        self._routes: dict[tuple[str, str], list[Hop]] = {}

    def add_device(
        self, name: str, type_name: str, node: str, params: Mapping[str, Any] | None = None
    ) -> DeviceEntry:
        """Add a device ``name`` of catalogue type ``type_name`` on machine ``node``."""
        return self._add_entry(DeviceEntry(name, type_name, node, False, dict(params or {})))

    def add_switch(self, name: str, node: str, type_name: str = "switch") -> DeviceEntry:
        """Add a switch (NVSwitch, network switch): a node that only forwards bytes."""
        return self._add_entry(DeviceEntry(name, type_name, node, True))

    def add_link(self, a: str, b: str, spec: LinkSpec, name: str | None = None) -> str:
        """Join ``a`` and ``b`` with a full-duplex link of type ``spec``; returns its name."""
        for end in (a, b):
            if end not in self.graph:
                raise KeyError(f"topology has no device {end!r}")
        if a == b or self.graph.has_edge(a, b):
            raise ValueError(f"cannot add link {a!r}-{b!r}: self-loop or already linked")
        name = name or f"{a}<->{b}"
        self.graph.add_edge(
            a,
            b,
            name=name,
            spec=spec,
            spec_name=spec.name,
            bandwidth_Bps=spec.bandwidth_Bps,
            latency_s=spec.latency_s,
        )
        self._routes.clear()
        return name

    def device(self, name: str) -> DeviceEntry:
        """The entry of device or switch ``name``."""
        try:
            entry: DeviceEntry = self.graph.node(name)["entry"]
        except KeyError:
            raise KeyError(f"topology has no device {name!r}") from None
        return entry

    def devices(self, node: str | None = None) -> list[DeviceEntry]:
        """Devices (not switches), in insertion order, optionally of one machine."""
        entries = (d["entry"] for _, d in self.graph.nodes())
        return [e for e in entries if not e.is_switch and (node is None or e.node == node)]

    def path(self, src: str, dst: str) -> list[Hop]:
        """The route from ``src`` to ``dst`` (see the module doc); [] when src is dst."""
        key = (src, dst)
        if key not in self._routes:
            self._routes[key] = self._route(src, dst)
        return self._routes[key]

    def copy_time_s(self, src: str, dst: str, nbytes: int, mode: CopyMode | None = None) -> float:
        """Time of one uncontended copy of ``nbytes`` from ``src`` to ``dst``."""
        return route_time_s(self.path(src, dst), nbytes, mode or self.mode)

    def _add_entry(self, entry: DeviceEntry) -> DeviceEntry:
        if entry.name in self.graph:
            raise ValueError(f"topology already has a device {entry.name!r}")
        self.graph.add_node(entry.name, entry=entry)
        self._routes.clear()
        return entry

    def _route(self, src: str, dst: str) -> list[Hop]:
        for end in (src, dst):
            if end not in self.graph:
                raise KeyError(f"topology has no device {end!r}")

        def weight(u: str, v: str, d: dict[str, Any]) -> float:
            spec: LinkSpec = d["spec"]
            return spec.transfer_time_s(self.route_nbytes)

        nodes = self.graph.shortest_path(src, dst, weight)
        if nodes is None:
            raise ValueError(f"no route from {src!r} to {dst!r}")
        return [self._hop(u, v) for u, v in itertools.pairwise(nodes)]

    def _hop(self, u: str, v: str) -> Hop:
        data = self.graph.edge(u, v)
        return Hop(u, v, data["name"], data["spec"])


def segments(hops: list[Hop]) -> list[list[Hop]]:
    """Split a route into maximal runs of hops with the same sharing discipline."""
    out: list[list[Hop]] = []
    for hop in hops:
        if out and out[-1][0].spec.sharing == hop.spec.sharing:
            out[-1].append(hop)
        else:
            out.append([hop])
    return out


def fair_capacity_Bps(spec: LinkSpec) -> float:
    """Capacity a fair-shared link offers its flows: peak x the large-transfer efficiency."""
    return spec.bandwidth_Bps * spec.efficiency.max_eff


def route_time_s(hops: list[Hop], nbytes: int, mode: CopyMode = "pipelined") -> float:
    """Uncontended copy time of ``nbytes`` over ``hops`` (formulas in the module doc).

    A route that mixes copy-engine (``fifo``) and network (``fair``) hops is staged at
    each change of discipline: its segments run one after the other. Inside a network
    segment a flow runs at the segment's smallest fair capacity.
    """
    if mode not in ("pipelined", "store_and_forward"):
        raise ValueError(f"unknown copy mode {mode!r}")
    return sum(_segment_time_s(seg, nbytes, mode) for seg in segments(hops))


def _segment_time_s(hops: list[Hop], nbytes: int, mode: CopyMode) -> float:
    latency_s = sum(h.spec.latency_s for h in hops)
    if nbytes == 0:
        return latency_s
    if hops[0].spec.sharing == "fair":
        return latency_s + nbytes / min(fair_capacity_Bps(h.spec) for h in hops)
    if mode == "store_and_forward":
        return sum(h.spec.transfer_time_s(nbytes) for h in hops)
    return latency_s + nbytes / min(h.spec.effective_bandwidth_Bps(nbytes) for h in hops)


class TopologyLinks:
    """A topology bound to a simulation: one duplex :class:`Link` pair per edge.

    :meth:`copy` moves bytes along :meth:`Topology.path`. Copy-engine hops (``sharing:
    fifo``: PCIe, NVLink) are held as the topology's ``mode`` says (module doc), so
    concurrent copies queue on them. Network hops (``sharing: fair``) are links of one
    :class:`~devices.network.FlowNetwork`, so concurrent flows share them max-min fairly.
    A route that mixes both runs its segments one after the other (staged in between,
    as a copy through host memory is).
    """

    def __init__(self, sim: Simulation, topology: Topology, engines: int = 1) -> None:
        self.sim = sim
        self.topology = topology
        self._duplex: dict[str, DuplexLink] = {}
        edges = list(topology.graph.edges())
        fair = any(d["spec"].sharing == "fair" for _, _, d in edges)
        self.network = FlowNetwork(sim, name="fabric") if fair else None
        for a, b, d in edges:
            spec: LinkSpec = d["spec"]
            if self.network is not None and spec.sharing == "fair":
                for u, v in ((a, b), (b, a)):
                    self.network.add_link(_flow_link(d["name"], u, v), fair_capacity_Bps(spec),
                                          spec.latency_s)  # fmt: skip
            else:
                self._duplex[d["name"]] = DuplexLink(sim, spec, d["name"], a, b, engines)

    def link(self, hop: Hop) -> Link:
        """The directional :class:`Link` that carries a copy-engine ``hop``."""
        return self._duplex[hop.link].direction(hop.src, hop.dst)

    def copy(
        self, src: str, dst: str, nbytes: int, name: str = ""
    ) -> Generator[simpy.Event, Any, float]:
        """SimPy process: copy ``nbytes`` from ``src`` to ``dst``; returns the end time."""
        end_s = self.sim.now
        for seg in segments(self.topology.path(src, dst)):
            if self.network is not None and seg[0].spec.sharing == "fair":
                path = [_flow_link(h.link, h.src, h.dst) for h in seg]
                yield self.network.transfer(path, nbytes, name)
                end_s = self.sim.now
            elif self.topology.mode == "pipelined":
                duration_s = _segment_time_s(seg, nbytes, "pipelined")
                end_s = yield from hold_links([self.link(h) for h in seg], duration_s, nbytes, name)
            else:
                for hop in seg:  # store-and-forward: each hop in full, one after the other
                    end_s = yield from self.link(hop).copy(nbytes, name)
        return end_s

    def transfer(self, src: str, dst: str, nbytes: int, name: str = "") -> simpy.Event:
        """Start a copy now; the event fires (value: end time) when it completes."""
        return self.sim.env.process(self.copy(src, dst, nbytes, name))


def _flow_link(edge: str, src: str, dst: str) -> str:
    return f"{edge}:{src}->{dst}"


# ---- builders -------------------------------------------------------------------------


def resolve_link_spec(ref: LinkSpec | str, specs: SpecSource = None) -> LinkSpec:
    """A LinkSpec given itself, or a name looked up in ``specs`` (default: the catalogue)."""
    if isinstance(ref, LinkSpec):
        return ref
    if specs is None:
        from hetsim.devices.catalogue import link_spec  # lazy: only needed for names

        return link_spec(ref)
    if isinstance(specs, Mapping):
        try:
            return specs[ref]
        except KeyError:
            raise KeyError(f"unknown link type {ref!r}; known: {sorted(specs)}") from None
    return specs(ref)


def nvlink_server(
    n_gpus: int = 8,
    *,
    gpu_type: str,
    cpu_type: str,
    nvlink_spec: LinkSpec | str,
    pcie_spec: LinkSpec | str,
    node: str = "server",
    link_specs: SpecSource = None,
) -> Topology:
    """An HGX-style server: GPUs all-to-all through one NVSwitch node, each GPU on PCIe to the CPU.

    Devices: ``<node>/gpu0..gpu{n-1}``, ``<node>/cpu``, switch ``<node>/nvswitch``. Each GPU's
    NVSwitch edge carries that GPU's whole NVLink bandwidth (the spec's per-direction
    aggregate), so GPU-to-GPU routes go GPU -> NVSwitch -> GPU.
    """
    nvlink = resolve_link_spec(nvlink_spec, link_specs)
    pcie = resolve_link_spec(pcie_spec, link_specs)
    topo = Topology()
    cpu = topo.add_device(f"{node}/cpu", cpu_type, node).name
    switch = topo.add_switch(f"{node}/nvswitch", node, "nvswitch").name
    for i in range(n_gpus):
        gpu = topo.add_device(f"{node}/gpu{i}", gpu_type, node).name
        topo.add_link(gpu, switch, nvlink)
        topo.add_link(gpu, cpu, pcie)
    return topo


def pcie_workstation(
    *,
    gpu_type: str,
    cpu_type: str,
    pcie_spec: LinkSpec | str,
    node: str = "workstation",
    link_specs: SpecSource = None,
) -> Topology:
    """One GPU on a PCIe link to the host CPU: ``<node>/gpu`` and ``<node>/cpu``."""
    topo = Topology()
    gpu = topo.add_device(f"{node}/gpu", gpu_type, node).name
    cpu = topo.add_device(f"{node}/cpu", cpu_type, node).name
    topo.add_link(gpu, cpu, resolve_link_spec(pcie_spec, link_specs))
    return topo


def from_dict(cfg: Mapping[str, Any], link_specs: SpecSource = None) -> Topology:
    """Build a heterogeneous cluster from a scenario's ``cluster:`` section.

    ``cfg = {nodes: [{name, devices: {dev: {type, count?, ...}}, links: [{type | spec,
    between: [a, b]}], network_attach?}], network?: {type | spec, attach, switch?}}``.
    A device with ``count > 1`` becomes ``dev0..dev{count-1}``; in ``between`` its group
    name stands for every member (each member of ``a`` is linked to each member of
    ``b``). ``type: switch`` (or ``nvswitch``) makes a switch. With a ``network``, the
    ``attach`` device(s) of every node (default ``cpu``) link to one switch ``<switch>``
    (default ``fabric``). Link ``type`` names go through ``link_specs`` (default: the
    catalogue); ``spec`` gives a :class:`LinkSpec` directly.
    """
    topo = Topology()
    groups: dict[str, dict[str, list[str]]] = {}
    for node_cfg in cfg.get("nodes", []):
        node = node_cfg["name"]
        groups[node] = _add_node_devices(topo, node, node_cfg.get("devices", {}))
        for link_cfg in node_cfg.get("links", []):
            _add_node_link(topo, node, groups[node], link_cfg, link_specs)
    net = cfg.get("network")
    if net:
        spec = _link_cfg_spec(net, link_specs, "network")
        switch = topo.add_switch(net.get("switch", "fabric"), "fabric").name
        for node_cfg in cfg.get("nodes", []):
            node = node_cfg["name"]
            attach = node_cfg.get("network_attach", net.get("attach", "cpu"))
            for member in _members(groups[node], attach, node):
                topo.add_link(member, switch, spec)
    return topo


def _add_node_devices(
    topo: Topology, node: str, devices: Mapping[str, Mapping[str, Any]]
) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for dev, dev_cfg in devices.items():
        if "type" not in dev_cfg:
            raise ValueError(f"cluster.nodes[{node}].devices.{dev}: missing 'type'")
        count = int(dev_cfg.get("count", 1))
        names = [dev] if count == 1 else [f"{dev}{i}" for i in range(count)]
        params = {k: v for k, v in dev_cfg.items() if k not in ("type", "count")}
        groups[dev] = []
        for short in names:
            full = f"{node}/{short}"
            if dev_cfg["type"] in ("switch", "nvswitch"):
                topo.add_switch(full, node, dev_cfg["type"])
            else:
                topo.add_device(full, dev_cfg["type"], node, params)
            groups[dev].append(full)
            groups.setdefault(short, [full])
    return groups


def _add_node_link(
    topo: Topology,
    node: str,
    groups: Mapping[str, list[str]],
    link_cfg: Mapping[str, Any],
    link_specs: SpecSource,
) -> None:
    where = f"cluster.nodes[{node}].links"
    between = link_cfg.get("between")
    if not between or len(between) != 2:
        raise ValueError(f"{where}: 'between' must name two devices, got {between!r}")
    spec = _link_cfg_spec(link_cfg, link_specs, where)
    for a in _members(groups, between[0], node):
        for b in _members(groups, between[1], node):
            if a != b and not topo.graph.has_edge(a, b):
                topo.add_link(a, b, spec)


def _members(groups: Mapping[str, list[str]], ref: str, node: str) -> list[str]:
    try:
        return groups[ref]
    except KeyError:
        raise ValueError(
            f"cluster.nodes[{node}]: no device {ref!r}; has {sorted(groups)}"
        ) from None


def _link_cfg_spec(link_cfg: Mapping[str, Any], link_specs: SpecSource, where: str) -> LinkSpec:
    ref = link_cfg.get("spec", link_cfg.get("type"))
    if ref is None:
        raise ValueError(f"{where}: a link needs 'type' (catalogue name) or 'spec'")
    return resolve_link_spec(ref, link_specs)
