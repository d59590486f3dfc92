"""Per-step costs of collaborative LLM training (ZeRO-Offload style) under a protection plan.

Byte streams per step with Psi parameters split evenly over L layers (mixed-precision
Adam, 16 B/param of model state: fp16 params and grads on the accelerator, fp32 master
weights, momentum and variance on the CPU; Rajbhandari et al., ZeRO, SC'20):

- accelerator, per micro-batch and layer: weights read 3x (forward, two backward GEMMs,
  2 B/param each), activations written in forward and read in backward
  (``act_bytes_per_token_hidden`` x hidden per token: 34, Korthikanti et al. 2022,
  flash attention so no s^2 term), fp16 grads written; with ``recompute`` only each
  layer's input (2 B x hidden per token) is kept and backward recomputes the forward;
- transfers per layer: grads accelerator -> CPU (2 B/param), params CPU -> accelerator
  (2 B/param);
- CPU per layer: Adam reads fp32 param, m, v and the fp16 grad (14 B/param) and writes
  param, m, v and the fp16 param copy (14 B/param); the DMA lands grads (2 B/param) and
  reads params (2 B/param) in CPU memory.

A step is ``M`` forward passes and ``M - 1`` backward passes, then the last backward
pipelined layer by layer with the grad transfer, the CPU's Adam and the param transfer
(a flow shop over the stages of :data:`STAGES`). The next step starts when every
parameter is back (ZeRO-Offload without the one-step delay).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from hetsim.devices.enclave import EnclaveSpec
from hetsim.devices.roofline import op_time_s
from hetsim.devices.spec import DeviceSpec
from hetsim.workloads.tee.models import LLMShape
from hetsim.workloads.tee.pipeline import flow_shop
from hetsim.workloads.tee.secure import (
    Pass,
    SecureMemoryParams,
    TransferSide,
    crypto_bytes,
    side_time_s,
    stored_metadata_bytes,
    stream_traffic,
    tee_preset,
    transfer_plan,
)
from hetsim.workloads.tee.view import ProtectionPlan, StreamView

STAGES = ("accel_backward", "accel_send", "link_d2h", "cpu", "link_h2d", "accel_receive")


@dataclass(frozen=True)
class CollabConfig:
    """Everything the step model needs besides the plan (built by the workload)."""

    shape: LLMShape
    accel: DeviceSpec
    cpu: DeviceSpec
    dtype: str
    seq_len: int
    tokens_mb: int  # tokens per micro-batch
    micro_batches: int
    act_factor: float
    recompute: bool
    adam_flops_per_param: float
    secure: SecureMemoryParams
    verify_latency_s: float
    tile_bytes: float
    accel_engine_Bps: float
    cpu_crypto_Bps: float | None
    d2h_s: float  # one layer's grads over the link
    h2d_s: float  # one layer's params over the link


class Toggles(NamedTuple):
    """Which security costs are charged (all on: the plan as is; for attribution)."""

    metadata: bool = True
    verify: bool = True
    crypto: bool = True


def streams(cfg: CollabConfig) -> tuple[StreamView, ...]:
    """The byte streams of one step (per step totals), in a fixed order."""
    psi, m = cfg.shape.params, cfg.micro_batches
    act = cfg.tokens_mb * cfg.act_factor * cfg.shape.hidden * cfg.shape.layers
    return (
        StreamView("weights", "accel", 3 * 2 * psi * m, True, False),
        StreamView("activations_write", "accel", act * m, True, True),
        StreamView("activations_read", "accel", act * m, True, False),
        StreamView("grads", "accel", 2 * psi * m, True, True),
        StreamView("grads_in", "cpu", 2 * psi, True, True),
        StreamView("optimizer_read", "cpu", 14 * psi, True, False),
        StreamView("optimizer_write", "cpu", 14 * psi, True, True),
        StreamView("params_out", "cpu", 2 * psi, True, False),
    )


def stream_specs(plan: ProtectionPlan, on: bool) -> list[EnclaveSpec | None]:
    """The enclave spec of each stream (all None when metadata is toggled off)."""
    return [tee_preset(n) if (n is not None and on) else None for n in plan.stream_enclaves]


def per_layer_traffic(
    cfg: CollabConfig, views: tuple[StreamView, ...], specs: list[EnclaveSpec | None]
) -> dict[str, tuple[float, float]]:
    """Stream -> (total bytes, metadata bytes) of one layer's share of one access."""
    region = {"accel": 4 * cfg.shape.params, "cpu": 16 * cfg.shape.params}
    div = {"accel": cfg.shape.layers * cfg.micro_batches, "cpu": cfg.shape.layers}
    out = {}
    for v, spec in zip(views, specs, strict=True):
        n = v.nbytes_per_step / div[v.side]
        if v.name == "weights":
            n /= 3  # one read of one layer's weights
        tr = stream_traffic(spec, n, write=v.write, region_bytes=region[v.side], params=cfg.secure)
        out[v.name] = (tr.total_bytes, tr.metadata_bytes)
    return out


def _sync_stall_s(cfg: CollabConfig, plan: ProtectionPlan, nbytes: float, t: Toggles) -> float:
    if plan.verify != "sync" or not t.verify:
        return 0.0
    return math.ceil(nbytes / cfg.tile_bytes) * cfg.verify_latency_s


def compute_times(
    cfg: CollabConfig, plan: ProtectionPlan, traffic: dict[str, tuple[float, float]], t: Toggles
) -> tuple[float, float]:
    """Seconds of one layer's forward and backward on one micro-batch."""
    s = cfg.shape
    p_layer = s.params / s.layers
    flops = 2.0 * p_layer * cfg.tokens_mb + 2.0 * cfg.tokens_mb * cfg.seq_len * s.hidden
    w = traffic["weights"][0]
    fwd_bytes = w + traffic["activations_write"][0]
    bwd_bytes = 2 * w + traffic["activations_read"][0] + traffic["grads"][0]
    fwd = op_time_s(cfg.accel, flops, fwd_bytes, cfg.dtype)
    bwd_flops = (3.0 if cfg.recompute else 2.0) * flops  # + the recomputed forward
    bwd = op_time_s(cfg.accel, bwd_flops, bwd_bytes, cfg.dtype)
    raw_w = 2 * p_layer
    return (
        fwd + _sync_stall_s(cfg, plan, raw_w, t),
        bwd + _sync_stall_s(cfg, plan, 2 * raw_w, t),
    )


def transfer_passes(
    cfg: CollabConfig, plan: ProtectionPlan, t: Toggles
) -> tuple[tuple[Pass, ...], tuple[Pass, ...]]:
    """Passes of one layer's grads (accelerator -> CPU) and params (CPU -> accelerator)."""
    nbytes = 2 * cfg.shape.params / cfg.shape.layers
    mode = plan.transfer if t.crypto else "plain"
    if mode == "direct" and not t.verify:
        mode = "plain"
    cpu = _side(plan.cpu_enclave, cfg.cpu, cfg.cpu_crypto_Bps)
    acc = _side(plan.accel_enclave, cfg.accel, None)
    kw = {"verify_latency_s": cfg.verify_latency_s, "accel_decrypt_Bps": cfg.accel_engine_Bps}
    grads = transfer_plan(mode, acc, cpu, nbytes, dma_s=cfg.d2h_s, cpu_is_src=False, **kw)  # type: ignore[arg-type]
    params = transfer_plan(mode, cpu, acc, nbytes, dma_s=cfg.h2d_s, cpu_is_src=True, **kw)  # type: ignore[arg-type]
    return grads, params


def _side(name: str | None, dev: DeviceSpec, crypto_Bps: float | None) -> TransferSide:
    spec = tee_preset(name) if name else None
    if spec is not None and crypto_Bps is not None:
        spec = dataclasses.replace(spec, crypto_throughput_Bps=crypto_Bps)
    return TransferSide(spec, dev.memory_bandwidth_Bps)


class StepResult(NamedTuple):
    """One step's time and its parts."""

    step_s: float
    forward_s: float
    backward_s: float
    stage_times_s: np.ndarray  # (stages, layers) of the pipelined last backward
    metadata_bytes: float
    crypto_bytes: float
    crypto_s: float


def step(cfg: CollabConfig, plan: ProtectionPlan, t: Toggles | None = None) -> StepResult:
    """Time of one training step under ``plan`` with the toggled costs (default: all on)."""
    t = t or Toggles()
    views = streams(cfg)
    traffic = per_layer_traffic(cfg, views, stream_specs(plan, t.metadata))
    fwd, bwd = compute_times(cfg, plan, traffic, t)
    grads, params = transfer_passes(cfg, plan, t)
    adam_bytes = sum(
        traffic[k][0] for k in ("grads_in", "optimizer_read", "optimizer_write", "params_out")
    )
    p_layer = cfg.shape.params / cfg.shape.layers
    adam = op_time_s(cfg.cpu, cfg.adam_flops_per_param * p_layer, adam_bytes, "fp32")
    row = [
        bwd,
        side_time_s(grads, "src"),
        side_time_s(grads, "link"),
        side_time_s(grads, "dst") + adam + side_time_s(params, "src"),
        side_time_s(params, "link"),
        side_time_s(params, "dst"),
    ]
    layers, m = cfg.shape.layers, cfg.micro_batches
    times = np.repeat(np.asarray(row)[:, None], layers, axis=1)
    tail = flow_shop(times).makespan_s
    meta_layer = sum(_meta_per_step(k, v, m) for k, v in traffic.items())
    crypto = crypto_bytes(grads) + crypto_bytes(params)
    crypto_s = sum(p.time_s for p in (*grads, *params) if p.kind == "crypto")
    return StepResult(
        m * layers * fwd + (m - 1) * layers * bwd + tail,
        m * layers * fwd,
        m * layers * bwd,
        times,
        meta_layer * layers,
        crypto * layers,
        crypto_s * layers,
    )


def _meta_per_step(name: str, total_meta: tuple[float, float], m: int) -> float:
    """Metadata bytes of one layer's share of ``name`` over a step."""
    meta = total_meta[1]
    if name == "weights":
        return 3 * m * meta
    if name in ("activations_write", "activations_read", "grads"):
        return m * meta
    return meta


def accel_footprint(cfg: CollabConfig, plan: ProtectionPlan, tokens_mb: int) -> tuple[float, float]:
    """(data bytes, stored metadata bytes) on the accelerator at ``tokens_mb``."""
    s = cfg.shape
    per_token = cfg.act_factor * s.hidden * (1 if cfg.recompute else s.layers)
    if cfg.recompute:  # layer-input checkpoints (2 B/element) + one layer's working set
        per_token += 2.0 * s.hidden * s.layers
    data = {"weights": 2 * s.params, "grads": 2 * s.params, "activations": tokens_mb * per_token}
    spec = tee_preset(plan.accel_enclave) if plan.accel_enclave else None
    meta = sum(stored_metadata_bytes(spec, b) for b in data.values())
    return sum(data.values()), meta
