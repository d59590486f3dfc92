"""GPU-side routed-expert time from a low-bit kernel family and an engine host profile.

Two parts, each optional (scenario fields ``gpu_kernel`` / ``gpu_kernels`` and
``engine`` / ``engine_overrides``):

- **Kernel** (:mod:`hetsim.devices.lowbit_kernels`): an expert on ``n`` tokens is three
  dequant-fused calls, gate and up (``expert_ffn x hidden``) and down
  (``hidden x expert_ffn``), at the scenario's ``expert_bits`` per weight.
- **Engine** (``workloads/moe/engines.yaml``): the engine's Python code issues, per
  expert, ``expert_torch_ops`` PyTorch ops (``torch_op_s`` each on the host; each also a
  small kernel of the device's ``launch_overhead_s`` on the GPU), ``expert_launches``
  Triton launches (``launch_s`` each) and ``expert_syncs`` device-to-host reads
  (``sync_s`` each). A read makes the host wait for the stream, so the host cannot run
  ahead of the GPU by more than an expert: the expert's wall time is
  ``max(host, gpu) + syncs x sync_s``. Per MoE layer (attention, norms, router, the
  loop's bookkeeping) the same with the ``layer_*`` counts, plus the gate-reuse
  prefetch's and the adaptive gating check's ops where those policies run; it is charged
  before the router: ``attention = max(attention_gpu, layer_host) + layer_syncs x sync_s``.

With neither part the GPU expert time is the fitted weight-only GEMM of
:mod:`hetsim.devices.kernels` (the default, unchanged).
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from hetsim.devices.lowbit_kernels import LowbitKernel, device_time_s
from hetsim.devices.spec import DeviceSpec
from hetsim.workloads.models.moe import MoEModel

ENGINE_FILE = Path(__file__).resolve().parent / "engines.yaml"


@dataclass(frozen=True)
class EngineProfile:
    """Host-side cost of one engine's GPU expert path (``engines.yaml``; module doc)."""

    name: str
    gpu_kernel: str
    expert_torch_ops: int
    expert_launches: int
    expert_syncs: int
    layer_torch_ops: int
    layer_launches: int
    layer_syncs: int
    prefetch_layer_torch_ops: int
    prefetch_layer_syncs: int
    gating_layer_torch_ops: int
    gating_layer_syncs: int
    torch_op_s: float
    launch_s: float
    sync_s: float

    def expert_host_s(self) -> float:
        """Host seconds to issue one expert."""
        return self.expert_torch_ops * self.torch_op_s + self.expert_launches * self.launch_s

    def layer_host_s(self, prefetch: bool, gating: bool) -> tuple[float, float]:
        """(host seconds, sync seconds) of one MoE layer's non-expert work."""
        ops = self.layer_torch_ops
        syncs = self.layer_syncs
        if prefetch:
            ops += self.prefetch_layer_torch_ops
            syncs += self.prefetch_layer_syncs
        if gating:
            ops += self.gating_layer_torch_ops
            syncs += self.gating_layer_syncs
        return ops * self.torch_op_s + self.layer_launches * self.launch_s, syncs * self.sync_s


_NUMBERS = tuple(f.name for f in fields(EngineProfile) if f.name not in ("name", "gpu_kernel"))


@functools.cache
def _engines() -> dict[str, Any]:
    data = yaml.safe_load(ENGINE_FILE.read_text(encoding="utf-8"))
    return dict(data["engines"])


def engine_names() -> tuple[str, ...]:
    """The profiles of ``workloads/moe/engines.yaml``."""
    return tuple(sorted(_engines()))


def load_engine(name: str, overrides: dict[str, Any] | None = None) -> EngineProfile:
    """Profile ``name`` with a scenario's ``engine_overrides``; errors name the field."""
    table = _engines()
    if name not in table:
        raise ValueError(f"engine: unknown profile {name!r}; valid: {', '.join(sorted(table))}")
    raw = table[name]
    vals: dict[str, Any] = {"name": name, "gpu_kernel": str(raw["gpu_kernel"])}
    for key in _NUMBERS:
        vals[key] = raw[key]
    for key, value in (overrides or {}).items():
        if key == "gpu_kernel":
            vals[key] = str(value)
            continue
        if key not in _NUMBERS:
            raise ValueError(f"engine_overrides.{key}: unknown; valid: {', '.join(_NUMBERS)}")
        vals[key] = value
    for key in _NUMBERS:
        v = vals[key]
        if isinstance(v, str):  # YAML 1.1 reads 5e-6 (no dot) as a string
            with contextlib.suppress(ValueError):
                v = float(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"engine_overrides.{key}: {v!r} is not a number >= 0")
        if key.endswith(("_ops", "_launches", "_syncs")):
            if int(v) != v:
                raise ValueError(f"engine_overrides.{key}: {v!r} is not a whole count")
            vals[key] = int(v)
        else:
            vals[key] = float(v)
    return EngineProfile(**vals)


def expert_kernel_s(
    kernel: LowbitKernel, spec: DeviceSpec, model: MoEModel, tokens: Any, bits: float, tp: int
) -> Any:
    """GPU seconds of one routed expert's three dequant-fused calls on ``tokens``
    (array); under tensor parallelism each GPU holds 1/tp of the FFN width."""
    h, f = model.hidden, model.expert_ffn / tp
    up = device_time_s(kernel, spec, f, h, tokens, bits)  # gate and up: f x h each
    down = device_time_s(kernel, spec, h, f, tokens, bits)
    return 2.0 * up + down


def expert_table_s(
    kernel: LowbitKernel,
    engine: EngineProfile | None,
    spec: DeviceSpec,
    model: MoEModel,
    max_tokens: int,
    bits: float,
    tp: int = 1,
) -> np.ndarray:
    """Seconds of one routed expert at ``0..max_tokens`` tokens (0 at 0): the kernels,
    and with an engine its host issue, small kernels and syncs (module doc)."""
    loads = np.arange(max_tokens + 1, dtype=float)
    gpu = np.asarray(expert_kernel_s(kernel, spec, model, loads, bits, tp), dtype=float)
    if engine is not None:
        gpu = gpu + engine.expert_torch_ops * spec.launch_overhead_s
        gpu = np.maximum(gpu, engine.expert_host_s()) + engine.expert_syncs * engine.sync_s
    gpu[0] = 0.0
    return gpu
