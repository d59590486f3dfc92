"""Roofline cost of one operator on one device type.

``time = max(flops / (peak(dtype) * eff_c(flops)), bytes / (bw * eff_m(bytes))) + launch``

where ``eff_c`` and ``eff_m`` are the device's size-dependent efficiency curves
(:class:`devices.spec.EfficiencyCurve`), fitted to published microbenchmarks by
:mod:`devices.calibration`. A cost model with higher fidelity can replace this module
without touching mechanisms or policies: they only call :func:`op_time_s`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsim.devices.power import cap_ratio
from hetsim.devices.spec import DeviceSpec


@dataclass(frozen=True)
class OpCost:
    """The parts of an operator's roofline time on one device."""

    compute_s: float
    memory_s: float
    launch_s: float

    @property
    def time_s(self) -> float:
        """Total time: the slower of compute and memory, plus launch overhead."""
        return max(self.compute_s, self.memory_s) + self.launch_s

    @property
    def bound(self) -> str:
        """``compute`` or ``memory``: which roof limits this op."""
        return "compute" if self.compute_s >= self.memory_s else "memory"


def _peak(spec: DeviceSpec, dtype: str) -> float:
    """Peak FLOP/s of ``dtype`` at the clock a power cap leaves (:mod:`devices.power`)."""
    if spec.power_cap_w is None:
        return spec.peak(dtype)
    return spec.peak(dtype) * cap_ratio(spec)


def op_cost(spec: DeviceSpec, flops: float, nbytes: float, dtype: str = "fp16") -> OpCost:
    """Roofline breakdown of an op with ``flops`` FLOPs moving ``nbytes`` bytes."""
    if flops < 0 or nbytes < 0:
        raise ValueError(f"op with negative work: flops={flops}, bytes={nbytes}")
    compute_s = 0.0
    if flops > 0:
        compute_s = flops / (_peak(spec, dtype) * spec.compute_curve(dtype)(flops))
    memory_s = 0.0
    if nbytes > 0:
        memory_s = nbytes / (spec.memory_bandwidth_Bps * spec.memory_efficiency(nbytes))
    return OpCost(compute_s, memory_s, spec.launch_overhead_s if (flops or nbytes) else 0.0)


def op_time_s(spec: DeviceSpec, flops: float, nbytes: float, dtype: str = "fp16") -> float:
    """Roofline time in seconds of one op (see module docstring)."""
    return op_cost(spec, flops, nbytes, dtype).time_s


def op_times_s(
    spec: DeviceSpec, flops: np.ndarray, nbytes: np.ndarray, dtype: str = "fp16"
) -> np.ndarray:
    """:func:`op_time_s` of many ops at once (numpy arrays in, seconds out)."""
    flops = np.asarray(flops, dtype=float)
    nbytes = np.asarray(nbytes, dtype=float)
    if (flops < 0).any() or (nbytes < 0).any():
        raise ValueError("ops with negative work")
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = np.where(
            flops > 0, flops / (_peak(spec, dtype) * spec.compute_curve(dtype).array(flops)), 0.0
        )
        memory = np.where(
            nbytes > 0,
            nbytes / (spec.memory_bandwidth_Bps * spec.memory_efficiency.array(nbytes)),
            0.0,
        )
    launch = np.where((flops > 0) | (nbytes > 0), spec.launch_overhead_s, 0.0)
    return np.maximum(compute, memory) + launch


def gemm_flops(m: int, n: int, k: int) -> float:
    """FLOPs of an (m x k) @ (k x n) matrix product: 2mnk."""
    return 2.0 * m * n * k


def gemm_bytes(m: int, n: int, k: int, bytes_per_element: float) -> float:
    """Minimum bytes moved by a GEMM: read A and B, write C once."""
    return bytes_per_element * (m * k + k * n + m * n)
