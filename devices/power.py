"""Power of a device: idle, busy by kernel class and utilisation, and under a power cap.

**The model.** A device draws ``idle_W`` when nothing runs on it. A busy interval draws

``P(u) = memory_W + (limit_W - memory_W) * u``

where ``u`` in [0, 1] is the interval's *compute utilisation*: its achieved FLOP/s over
the compute roof the clock model gives the device (peak x the catalogue's large-GEMM
efficiency x the run's clock ratio, :func:`compute_roof_flops`). A kernel that only
streams memory (decode attention, elementwise, a GEMV) has ``u`` near 0 and draws
``memory_W``; a compute-bound GEMM or prefill has ``u = 1`` and holds the board at its
power limit, which is what the sustained clock ratio of :mod:`devices.sustained` measures
(Bekman's MSMF: large matmuls back to back keep the board at its limit; Splitwise,
ISCA'24, section III: the prompt phase runs near the power limit, token generation far
below it). Communication kernels count as memory-bound. ``memory_W = idle_W +
memory_activity x (tdp_W - idle_W)``. CPUs have ``memory_W = limit_W`` (a busy socket
draws its TDP). The coefficients are ``devices/power.yaml``, each with its source.

**Power cap** (``power_cap_w`` of a cluster device, :class:`devices.cluster.DeviceConfig`).
One mechanism lowers clocks and power together: under a cap ``C`` below the TDP the board
cannot hold a compute-bound kernel at its TDP clock, so its compute roofs run at

``clock = ((C - idle_W) / (tdp_W - idle_W)) ** (1 / dvfs_exponent)``

of the uncapped clock (:func:`cap_clock_ratio`; the factor multiplies the clock regime's
ratio where the kernel fits apply it, :func:`devices.kernels.kernel_fits`, and the roofline
peaks, :mod:`devices.roofline`), and ``limit_W`` becomes ``C``. Memory-bound kernels keep
their clock and their draw (``memory_W``, clipped to ``C``): a cap only costs time where
the chip would draw more than it (Ma et al. 2026, "The Illusion of Power Capping in LLM
Decode": decode never reaches an H200's cap).

Energy is integrated from the busy intervals by :mod:`devices.energy`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hetsim.devices import fit_overrides
from hetsim.devices.spec import DeviceSpec

POWER_YAML = Path(__file__).resolve().parent / "power.yaml"


@dataclass(frozen=True)
class Coefficient:
    """One named power coefficient: its value and the measurement it comes from."""

    value: float
    source: str


@dataclass(frozen=True)
class PowerTable:
    """``devices/power.yaml``: defaults per device kind, host-side figures, per-device
    entries (``idle_W``, ``memory_activity``, ``dvfs_exponent``)."""

    gpu: dict[str, Coefficient]
    cpu: dict[str, Coefficient]
    dram_W_per_GiB: Coefficient
    nic_W: Coefficient
    devices: dict[str, dict[str, Coefficient]]
    inventory_only: dict[str, dict[str, Coefficient]]

    def coefficient(self, device: str, kind: str, name: str) -> Coefficient | None:
        """``name`` for ``device`` (its own entry first, then its kind's default)."""
        own = self.devices.get(device, {}).get(name)
        if own is not None:
            return own
        return (self.cpu if kind == "cpu" else self.gpu).get(name)


def _coefficient(raw: Any, where: str) -> Coefficient:
    if not isinstance(raw, dict) or "value" not in raw:
        raise ValueError(f"power.yaml: {where}: needs a value and a source")
    value = float(raw["value"])
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"power.yaml: {where}.value: {value} must be finite and >= 0")
    source = str(raw.get("source", "")).strip()
    if not source:
        raise ValueError(f"power.yaml: {where}.source: empty (every coefficient names its source)")
    return Coefficient(value, source)


@functools.cache
def power_table() -> PowerTable:
    """The shipped power coefficients (a bad entry is one error naming the field)."""
    raw = yaml.safe_load(POWER_YAML.read_text(encoding="utf-8")) or {}
    d = raw.get("defaults") or {}

    def section(entries: Any, where: str) -> dict[str, Coefficient]:
        return {str(k): _coefficient(v, f"{where}.{k}") for k, v in (entries or {}).items()}

    return PowerTable(
        gpu=section(d.get("gpu"), "defaults.gpu"),
        cpu=section(d.get("cpu"), "defaults.cpu"),
        dram_W_per_GiB=_coefficient(d.get("dram_W_per_GiB"), "defaults.dram_W_per_GiB"),
        nic_W=_coefficient(d.get("nic_W"), "defaults.nic_W"),
        devices={
            str(name): section(entry, f"devices.{name}")
            for name, entry in (raw.get("devices") or {}).items()
        },
        inventory_only={
            str(name): section(entry, f"inventory_only.{name}")
            for name, entry in (raw.get("inventory_only") or {}).items()
        },
    )


@dataclass(frozen=True)
class PowerModel:
    """Power draw of one device in a run, in W (module doc). ``limit_W`` is the power
    limit in effect (the TDP, or the run's cap); ``clock_ratio`` the factor the cap puts
    on compute roofs (1.0 uncapped)."""

    device: str
    kind: str
    idle_W: float
    memory_W: float
    limit_W: float
    tdp_W: float
    clock_ratio: float = 1.0

    def busy_W(self, utilisation: float) -> float:
        """Draw of a busy interval of compute utilisation ``utilisation`` (clipped to
        [0, 1])."""
        u = 0.0 if utilisation <= 0 else (1.0 if utilisation >= 1 else utilisation)
        return self.memory_W + (self.limit_W - self.memory_W) * u

    def interval_J(self, duration_s: float, compute_s: float = 0.0) -> float:
        """Energy above idle of a busy interval of ``duration_s`` whose kernels would take
        ``compute_s`` at the full compute roof (``compute_s / duration_s`` = utilisation,
        at most 1): the integral of ``P(u) - idle_W``, exact for the linear model."""
        if duration_s <= 0:
            return 0.0
        c = duration_s if compute_s > duration_s else max(compute_s, 0.0)
        return (self.memory_W - self.idle_W) * duration_s + (self.limit_W - self.memory_W) * c


def cap_clock_ratio(
    idle_W: float, tdp_W: float, cap_W: float | None, dvfs_exponent: float
) -> float:
    """Factor a power cap ``cap_W`` puts on compute roofs (module doc); 1.0 without a
    cap or with one at or above the TDP. ValueError for a cap at or below idle power."""
    if cap_W is None or tdp_W <= 0 or cap_W >= tdp_W:
        return 1.0
    if cap_W <= idle_W:
        raise ValueError(f"power_cap_w: {cap_W} W is not above the device's idle {idle_W:.1f} W")
    return float(((cap_W - idle_W) / (tdp_W - idle_W)) ** (1.0 / dvfs_exponent))


def power_model(spec: DeviceSpec) -> PowerModel:
    """The power model of ``spec`` (its ``power_cap_w`` applied) from ``power.yaml``.

    A device without a TDP in the catalogue (an ideal server, a laptop CPU) draws 0 W."""
    tab = power_table()
    tdp = float(spec.tdp_w)
    kind = "cpu" if spec.kind == "cpu" else "gpu"
    if tdp <= 0:
        return PowerModel(spec.name, spec.kind, 0.0, 0.0, 0.0, 0.0)

    over = dict(spec.power_overrides)

    def value(name: str, default: float) -> float:
        if name in over:
            return over[name]
        refit = fit_overrides.gpu_power(name) if kind == "gpu" else None
        if refit is not None:  # a cross-validation fold (devices/fit_overrides.py)
            return refit
        c = tab.coefficient(spec.name, kind, name)
        return default if c is None else c.value

    own_idle = tab.devices.get(spec.name, {}).get("idle_W")
    if own_idle is not None and "idle_fraction" not in over:
        idle = own_idle.value
    else:
        idle = value("idle_fraction", 0.0) * tdp
    cap = spec.power_cap_w
    limit = tdp if cap is None else min(tdp, float(cap))
    if kind == "cpu":
        return PowerModel(spec.name, spec.kind, idle, limit, limit, tdp)
    memory = idle + value("memory_activity", 0.0) * (tdp - idle)
    ratio = cap_clock_ratio(idle, tdp, cap, value("dvfs_exponent", 1.0))
    return PowerModel(spec.name, spec.kind, idle, min(memory, limit), limit, tdp, ratio)


POWER_COEFFICIENTS = ("idle_fraction", "memory_activity", "dvfs_exponent")
"""Coefficients a run may set (``cluster.power_coefficients``); for CPUs only
``idle_fraction`` applies."""


def type_power_model(
    type_name: str, cap_W: float | None = None, overrides: tuple[tuple[str, float], ...] = ()
) -> PowerModel:
    """The power model of a GPU type by name: a catalogue device's (:func:`power_model`),
    or for a type only the cluster domain's inventories name (``inventory_only`` of
    ``power.yaml``) the GPU defaults on its datasheet board power. KeyError if neither."""
    from dataclasses import replace

    from hetsim.simulator import registry

    if type_name in registry.device_types:
        spec = registry.device_types.get(type_name)
        if cap_W is not None and cap_W < spec.tdp_w:
            spec = replace(spec, power_cap_w=float(cap_W))
        return power_model(replace(spec, power_overrides=overrides))
    entry = power_table().inventory_only.get(type_name)
    if entry is None or "tdp_W" not in entry:
        raise KeyError(f"GPU type {type_name!r} has no power data (devices/power.yaml)")
    spec = DeviceSpec(type_name, type_name, "", "gpu", {"fp16": 1.0}, 0, 1.0,
                      tdp_w=entry["tdp_W"].value, power_overrides=overrides,
                      power_cap_w=None if cap_W is None else float(cap_W))  # fmt: skip
    return power_model(spec)


def cluster_duty_cycle() -> float:
    """Share of an allocated GPU's time with a kernel running, for jobs known only by
    their GPU time (``defaults.gpu.cluster_duty_cycle``)."""
    c = power_table().gpu.get("cluster_duty_cycle")
    return 1.0 if c is None else c.value


def cap_ratio(spec: DeviceSpec) -> float:
    """The compute-clock factor of ``spec``'s power cap (1.0 without one)."""
    if spec.power_cap_w is None:
        return 1.0
    return power_model(spec).clock_ratio


def compute_roof_flops(spec: DeviceSpec, dtype: str, clock_ratio: float = 1.0) -> float:
    """FLOP/s at which a kernel of ``dtype`` is compute-bound on ``spec`` (u = 1): peak x
    the catalogue's large-GEMM efficiency x ``clock_ratio`` (the run's clock regime and cap,
    as the kernel fits price it)."""
    try:
        peak = spec.peak(dtype)
    except KeyError:
        peak = max(spec.peak_flops.values(), default=0.0)
    return peak * spec.compute_curve(dtype).max_eff * clock_ratio


def dram_W(memory_bytes: int) -> float:
    """Background power of ``memory_bytes`` of installed host DRAM."""
    return power_table().dram_W_per_GiB.value * memory_bytes / 2**30


def nic_W() -> float:
    """Power of one scale-out NIC."""
    return power_table().nic_W.value
