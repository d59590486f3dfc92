"""Optimizer offload (ZeRO-Offload) for the ``training`` workload: placement and the step tail.

Design from Ren et al., "ZeRO-Offload: Democratizing Billion-Scale Model Training", USENIX
ATC'21: fp16 parameters and the forward/backward stay on the accelerator; the fp32 master
weights, Adam momentum and variance (12 B/param) live in host memory; every iteration the
fp16 gradients (2 B/param) are copied device-to-host over PCIe, the CPU runs Adam over the
fp32 master weights, and the updated fp16 parameters (2 B/param) are copied host-to-device.
With ``overlap_grad_copy`` each layer's gradients leave as soon as its backward finishes,
overlapping the rest of backward, as ZeRO-Offload does; otherwise all of them leave after
backward. The device keeps 4 B/param (fp16 params + fp16 gradient buffer) instead of 16.

Simplified or reconstructed:

- The paper's placement also keeps the fp16 gradients on the host (2 B/param on the GPU,
  gradients streamed out in buckets); here the device keeps a full gradient buffer
  (4 B/param), the conservative placement.
- CPU-Adam cost is one roofline op on the host CPU over all parameters, with
  :class:`CpuAdamCost` constants (reconstruction: 12 FLOP/param as the device Adam op;
  28 B/param of DRAM traffic = read fp16 grad 2 + fp32 master/momentum/variance 12, write
  those 12 + fp16 param 2). The paper's vectorised CPU-Adam is what the roofline assumes.
- The CPU step starts when every gradient has arrived; the parameter copy starts when it
  ends (no per-chunk pipelining of Adam with the H2D copy, no one-step delayed update).
- The first placement of the states on the host is not charged.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import simpy
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat

from hetsim.devices.cluster import Cluster
from hetsim.devices.memory import MemoryPool
from hetsim.workloads.training.model import STATE_BYTES_PER_PARAM, TransformerSpec
from hetsim.workloads.training.ops import BWD, Lifetimes

HOST_STATE_BYTES_PER_PARAM = 12  # fp32 master weights 4 + momentum 4 + variance 4
DEVICE_STATE_BYTES_PER_PARAM = STATE_BYTES_PER_PARAM - HOST_STATE_BYTES_PER_PARAM  # 2 + 2
GRAD_BYTES_PER_PARAM = 2  # fp16 gradients, device-to-host
PARAM_BYTES_PER_PARAM = 2  # fp16 parameters, host-to-device
HOST_TAG = "optimizer"


class CpuAdamCost(BaseModel):
    """Work of one CPU-Adam step per parameter (reconstruction, see module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    flops_per_param: PositiveFloat = Field(default=12.0, description="reconstruction")
    bytes_per_param: PositiveFloat = Field(
        default=28.0, description="host DRAM traffic, reconstruction"
    )
    dtype: Literal["fp32", "bf16", "fp16"] = Field(
        default="fp32", description="Number format of the CPU-Adam step on the CPU roofline."
    )


@dataclass(frozen=True)
class OffloadStep:
    """The offloaded optimizer step of one sequence, priced by the mechanism.

    ``grad_bytes_at_op``: per op, bytes of weight gradients complete once it ends (non-zero
    at each layer's last backward op); ``last_bwd_op``: where the non-overlapped copy starts.
    """

    grad_bytes_at_op: np.ndarray
    last_bwd_op: int
    param_bytes: int
    cpu_adam_s: float


def layer_params(model: TransformerSpec) -> dict[int, int]:
    """Parameters whose gradients each layer's backward completes: transformer layers
    ``4h^2 + 2hf``, the head (layer ``L``) and the input embedding (layer -1) ``v h`` each."""
    out = {layer: model.params_per_layer for layer in range(model.layers)}
    out[model.layers] = out[-1] = model.vocab * model.hidden
    return out


def offload_step(model: TransformerSpec, lt: Lifetimes, cpu_adam_s: float) -> OffloadStep:
    """Gradient copy points of sequence ``lt`` and the step's sizes."""
    grad = np.zeros(lt.seq.n_ops, dtype=np.int64)
    bwd = np.flatnonzero(lt.phase == BWD)
    for layer, n in layer_params(model).items():
        ops = bwd[lt.layer[bwd] == layer]
        if len(ops):
            grad[ops.max()] += GRAD_BYTES_PER_PARAM * n
    return OffloadStep(grad, int(bwd.max()), PARAM_BYTES_PER_PARAM * model.params, cpu_adam_s)


def cpu_adam_s(cluster: Cluster, host: str, params: int, cost: CpuAdamCost) -> float:
    """Roofline time of CPU-Adam over ``params`` parameters on the host CPU."""
    cpu = cluster.device(host)
    return cpu.op_time_s(cost.flops_per_param * params, cost.bytes_per_param * params, cost.dtype)


def place_states(pool: MemoryPool, host_pool: MemoryPool, params: int, offloaded: bool) -> None:
    """Hold the model states where the plan wants them: 16 B/param on the device, or 4 B/param
    on the device and the 12 B/param optimizer states on the host when ``offloaded``."""
    device = (DEVICE_STATE_BYTES_PER_PARAM if offloaded else STATE_BYTES_PER_PARAM) * params
    host = HOST_STATE_BYTES_PER_PARAM * params if offloaded else 0
    for p, tag, want in ((pool, "states", device), (host_pool, HOST_TAG, host)):
        have = p.usage_by_tag().get(tag, 0)
        if have > want:
            p.free(tag, have - want)
    for p, tag, want in ((pool, "states", device), (host_pool, HOST_TAG, host)):
        have = p.usage_by_tag().get(tag, 0)
        if have < want:
            p.allocate(tag, want - have)


def step_tail(
    cluster: Cluster, device: str, host: str, grads: list[simpy.Event], step: OffloadStep
) -> Generator[simpy.Event, Any, float]:
    """SimPy generator run after the last backward op: wait for the gradient copies, run
    CPU-Adam, copy the fp16 parameters back. Returns the CPU-Adam time."""
    env = cluster.sim.env
    yield env.all_of(grads)
    start = env.now
    yield env.timeout(step.cpu_adam_s)
    cluster.device(host).record_busy(start, env.now, "cpu-adam")
    yield cluster.copy(host, device, step.param_bytes, name="param-h2d")
    return step.cpu_adam_s
