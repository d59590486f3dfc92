"""Loading of the shipped device, link and fabric catalogues into typed specs.

``catalogue.yaml`` holds device types, ``links.yaml`` link types (``links:``) and
collective fabrics (``fabrics:``). Every number there carries its source; this module
only checks and converts. A bad entry raises :class:`CatalogueError` naming the file and
the field path (``catalogue.yaml: devices.h100-sxm.memory_bytes: must be > 0``).

Numbers may be written as YAML numbers or as strings such as ``312e12`` (YAML 1.1 reads
an exponent without a decimal point as a string, so both are accepted).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast, get_args

import yaml

from hetsim.devices.collectives import AlgorithmFit, CollectiveFabric
from hetsim.devices.spec import (
    DeviceKind,
    DeviceSpec,
    EfficiencyCurve,
    LinkKind,
    LinkSpec,
    PricePreset,
)
from hetsim.simulator import diskcache, registry


def _yaml_load(text: str) -> Any:
    """``yaml.safe_load`` with libyaml's parser when present (same objects, ~10x faster)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


DATA_DIR = Path(__file__).resolve().parent
_SPEC_FILE = DATA_DIR / "spec.py"
_COLLECTIVES_FILE = DATA_DIR / "collectives.py"
DEVICE_FILE = DATA_DIR / "catalogue.yaml"
LINK_FILE = DATA_DIR / "links.yaml"

_CURVE_KEYS = ("max_eff", "half_size", "exponent")
_DEVICE_KEYS = {
    "display_name",
    "vendor",
    "kind",
    "peak_flops",
    "memory_bytes",
    "memory_bandwidth_Bps",
    "memory_type",
    "compute_efficiency",
    "memory_efficiency",
    "launch_overhead_s",
    "cores",
    "pcie_gen",
    "pcie_lanes",
    "scaleup_link",
    "scaleup_fabric",
    "tdp_w",
    "prices",
    "source",
    "notes",
}
_LINK_KEYS = {
    "display_name",
    "kind",
    "bandwidth_Bps",
    "latency_s",
    "efficiency",
    "sharing",
    "source",
    "notes",
}
_FABRIC_KEYS = {"display_name", "bandwidth_Bps", "mesh_links", "algorithms", "source", "notes"}
_PRICE_KEYS = {"usd_per_hour", "provider", "date", "source"}


class CatalogueError(ValueError):
    """A catalogue file entry that is missing, mistyped or out of range."""


def _join(path: str, key: str) -> str:
    """Dotted field path ``path.key`` (just ``key`` at the top level)."""
    return f"{path}.{key}" if path else key


class _Node:
    """One mapping of a catalogue file with its field path, for precise error messages."""

    def __init__(self, file: str, path: str, data: object) -> None:
        self.file = file
        self.path = path
        if not isinstance(data, Mapping):
            self.fail("must be a mapping")
        self.data: Mapping[str, Any] = cast(Mapping[str, Any], data)

    def fail(self, message: str, key: str | None = None) -> Any:
        """Raise CatalogueError for this node (or its field ``key``)."""
        where = _join(self.path, key) if key else self.path
        raise CatalogueError(f"{self.file}: {where}: {message}")

    def check_keys(self, allowed: set[str] | tuple[str, ...], required: tuple[str, ...]) -> None:
        """Reject unknown keys (typos) and missing required keys."""
        for key in self.data:
            if key not in allowed:
                self.fail(f"unknown field; valid: {', '.join(sorted(allowed))}", str(key))
        for key in required:
            if key not in self.data:
                self.fail("missing required field", key)

    def child(self, key: str) -> _Node:
        """The sub-mapping at ``key``."""
        return _Node(self.file, _join(self.path, key), self.data.get(key))

    def number(self, key: str, default: float | None = None, low: float | None = None) -> float:
        """A finite float at ``key`` (> ``low`` if given; >= 0 always)."""
        raw = self.data.get(key, default)
        if raw is None:
            return cast(float, self.fail("missing required field", key))
        try:
            value = float(raw) if not isinstance(raw, bool) else math.nan
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value):
            self.fail(f"must be a number, got {raw!r}", key)
        if low is not None and not value > low:
            self.fail(f"must be > {low:g}", key)
        if value < 0:
            self.fail("must be >= 0", key)
        return value

    def integer(self, key: str, default: int | None = None, low: int | None = None) -> int:
        """A whole number at ``key``."""
        value = self.number(key, default, low)
        if not value.is_integer():
            self.fail(f"must be a whole number, got {self.data.get(key)!r}", key)
        return int(value)

    def text(self, key: str, default: str | None = None, choices: tuple[str, ...] = ()) -> str:
        """A string at ``key`` (one of ``choices`` if given)."""
        raw = self.data.get(key, default)
        if raw is None:
            return cast(str, self.fail("missing required field", key))
        if not isinstance(raw, str | int | float) or isinstance(raw, bool):
            self.fail(f"must be a string, got {raw!r}", key)
        value = str(raw)
        if choices and value not in choices:
            self.fail(f"must be one of {', '.join(choices)}, got {value!r}", key)
        return value


def _curve(node: _Node, extra: tuple[str, ...] = ()) -> EfficiencyCurve:
    """An EfficiencyCurve from ``{max_eff, half_size, exponent}``."""
    node.check_keys(_CURVE_KEYS + extra, ("max_eff",))
    max_eff = node.number("max_eff", low=0.0)
    if max_eff > 1.5:
        node.fail("must be <= 1.5", "max_eff")
    return EfficiencyCurve(
        max_eff=max_eff,
        half_size=node.number("half_size", 0.0),
        exponent=node.number("exponent", 1.0, low=0.0),
    )


def _price(node: _Node) -> PricePreset:
    """A dated, sourced price preset."""
    node.check_keys(_PRICE_KEYS, tuple(sorted(_PRICE_KEYS)))
    return PricePreset(
        usd_per_hour=node.number("usd_per_hour", low=0.0),
        provider=node.text("provider"),
        date=node.text("date"),
        source=node.text("source"),
    )


def _mapping_of(node: _Node, key: str) -> dict[str, _Node]:
    """Sub-nodes of the (optional) mapping at ``key``, by name."""
    if key not in node.data:
        return {}
    parent = node.child(key)
    return {str(name): parent.child(str(name)) for name in parent.data}


def _device(node: _Node, name: str) -> DeviceSpec:
    """One device entry as a DeviceSpec."""
    required = ("display_name", "vendor", "kind", "peak_flops", "memory_bytes")
    node.check_keys(_DEVICE_KEYS, (*required, "memory_bandwidth_Bps", "source"))
    peaks = node.child("peak_flops")
    if not peaks.data:
        peaks.fail("must list at least one dtype")
    memory_curve = EfficiencyCurve(0.8)
    if "memory_efficiency" in node.data:
        memory_curve = _curve(node.child("memory_efficiency"))
    return DeviceSpec(
        name=name,
        display_name=node.text("display_name"),
        vendor=node.text("vendor"),
        kind=cast(DeviceKind, node.text("kind", choices=get_args(DeviceKind))),
        peak_flops={str(d): peaks.number(str(d), low=0.0) for d in peaks.data},
        memory_bytes=node.integer("memory_bytes", low=0),
        memory_bandwidth_Bps=node.number("memory_bandwidth_Bps", low=0.0),
        memory_type=node.text("memory_type", ""),
        compute_efficiency={
            d: _curve(c) for d, c in _mapping_of(node, "compute_efficiency").items()
        },
        memory_efficiency=memory_curve,
        launch_overhead_s=node.number("launch_overhead_s", 0.0),
        cores=node.integer("cores", 0),
        pcie_gen=node.integer("pcie_gen", 0),
        pcie_lanes=node.integer("pcie_lanes", 16),
        scaleup_link=node.text("scaleup_link", ""),
        scaleup_fabric=node.text("scaleup_fabric", ""),
        tdp_w=node.number("tdp_w", 0.0),
        prices={p: _price(c) for p, c in _mapping_of(node, "prices").items()},
        source=node.text("source"),
        notes=node.text("notes", ""),
    )


def _link(node: _Node, name: str) -> LinkSpec:
    """One link entry as a LinkSpec."""
    node.check_keys(_LINK_KEYS, ("display_name", "kind", "bandwidth_Bps", "latency_s", "source"))
    curve = _curve(node.child("efficiency")) if "efficiency" in node.data else EfficiencyCurve(1.0)
    sharing = node.text("sharing", "fifo", choices=("fifo", "fair"))
    return LinkSpec(
        name=name,
        display_name=node.text("display_name"),
        kind=cast(LinkKind, node.text("kind", choices=get_args(LinkKind))),
        bandwidth_Bps=node.number("bandwidth_Bps", low=0.0),
        latency_s=node.number("latency_s"),
        efficiency=curve,
        sharing="fair" if sharing == "fair" else "fifo",
        source=node.text("source"),
        notes=node.text("notes", ""),
    )


def _fabric(node: _Node, name: str) -> CollectiveFabric:
    """One fabric entry as a CollectiveFabric."""
    node.check_keys(_FABRIC_KEYS, ("display_name", "bandwidth_Bps", "algorithms", "source"))
    algorithms = {}
    for algo, sub in _mapping_of(node, "algorithms").items():
        if algo not in ("ring", "tree", "nvls"):
            sub.fail("unknown algorithm; valid: nvls, ring, tree")
        fit = AlgorithmFit(
            alpha_s=sub.number("alpha_s"),
            efficiency=_curve(sub, ("alpha_s", "base_s")),
            base_s=sub.number("base_s", 0.0),
        )
        algorithms[algo] = fit
    if "ring" not in algorithms:
        node.fail("needs a 'ring' entry", "algorithms")
    return CollectiveFabric(
        name=name,
        display_name=node.text("display_name"),
        bandwidth_Bps=node.number("bandwidth_Bps", low=0.0),
        algorithms=algorithms,
        mesh_links=node.integer("mesh_links", 0),
        source=node.text("source"),
        notes=node.text("notes", ""),
    )


def _entries(path: Path, section: str) -> dict[str, _Node]:
    """The named entries of ``section`` in the YAML file at ``path``."""
    try:
        data = _yaml_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CatalogueError(f"{path.name}: not valid YAML: {exc}") from None
    if not isinstance(data, Mapping) or section not in data:
        raise CatalogueError(f"{path.name}: {section}: missing top-level section")
    return _mapping_of(_Node(path.name, "", data), section) if data[section] else {}


def _load(path: Path, section: str, build: Any) -> dict[str, Any]:
    """Build every entry of ``section``; ValueErrors from spec checks get the field path.

    The specs are kept between processes (:mod:`simulator.diskcache`), keyed by the
    content of ``path`` and of the modules that parse and define them: an edited
    catalogue, shipped or the user's, is parsed again."""
    return diskcache.cached(
        "catalogue",
        f"{section}:{build.__name__}",
        lambda: _build_all(path, section, build),
        [path, __file__, _SPEC_FILE, _COLLECTIVES_FILE],
    )


def _build_all(path: Path, section: str, build: Any) -> dict[str, Any]:
    out = {}
    for name, node in _entries(path, section).items():
        try:
            out[name] = build(node, name)
        except CatalogueError:
            raise
        except ValueError as exc:
            raise CatalogueError(f"{path.name}: {node.path}: {exc}") from None
    return out


def load_device_catalogue(path: str | Path = DEVICE_FILE) -> dict[str, DeviceSpec]:
    """Device types of a catalogue file (``devices:`` section), by slug."""
    return _load(Path(path), "devices", _device)


def load_link_catalogue(path: str | Path = LINK_FILE) -> dict[str, LinkSpec]:
    """Link types of a links file (``links:`` section), by slug."""
    return _load(Path(path), "links", _link)


def load_fabric_catalogue(path: str | Path = LINK_FILE) -> dict[str, CollectiveFabric]:
    """Collective fabrics of a links file (``fabrics:`` section), by slug."""
    return _load(Path(path), "fabrics", _fabric)


@functools.cache
def shipped_devices() -> dict[str, DeviceSpec]:
    """The shipped device catalogue (loaded once; specs are immutable definitions)."""
    return load_device_catalogue(DEVICE_FILE)


@functools.cache
def shipped_links() -> dict[str, LinkSpec]:
    """The shipped link catalogue (loaded once)."""
    return load_link_catalogue(LINK_FILE)


@functools.cache
def shipped_fabrics() -> dict[str, CollectiveFabric]:
    """The shipped collective fabrics (loaded once)."""
    return load_fabric_catalogue(LINK_FILE)


def device_spec(name: str) -> DeviceSpec:
    """The DeviceSpec named ``name`` (shipped or from a user catalogue)."""
    register_catalogue()
    return cast(DeviceSpec, registry.device_types.get(name))


def link_spec(name: str) -> LinkSpec:
    """The LinkSpec named ``name`` (shipped or from a user catalogue)."""
    register_catalogue()
    return cast(LinkSpec, registry.link_types.get(name))


def fabric_spec(name: str) -> CollectiveFabric:
    """The CollectiveFabric named ``name`` (shipped or from a user catalogue)."""
    register_catalogue()
    return cast(CollectiveFabric, registry.fabrics.get(name))


def _headline_peak(spec: DeviceSpec) -> str:
    """The headline peak of a device: bf16, else fp16, fp32, int8 or its first dtype."""
    for dtype in ("bf16", "fp16", "fp32", "int8", *spec.peak_flops):
        if dtype in spec.peak_flops:
            unit = "TOP/s" if dtype == "int8" else "TFLOP/s"
            return f"{spec.peak_flops[dtype] / 1e12:g} {unit} {dtype}"
    return "no peak"


def device_doc(spec: DeviceSpec) -> str:
    """One line for ``hetsim list``: name, headline peak, memory, bandwidth."""
    return (
        f"{spec.display_name}: {_headline_peak(spec)}, {spec.memory_bytes / 2**30:g} GiB, "
        f"{spec.memory_bandwidth_Bps / 1e9:g} GB/s"
    )


def link_doc(spec: LinkSpec) -> str:
    """One line for ``hetsim list``: name, per-direction bandwidth, latency, sharing."""
    return (
        f"{spec.display_name}: {spec.bandwidth_Bps / 1e9:g} GB/s per direction, "
        f"{spec.latency_s * 1e6:g} us latency, {spec.sharing} sharing"
    )


def fabric_doc(spec: CollectiveFabric) -> str:
    """One line for ``hetsim list``: name, bandwidth, algorithms."""
    return f"{spec.display_name}: {spec.bandwidth_Bps / 1e9:g} GB/s, {', '.join(spec.algorithms)}"


def register(table: registry.Registry[Any], specs: Mapping[str, Any], doc: Any) -> None:
    """Add each spec unless already registered as an equal spec; a clash is an error."""
    for name, spec in specs.items():
        if name in table:
            if table.get(name) != spec:
                raise ValueError(f"{table.kind} {name!r} is registered with a different spec")
            continue
        table.add(name, spec, doc=doc(spec), params={})


def register_catalogue() -> None:
    """Register every shipped device and link type (idempotent)."""
    if _registered:
        return
    register(registry.device_types, shipped_devices(), device_doc)
    register(registry.link_types, shipped_links(), link_doc)
    register(registry.fabrics, shipped_fabrics(), fabric_doc)
    _registered.append(True)


_registered: list[bool] = []
