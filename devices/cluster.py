"""A cluster bound to a simulation: compute devices, memory pools and routed copies.

:class:`ClusterConfig` is the scenario's ``cluster:`` block (validated, catalogue names
checked). :class:`Cluster` builds the :class:`~devices.topology.Topology`, one
:class:`~devices.compute.ComputeDevice` and one :class:`~devices.memory.MemoryPool` per
device, and SimPy links for every edge. Workloads borrow devices from it by name.
Device names are ``<node>/<device>`` (``<device><i>`` when ``count > 1``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import simpy
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator

from hetsim.devices import fit_overrides
from hetsim.devices.carbon import CarbonConfig, GridIntensity, grid_intensity
from hetsim.devices.catalogue import fabric_spec as registry_fabric
from hetsim.devices.compute import ComputeDevice
from hetsim.devices.group import CommGroup
from hetsim.devices.memory import MemoryPool
from hetsim.devices.power import POWER_COEFFICIENTS, power_model
from hetsim.devices.topology import Topology, TopologyLinks, from_dict
from hetsim.simulator import registry
from hetsim.simulator.engine import Simulation
from hetsim.simulator.limits import MAX_DEVICES

SWITCH_TYPES = ("switch", "nvswitch")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeviceConfig(_Strict):
    """Devices of one kind on a node: a catalogue type, a count and optional overrides."""

    type: str = Field(
        description="Device type from the catalogue (hetsim list devices), or switch / nvswitch."
    )
    count: int = Field(
        default=1,
        gt=0,
        le=MAX_DEVICES,
        description="Devices of this type on the node; more than "
        "one are named <name>0, <name>1, ...",
    )
    memory_bytes: PositiveInt | None = Field(
        default=None, description="Memory capacity of each device in bytes (null: the catalogue's)."
    )
    streams: PositiveInt = Field(
        default=1, description="Kernels each device runs at once (capacity of its resource)."
    )
    power_cap_w: float | None = Field(
        default=None,
        gt=0,
        description="board power limit of these devices in W, below the catalogue's tdp_w "
        "(None: the TDP): lowers the clock of compute-bound kernels and the power they draw "
        "together (devices/power.py, docs/energy.md); a cap at or above the TDP changes nothing",
    )

    @field_validator("type")
    @classmethod
    def _known_type(cls, v: str) -> str:
        if v not in SWITCH_TYPES and v not in registry.device_types:
            names = registry.device_types.names() + list(SWITCH_TYPES)
            hint = registry.did_you_mean(v, names)
            raise ValueError(f"unknown device type {v!r};{hint} valid: {', '.join(names)}")
        return v


class LinkConfig(_Strict):
    """A link type from the catalogue joining two devices (or device groups) of a node."""

    type: str = Field(description="Link type from the catalogue (hetsim list links).")
    between: tuple[str, str] = Field(
        description="The two devices (or device groups) joined, by short "
        "name; a group links every member pair."
    )

    @field_validator("type")
    @classmethod
    def _known_type(cls, v: str) -> str:
        if v not in registry.link_types:
            raise ValueError(
                f"unknown link type {v!r}; valid: {', '.join(registry.link_types.names())}"
            )
        return v


class NodeConfig(_Strict):
    """One machine: its devices by short name and its internal links."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Node name (letters, digits, _ . -); devices are named <node>/<device>.",
    )
    devices: dict[str, DeviceConfig] = Field(
        min_length=1,
        description="The node's devices by short name: a catalogue "
        "type, a count and optional overrides each.",
    )
    links: list[LinkConfig] = Field(
        default_factory=list,
        description="The node's internal links, each a catalogue link "
        "type between two devices or device groups.",
    )
    network_attach: str | None = Field(
        default=None,
        description="This node's device that links to the scale-out switch (null: network.attach).",
    )


class NetworkConfig(_Strict):
    """The scale-out fabric: every node's ``attach`` device links to one switch."""

    type: str = Field(
        description="Link type from the catalogue joining each node's attach device to the switch."
    )
    attach: str = Field(
        default="cpu",
        description="Short device name on each node that links to the "
        "switch (a node's network_attach overrides it).",
    )
    switch: str = Field(
        default="fabric", description="Name of the fabric switch every node attaches to."
    )

    _known_type = field_validator("type")(LinkConfig._known_type.__func__)  # type: ignore[attr-defined]


class ClusterConfig(_Strict):
    """The ``cluster:`` block of a scenario."""

    nodes: list[NodeConfig] = Field(
        min_length=1,
        description="The machines of the cluster, each with its devices "
        "and internal links; names must be unique.",
    )
    network: NetworkConfig | None = Field(
        default=None,
        description="The scale-out fabric: every node's attach device links to "
        "one switch (null: no network between nodes).",
    )
    power_coefficients: dict[str, float] = Field(
        default_factory=dict,
        description="this run's values of power-model coefficients, by name (idle_fraction, "
        "memory_activity, dvfs_exponent; devices/power.yaml gives each default and its "
        "source), applied to every device (idle_fraction only to CPUs): for robustness "
        "sweeps (scenarios/energy-robustness.yaml)",
    )
    accelerator_power_cap_w: float | None = Field(
        default=None,
        gt=0,
        description="board power limit in W of every GPU and NPU of the cluster whose TDP is "
        "above it (None: each device's TDP); a device's own power_cap_w wins. One mechanism "
        "lowers compute-bound clocks and power together (devices/power.py, docs/energy.md)",
    )
    carbon: CarbonConfig = Field(
        default_factory=CarbonConfig,
        description="grid carbon intensity (a constant or a time series file) and embodied "
        "carbon figures for the run's carbon columns (devices/carbon.py, docs/energy.md)",
    )

    @field_validator("nodes")
    @classmethod
    def _unique_names(cls, nodes: list[NodeConfig]) -> list[NodeConfig]:
        names = [n.name for n in nodes]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"node names must be unique; repeated: {dup}")
        total = sum(d.count for n in nodes for d in n.devices.values())
        if total > MAX_DEVICES:
            raise ValueError(f"{total} devices exceed the limit of {MAX_DEVICES}")
        return nodes

    @field_validator("power_coefficients")
    @classmethod
    def _known_coefficients(cls, v: dict[str, float]) -> dict[str, float]:
        bad = sorted(set(v) - set(POWER_COEFFICIENTS))
        if bad:
            raise ValueError(f"unknown power coefficient {bad[0]!r}; valid: "
                             f"{', '.join(POWER_COEFFICIENTS)}")  # fmt: skip
        for k, x in v.items():
            if not x >= 0 or (k == "dvfs_exponent" and x <= 0):
                raise ValueError(f"{k}: {x} must be > 0" if k == "dvfs_exponent"
                                 else f"{k}: {x} must be >= 0")  # fmt: skip
        return v

    def topology(self) -> Topology:
        """The cluster's topology graph (raises ValueError on a bad link reference)."""
        return from_dict(
            self.model_dump(exclude_none=True),
            link_specs=lambda name: fit_overrides.link(registry.link_types.get(name)),
        )


class Cluster:
    """Devices, memory pools and links of one simulation, indexed by name and kind."""

    def __init__(self, sim: Simulation, config: ClusterConfig) -> None:
        self.sim = sim
        self.config = config
        self._grid: GridIntensity | None = None
        self.topology = config.topology()
        self.links = TopologyLinks(sim, self.topology)
        self._devices: dict[str, ComputeDevice] = {}
        self._memory: dict[str, MemoryPool] = {}
        self._by_kind: dict[str, list[str]] = {}
        self._host: dict[str, str] = {}
        overrides = _device_overrides(config)
        for entry in self.topology.devices():
            spec = fit_overrides.device(registry.device_types.get(entry.type_name))
            cfg = overrides[entry.name]
            cap = cfg.power_cap_w
            if cap is None and spec.kind in ("gpu", "npu"):
                cap = config.accelerator_power_cap_w
            coefficients = config.power_coefficients
            if coefficients:
                wanted = ("idle_fraction",) if spec.kind == "cpu" else POWER_COEFFICIENTS
                over = tuple((k, float(coefficients[k])) for k in wanted if k in coefficients)
                spec = dataclasses.replace(spec, power_overrides=over)
            if cap is not None and cap < spec.tdp_w:
                spec = dataclasses.replace(spec, power_cap_w=float(cap))
                power_model(spec)  # a cap at or below idle power is an error here
            dev = ComputeDevice(sim, spec, entry.name, node=entry.node, streams=cfg.streams)
            self._devices[entry.name] = dev
            capacity = cfg.memory_bytes or spec.memory_bytes
            self._memory[entry.name] = MemoryPool(sim, f"{entry.name}:mem", capacity)
            self._by_kind.setdefault(spec.kind, []).append(entry.name)
            if spec.kind == "cpu":
                self._host.setdefault(entry.node, entry.name)

    def load_grid(self, base_dir: Path | None = None) -> GridIntensity:
        """The run's grid carbon intensity (``config.carbon``; a file resolves against
        ``base_dir``, the scenario's folder), read once; a bad file raises TraceError."""
        if self._grid is None:
            self._grid = grid_intensity(self.config.carbon, base_dir)
        return self._grid

    def device(self, name: str) -> ComputeDevice:
        """The compute device ``name`` (KeyError lists the devices)."""
        try:
            return self._devices[name]
        except KeyError:
            raise KeyError(f"no device {name!r}; cluster has {sorted(self._devices)}") from None

    def accelerator(self, name: str | None, field: str) -> str:
        """``name`` if given (KeyError lists the devices if unknown), else the first GPU or
        NPU in configuration order: the device a single-device workload prices its work
        on. ValueError naming ``field`` if the cluster has none."""
        if name is not None:
            self.device(name)
            return name
        return self.usable(("gpu", "npu"), field)[0]

    def usable(
        self, kinds: tuple[str, ...], what: str, names: Iterable[str] | None = None
    ) -> list[str]:
        """The devices ``what`` (a workload) runs on: ``names`` if given, else every
        device of one of ``kinds``. ValueError in one line when a named device is of
        another kind, or when no device is of those kinds, saying which kinds ``what``
        accepts and what the cluster's devices are."""
        accepts = " or ".join(kinds)
        if names is not None:
            names = list(names)
            for n in names:
                spec = self.device(n).spec
                if spec.kind not in kinds:
                    raise ValueError(f"{what} runs on devices of kind {accepts}; {n} is a "
                                     f"{spec.name} (kind {spec.kind})")  # fmt: skip
            return names
        found = self.device_names(kinds)
        if not found:
            have = sorted({f"{d.spec.name} (kind {d.spec.kind})" for d in self.devices()})
            raise ValueError(f"{what} runs on devices of kind {accepts}; the cluster has "
                             f"none (it has {', '.join(have) or 'no device'})")  # fmt: skip
        return found

    def kind_of_type(self, type_name: str) -> str | None:
        """The kind of the cluster's devices of catalogue type ``type_name`` (None: the
        cluster has none)."""
        for d in self._devices.values():
            if d.spec.name == type_name:
                return str(d.spec.kind)
        return None

    def devices(self) -> list[ComputeDevice]:
        """Every compute device, in configuration order."""
        return list(self._devices.values())

    def device_names(self, kinds: Iterable[str] | None = None) -> list[str]:
        """Device names (optionally of the given kinds), in configuration order."""
        if kinds is None:
            return list(self._devices)
        wanted = set(kinds)
        return [n for n, d in self._devices.items() if d.spec.kind in wanted]

    def memory(self, name: str) -> MemoryPool:
        """The memory pool of device ``name`` (HBM of a GPU, DRAM of a CPU)."""
        self.device(name)
        return self._memory[name]

    def host_of(self, name: str) -> str | None:
        """The CPU of the node that holds device ``name`` (None if the node has none)."""
        node = self.device(name).node
        host = self._host.get(node)
        return host if host != name else None

    def copy_time_s(self, src: str, dst: str, nbytes: int) -> float:
        """Uncontended time of a copy along the topology path."""
        return self.topology.copy_time_s(src, dst, nbytes)

    def copy(self, src: str, dst: str, nbytes: int, name: str = "") -> simpy.Event:
        """Start a copy now; the event fires when the bytes have arrived."""
        return self.links.transfer(src, dst, int(nbytes), name)

    def group(self, name: str, devices: list[str], fabric: str) -> CommGroup:
        """A communicator over ``devices`` using the catalogue's collective ``fabric``."""
        for d in devices:
            self.device(d)
        return CommGroup(self.sim, name, devices, registry_fabric(fabric))

    def describe(self) -> list[dict[str, Any]]:
        """One row per device: name, node, type, kind, memory bytes."""
        return [
            {
                "device": n,
                "node": d.node,
                "type": d.spec.name,
                "kind": d.spec.kind,
                "memory_bytes": self._memory[n].capacity_bytes,
            }
            for n, d in self._devices.items()
        ]


def _device_overrides(config: ClusterConfig) -> dict[str, DeviceConfig]:
    out = {}
    for node in config.nodes:
        for short, dev in node.devices.items():
            names = [short] if dev.count == 1 else [f"{short}{i}" for i in range(dev.count)]
            for n in names:
                out[f"{node.name}/{n}"] = dev
    return out
