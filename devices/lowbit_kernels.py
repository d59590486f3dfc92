"""Low-bit weight-only GEMV / small-batch GEMM kernels on a GPU (dequantisation fused).

One kernel call multiplies ``n`` activation rows (tokens, fp16) by an ``m x k`` weight
matrix stored at ``bits`` per weight (the packed values plus their group scales and zeros,
as the format stores them), dequantising in registers. Three kernel families, by how
they are built (``devices/lowbit_kernels.yaml``, fitted by
:mod:`hetsim.devices.lowbit_calibration` on ``devices/data/lowbit_kernel_points.csv``):

- ``gemv``: CUDA-core GEMV with fused dequantisation (FastGEMV, ExLlama v1, AutoGPTQ's
  CUDA kernel, bitsandbytes' k-bit GEMV, llama.cpp's ``mul_mat_vec_q``): each extra
  token repeats the dequantise-and-FMA work on the vector units;
- ``marlin``: Marlin-type W4A16 (tensor-core MMA on dequantised tiles, asynchronous weight
  loads): the per-token work runs on the tensor cores, so time is flat over small batches;
- ``triton-gemm``: GPTQ-triton-style ``tl.dot`` kernels with fused dequantisation, the
  rows padded to 16 (AutoGPTQ's triton path; Mixtral-offloading's and AdapMoE's HQQ
  ``triton_matmul{2,3,4}_transpose``): at batch 1 they are bound by the dequantisation and
  tile work per weight, not by the weight stream.

Time of one call (seconds)::

    bytes  = m k bits / 8 + 2 (n k + n m)                        (weights, fp16 in/out)
    t_mem  = bytes / (bandwidth_fraction x memory_bandwidth_Bps)
    t_ops  = rows x m k x ops_per_weight / peak                  (rows = n, or n padded
                                                                 to pad_rows)
    t      = floor_s + (t_mem^p + t_ops^p)^(1/p)                 (p = SMOOTH_P)

``peak`` is the device's fp32 vector peak (``gemv``, ``triton-gemm``: the CUDA cores,
i.e. SMs x clock x lanes) or its fp16 tensor peak (``marlin``). A hand roofline at
batch 1 with ``floor_s = 0``, ``bandwidth_fraction = 1`` and ``ops_per_weight = 0`` is
the packed bytes over the bandwidth (``tests/test_lowbit_kernels.py``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml

from hetsim.devices.spec import DeviceSpec

KERNEL_FILE = Path(__file__).resolve().parent / "lowbit_kernels.yaml"
SMOOTH_P = 4.0
"""Exponent of the smooth maximum of the memory and work terms (a p-norm: the larger
term dominates, the two add where they are close; 4 keeps the fit differentiable)."""
Peak = Literal["fp32", "fp16_tensor"]
FAMILY_FIELDS = ("bandwidth_fraction", "floor_s", "ops_per_weight", "peak", "pad_rows")


@dataclass(frozen=True)
class LowbitKernel:
    """One low-bit kernel family's parameters (``devices/lowbit_kernels.yaml``)."""

    name: str
    bandwidth_fraction: float
    floor_s: float
    ops_per_weight: float
    peak: Peak = "fp32"
    pad_rows: int = 1
    description: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if not 0.0 < self.bandwidth_fraction <= 1.0:
            raise ValueError(
                f"{self.name}.bandwidth_fraction: {self.bandwidth_fraction} not in (0, 1]"
            )
        if self.floor_s < 0 or self.ops_per_weight < 0 or self.pad_rows < 1:
            raise ValueError(f"{self.name}: floor_s, ops_per_weight >= 0 and pad_rows >= 1")
        if self.peak not in ("fp32", "fp16_tensor"):
            raise ValueError(f"{self.name}.peak: {self.peak!r}; valid: fp32, fp16_tensor")


def peak_flops(spec: DeviceSpec, peak: Peak) -> float:
    """The device rate the work term runs at: fp32 vector or fp16 tensor peak."""
    key = "fp32" if peak == "fp32" else "fp16"
    rate = spec.peak_flops.get(key)
    if not rate:
        raise ValueError(f"gpu_kernel: device {spec.name} has no {key} peak in the catalogue")
    return float(rate)


def kernel_time_s(
    kernel: LowbitKernel,
    bandwidth_Bps: float,
    peak: float,
    m: float,
    k: float,
    n: Any,
    bits: float,
) -> Any:
    """Seconds of one call at ``n`` tokens (scalar or array; 0 tokens cost 0)."""
    n = np.asarray(n, dtype=float)
    weights = m * k
    nbytes = weights * bits / 8.0 + 2.0 * n * (k + m)
    t_mem = nbytes / (kernel.bandwidth_fraction * bandwidth_Bps)
    rows = np.ceil(n / kernel.pad_rows) * kernel.pad_rows
    t_ops = rows * weights * kernel.ops_per_weight / peak
    t = (t_mem**SMOOTH_P + t_ops**SMOOTH_P) ** (1.0 / SMOOTH_P)
    return np.where(n > 0, kernel.floor_s + t, 0.0)


def device_time_s(
    kernel: LowbitKernel, spec: DeviceSpec, m: float, k: float, n: Any, bits: float
) -> Any:
    """:func:`kernel_time_s` on a catalogue device."""
    return kernel_time_s(
        kernel, spec.memory_bandwidth_Bps, peak_flops(spec, kernel.peak), m, k, n, bits
    )


@functools.cache
def _table(path: Path = KERNEL_FILE) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("families"), dict):
        raise ValueError(f"{path}: needs a 'families' mapping")
    return data


def family_names() -> tuple[str, ...]:
    """The families of ``devices/lowbit_kernels.yaml``."""
    return tuple(sorted(_table()["families"]))


def lowbit_kernel(name: str, overrides: dict[str, Any] | None = None) -> LowbitKernel:
    """Family ``name`` from ``devices/lowbit_kernels.yaml``, with ``overrides`` (a
    scenario's ``gpu_kernels``: any of ``FAMILY_FIELDS``) applied; errors name the field."""
    fams = _table()["families"]
    if name not in fams:
        raise ValueError(f"gpu_kernel: unknown family {name!r}; valid: {', '.join(sorted(fams))}")
    raw = fams[name]
    fields = {f: raw[f] for f in FAMILY_FIELDS if f in raw}
    kernel = LowbitKernel(
        name, description=str(raw.get("description", "")), source=str(raw.get("source", "")),
        **fields,
    )  # fmt: skip
    vals: dict[str, Any] = {f: getattr(kernel, f) for f in FAMILY_FIELDS}
    for key, value in (overrides or {}).items():
        if key not in FAMILY_FIELDS:
            raise ValueError(f"gpu_kernels.{key}: unknown; valid: {', '.join(FAMILY_FIELDS)}")
        if key == "peak":
            vals[key] = value
            continue
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"gpu_kernels.{key}: {value!r} is not a number") from None
        if not math.isfinite(v):
            raise ValueError(f"gpu_kernels.{key}: {value!r} is not a number")
        vals[key] = int(v) if key == "pad_rows" else v
    try:
        return LowbitKernel(kernel.name, description=kernel.description, source=kernel.source,
                            **vals)  # fmt: skip
    except ValueError as e:
        raise ValueError(f"gpu_kernels: {e}") from None
