"""Disk (NVMe) tier: a storage device's read and write curves, loaded from ``storage.yaml``.

One direction of a drive (read or write) is a per-request latency ``latency_s`` and a
peak rate ``peak_Bps``. With ``queue_depth`` requests of ``request_bytes`` outstanding
(Little's law), the achieved bandwidth is

    bandwidth(r, q) = min(peak, q r / (latency + r / peak))

so small requests at a shallow queue are latency-bound and large or deep ones reach the
peak. A transfer of ``n`` bytes alone on the drive takes ``latency + n / bandwidth``.
The form is fitted to published fio points (``devices/data/nvme_points.csv``;
``python -m hetsim.devices.storage_calibration``). Reads and writes share the drive
(one FIFO resource in the workloads that use it): a write occupies the time a read would.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

STORAGE_FILE = Path(__file__).resolve().parent / "storage.yaml"
_DIRECTION_KEYS = {"peak_Bps", "latency_s"}
_KEYS = {"display_name", "kind", "capacity_bytes", "read", "write", "source", "notes"}


class StorageError(ValueError):
    """A storage catalogue entry or override that is missing, mistyped or out of range."""


@dataclass(frozen=True)
class DiskDirection:
    """One direction (read or write) of a drive: peak rate and per-request latency."""

    peak_Bps: float
    latency_s: float

    def bandwidth_Bps(self, request_bytes: float, queue_depth: float) -> float:
        """Achieved rate with ``queue_depth`` requests of ``request_bytes`` in flight."""
        if request_bytes <= 0 or queue_depth <= 0:
            raise ValueError("request_bytes and queue_depth must be > 0")
        per_request_s = self.latency_s + request_bytes / self.peak_Bps
        return min(self.peak_Bps, queue_depth * request_bytes / per_request_s)

    def transfer_s(self, nbytes: float, request_bytes: float, queue_depth: float) -> float:
        """``latency + nbytes / bandwidth`` for ``nbytes`` in requests of at most
        ``request_bytes`` (a transfer smaller than one request is one request); 0 for 0."""
        if nbytes <= 0:
            return 0.0
        r = min(float(request_bytes), float(nbytes))
        return self.latency_s + nbytes / self.bandwidth_Bps(r, queue_depth)


@dataclass(frozen=True)
class StorageSpec:
    """A storage device type of the catalogue (``devices/storage.yaml``)."""

    name: str
    display_name: str
    kind: str
    capacity_bytes: float
    read: DiskDirection
    write: DiskDirection
    source: str = ""
    notes: str = ""


def _number(where: str, raw: Any, low_exclusive: bool) -> float:
    try:
        x = float(raw)
    except (TypeError, ValueError):
        raise StorageError(f"{where}: must be a number, got {raw!r}") from None
    if x != x or x in (float("inf"), float("-inf")) or x < 0 or (low_exclusive and x == 0):
        raise StorageError(f"{where}: must be {'> 0' if low_exclusive else '>= 0'}, got {raw!r}")
    return x


def _direction(where: str, raw: Any) -> DiskDirection:
    if not isinstance(raw, dict):
        raise StorageError(f"{where}: must be a mapping with peak_Bps and latency_s")
    for key in raw:
        if key not in _DIRECTION_KEYS:
            raise StorageError(f"{where}.{key}: unknown field; valid: latency_s, peak_Bps")
    for key in _DIRECTION_KEYS:
        if key not in raw:
            raise StorageError(f"{where}.{key}: missing required field")
    return DiskDirection(
        peak_Bps=_number(f"{where}.peak_Bps", raw["peak_Bps"], True),
        latency_s=_number(f"{where}.latency_s", raw["latency_s"], False),
    )


def parse_storage(name: str, raw: Any, where: str) -> StorageSpec:
    """One catalogue entry; StorageError names ``where`` and the field."""
    if not isinstance(raw, dict):
        raise StorageError(f"{where}: must be a mapping")
    for key in raw:
        if key not in _KEYS:
            raise StorageError(f"{where}.{key}: unknown field; valid: {', '.join(sorted(_KEYS))}")
    for key in ("kind", "capacity_bytes", "read", "write"):
        if key not in raw:
            raise StorageError(f"{where}.{key}: missing required field")
    if raw["kind"] != "nvme":
        raise StorageError(f"{where}.kind: must be nvme, got {raw['kind']!r}")
    return StorageSpec(
        name=name,
        display_name=str(raw.get("display_name", name)),
        kind="nvme",
        capacity_bytes=_number(f"{where}.capacity_bytes", raw["capacity_bytes"], True),
        read=_direction(f"{where}.read", raw["read"]),
        write=_direction(f"{where}.write", raw["write"]),
        source=str(raw.get("source", "")),
        notes=str(raw.get("notes", "")),
    )


@functools.lru_cache(maxsize=1)
def storage_catalogue() -> dict[str, StorageSpec]:
    """Every drive of ``devices/storage.yaml``, by name."""
    data = yaml.safe_load(STORAGE_FILE.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("storage"), dict):
        raise StorageError("storage.yaml: storage: must be a mapping of drive types")
    return {
        str(k): parse_storage(str(k), v, f"storage.yaml: storage.{k}")
        for k, v in data["storage"].items()
    }


def storage_spec(name: str, overrides: dict[str, Any] | None = None) -> StorageSpec:
    """The drive ``name`` with ``overrides`` (``{"read": {"peak_Bps": 1e9}}``) applied;
    ValueError names the unknown drive or the bad field (prefixed ``disk.``)."""
    cat = storage_catalogue()
    if name not in cat:
        raise StorageError(f"disk.type: unknown drive {name!r}; known: {', '.join(sorted(cat))}")
    spec = cat[name]
    if not overrides:
        return spec
    for key in overrides:
        if key not in ("read", "write", "capacity_bytes"):
            raise StorageError(
                f"disk.{key}: unknown field; valid: capacity_bytes, read, write, type"
            )

    def merged(direction: str, base: DiskDirection) -> DiskDirection:
        if direction not in overrides:
            return base
        if not isinstance(overrides[direction], dict):
            raise StorageError(f"disk.{direction}: must be a mapping")
        raw = {"peak_Bps": base.peak_Bps, "latency_s": base.latency_s, **overrides[direction]}
        return _direction(f"disk.{direction}", raw)

    out = replace(spec, read=merged("read", spec.read), write=merged("write", spec.write))
    if "capacity_bytes" in overrides:
        cap = _number("disk.capacity_bytes", overrides["capacity_bytes"], True)
        out = replace(out, capacity_bytes=cap)
    return out
