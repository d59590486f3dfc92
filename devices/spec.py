"""Typed specs of device and link types, as loaded from the catalogue files.

Specs are frozen data: a device type's peaks, memory, efficiencies, power and price
presets, each with the source it came from. Everything that computes a time from a spec
lives in :mod:`devices.roofline` (compute) and :mod:`devices.link` (copies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

DeviceKind = Literal["gpu", "npu", "cpu", "tpu", "server"]
LinkKind = Literal["pcie", "nvlink", "network", "infinity-fabric", "hccs", "ideal"]


@dataclass(frozen=True)
class EfficiencyCurve:
    """Achieved fraction of peak as a function of problem size (FLOPs or bytes).

    ``eff(x) = max_eff * x^k / (x^k + half_size^k)``: a Hill curve that rises from 0 for
    tiny problems to ``max_eff`` for large ones, reaching half of it at ``half_size``.
    ``half_size = 0`` gives the constant ``max_eff``. Fitted by :mod:`devices.calibration`.
    """

    max_eff: float
    half_size: float = 0.0
    exponent: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 < self.max_eff <= 1.5:
            raise ValueError(f"max_eff must be in (0, 1.5], got {self.max_eff}")
        if self.half_size < 0 or self.exponent <= 0:
            raise ValueError("half_size must be >= 0 and exponent > 0")

    def __call__(self, size: float) -> float:
        """Efficiency at problem size ``size`` (same unit as ``half_size``)."""
        if self.half_size == 0.0:
            return self.max_eff
        if size <= 0:
            return self.max_eff  # no work: the caller's time is 0 anyway
        ratio = (self.half_size / size) ** self.exponent
        return self.max_eff / (1.0 + ratio)

    def array(self, sizes: np.ndarray) -> np.ndarray:
        """:meth:`__call__` over an array of sizes (same numbers, vectorised)."""
        sizes = np.asarray(sizes, dtype=float)
        if self.half_size == 0.0:
            return np.full(sizes.shape, self.max_eff)
        safe = np.where(sizes > 0, sizes, 1.0)
        eff = self.max_eff / (1.0 + (self.half_size / safe) ** self.exponent)
        return np.where(sizes > 0, eff, self.max_eff)


@dataclass(frozen=True)
class PricePreset:
    """An on-demand price of one device-hour, dated and sourced (an overridable default)."""

    usd_per_hour: float
    provider: str
    date: str
    source: str


@dataclass(frozen=True)
class DeviceSpec:
    """One device type: peaks per dtype, memory, efficiencies, power, prices, sources."""

    name: str
    display_name: str
    vendor: str
    kind: DeviceKind
    peak_flops: dict[str, float]
    memory_bytes: int
    memory_bandwidth_Bps: float
    memory_type: str = ""
    compute_efficiency: dict[str, EfficiencyCurve] = field(default_factory=dict)
    memory_efficiency: EfficiencyCurve = EfficiencyCurve(0.8)
    launch_overhead_s: float = 0.0
    cores: int = 0
    pcie_gen: int = 0
    pcie_lanes: int = 16
    scaleup_link: str = ""
    #: collective fabric of a node's devices of this type (tensor-parallel all-reduce):
    #: a fabric of links.yaml ``fabrics:``, ``pcie`` (a ring over its PCIe generation's
    #: link), ``link`` (a ring over ``scaleup_link``); "" = not known (a run warns)
    scaleup_fabric: str = ""
    tdp_w: float = 0.0
    #: a run's board power limit below the TDP (None: the TDP); set by the cluster from
    #: ``power_cap_w`` and read by :mod:`devices.power` (clock factor and power limit)
    power_cap_w: float | None = None
    #: a run's values of power coefficients (``devices/power.yaml`` names: idle_fraction,
    #: memory_activity, dvfs_exponent), set by the cluster from ``power_coefficients``
    power_overrides: tuple[tuple[str, float], ...] = ()
    prices: dict[str, PricePreset] = field(default_factory=dict)
    source: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        if self.memory_bytes < 0 or self.memory_bandwidth_Bps <= 0:
            raise ValueError(f"{self.name}: memory capacity/bandwidth must be positive")
        for dtype, flops in self.peak_flops.items():
            if not (flops > 0 and math.isfinite(flops)):
                raise ValueError(f"{self.name}: peak_flops[{dtype}] must be > 0")

    def peak(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype``; KeyError naming the dtypes this device has."""
        try:
            return self.peak_flops[dtype]
        except KeyError:
            raise KeyError(
                f"device {self.name} has no {dtype} peak; has {sorted(self.peak_flops)}"
            ) from None

    def compute_curve(self, dtype: str) -> EfficiencyCurve:
        """Compute-efficiency curve for ``dtype`` (falls back to the ``default`` curve)."""
        curve = self.compute_efficiency.get(dtype) or self.compute_efficiency.get("default")
        return curve if curve is not None else EfficiencyCurve(0.7)

    def price(self, preset: str = "default") -> PricePreset:
        """The price preset named ``preset``."""
        try:
            return self.prices[preset]
        except KeyError:
            raise KeyError(f"device {self.name} has no price preset {preset!r}") from None


@dataclass(frozen=True)
class LinkSpec:
    """One link type: per-direction bandwidth, latency, efficiency and sharing discipline.

    ``sharing`` is ``fifo`` for copy engines (PCIe DMA: copies queue and run one at a
    time per engine) and ``fair`` for network fabrics (max-min fair sharing of flows).
    """

    name: str
    display_name: str
    kind: LinkKind
    bandwidth_Bps: float
    latency_s: float
    efficiency: EfficiencyCurve = EfficiencyCurve(1.0)
    sharing: Literal["fifo", "fair"] = "fifo"
    source: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        if self.bandwidth_Bps <= 0 or self.latency_s < 0:
            raise ValueError(f"{self.name}: bandwidth must be > 0 and latency >= 0")

    def effective_bandwidth_Bps(self, nbytes: float) -> float:
        """Achieved bandwidth for one transfer of ``nbytes``."""
        return self.bandwidth_Bps * self.efficiency(nbytes)

    def transfer_time_s(self, nbytes: float) -> float:
        """Alpha-beta time of one transfer alone on the link: latency + bytes / bandwidth."""
        if nbytes < 0:
            raise ValueError(f"negative transfer size {nbytes}")
        if nbytes == 0:
            return self.latency_s
        return self.latency_s + nbytes / self.effective_bandwidth_Bps(nbytes)
