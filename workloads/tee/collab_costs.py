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
  reads params (2 B/param) in CPU memory. Adam runs on the step's CPU threads: their
  share of the cores and of the socket's bandwidth (:func:`cpu_thread_shares`); the
  software re-encryption of transfers runs on the same threads, in series with Adam.

A step is ``M`` forward passes and ``M - 1`` backward passes, then the last backward
pipelined layer by layer with the grad transfer, the CPU's Adam and the param transfer
(a flow shop over the stages of :data:`STAGES`, each stage its own resource). The step
is a task graph (:func:`step_tasks`, run as SimPy processes by :mod:`workloads.tee.dag`).
The next step starts when every parameter is back (ZeRO-Offload without the one-step
delay).

Memory-encryption engines (:mod:`devices.mee`): every protected byte the CPU streams
passes its inline engine (``cpu_mee``), every protected byte on the accelerator its MAC
engine (``accel_mac_Bps``); a layer's time is at least its protected bytes over that
rate. Cacheline streams with counters also expose the engine's latency on each version
miss (divided by ``mlp``). Transfer re-encryption runs on the CPU's software AES
(``cpu_crypto``).

TensorTEE's residual costs (streams under the ``tensor`` preset):

- *detection*: a tensor stream is detected only if its interleaved arrays fit the
  detector's table (``detector_streams``); the first ``detect_window_bytes`` of each of
  a layer's ``tensors_per_layer`` tensors, and a share ``detect_miss_rate`` of the rest,
  go through the side's cacheline fallback preset;
- *MAC accumulation*: tensor MACs are accumulated over every block through the MAC
  engine (above);
- *commit barrier*: a layer's gradients leave the accelerator only after their tensor
  MAC is final and the layer's delayed verifications have passed (``commit_latency_s``
  on the send stage);
- *verification window*: compute may run at most ``verify_window_layers`` layers ahead
  of unverified inputs; a verification slower than that window stalls the layer.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from hetsim.devices.cpu import cpu_kernels
from hetsim.devices.enclave import EnclaveSpec
from hetsim.devices.mee import LINE_BYTES, AesEngine
from hetsim.devices.roofline import op_time_s
from hetsim.devices.spec import DeviceSpec
from hetsim.workloads.tee.dag import Task, makespan_s
from hetsim.workloads.tee.models import LLMShape
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
    cpu_mee: AesEngine | None = None  # inline engine of CPU memory (None: keeps up)
    accel_mac_Bps: float = math.inf  # accelerator MAC/crypto engine rate
    mlp: float = 10.0  # version misses in flight
    tensors_per_layer: int = 12
    detect_window_bytes: float = 4096.0
    detect_miss_rate: float = 0.0
    detector_streams: int = 16
    commit_latency_s: float = 0.0
    verify_window_layers: int = 1
    #: (compute, memory-bandwidth) shares of the CPU that its ``cpu_threads`` get
    cpu_shares: tuple[float, float] = (1.0, 1.0)


def cpu_thread_shares(cpu: DeviceSpec, threads: int) -> tuple[float, float]:
    """(compute, memory-bandwidth) shares of ``cpu`` that ``threads`` threads get:
    threads / cores, and threads x the core's streaming bandwidth over the socket's
    achievable bandwidth, capped at 1 (``devices/cpu_kernels.yaml`` ``core_bandwidth_Bps``,
    the rule of :class:`devices.cpu.CpuModel`; 1 for a CPU without kernel constants)."""
    if cpu.cores <= 0:
        return 1.0, 1.0
    try:
        core_Bps = cpu_kernels(cpu.name).core_bandwidth_Bps
    except ValueError:
        return min(1.0, threads / cpu.cores), 1.0
    achievable = cpu.memory_bandwidth_Bps * cpu.memory_efficiency.max_eff
    return min(1.0, threads / cpu.cores), min(1.0, threads * core_Bps / achievable)


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
        StreamView("optimizer_read", "cpu", 14 * psi, True, False, 4),  # param, m, v, grad
        StreamView("optimizer_write", "cpu", 14 * psi, True, True, 4),  # param, m, v, fp16
        StreamView("params_out", "cpu", 2 * psi, True, False),
    )


def stream_specs(plan: ProtectionPlan, on: bool) -> list[EnclaveSpec | None]:
    """The enclave spec of each stream (all None when metadata is toggled off)."""
    return [tee_preset(n) if (n is not None and on) else None for n in plan.stream_enclaves]


class StreamCost(NamedTuple):
    """One layer's share of one access of a stream: bytes, metadata bytes, exposed
    version-miss latency, and the bytes that pass the side's engine."""

    total_bytes: float
    metadata_bytes: float
    latency_s: float
    engine_bytes: float


def _fallback_share(cfg: CollabConfig, v: StreamView, nbytes: float) -> float:
    """Share of a tensor stream's bytes not detected as a tensor (module doc)."""
    if v.streams > cfg.detector_streams:
        return 1.0
    window = min(1.0, cfg.tensors_per_layer * cfg.detect_window_bytes / max(nbytes, 1.0))
    return min(1.0, window + (1.0 - window) * cfg.detect_miss_rate)


def _stream_cost(
    cfg: CollabConfig, spec: EnclaveSpec | None, v: StreamView, n: float, region: float
) -> StreamCost:
    tr = stream_traffic(
        spec, n, write=v.write, region_bytes=region, params=cfg.secure, streams=v.streams
    )
    lat = 0.0
    if tr.counter_bytes > 0 and cfg.cpu_mee is not None and v.side == "cpu":
        lat = tr.counter_bytes / LINE_BYTES * cfg.cpu_mee.latency_s / cfg.mlp
    return StreamCost(tr.total_bytes, tr.metadata_bytes, lat, n if spec is not None else 0.0)


def per_layer_traffic(
    cfg: CollabConfig,
    views: tuple[StreamView, ...],
    specs: list[EnclaveSpec | None],
    fallbacks: tuple[EnclaveSpec | None, EnclaveSpec | None] = (None, None),
) -> dict[str, StreamCost]:
    """Stream -> :class:`StreamCost` of one layer's share of one access. ``fallbacks``:
    (CPU, accelerator) presets of undetected tensor bytes."""
    region = {"accel": 4 * cfg.shape.params, "cpu": 16 * cfg.shape.params}
    div = {"accel": cfg.shape.layers * cfg.micro_batches, "cpu": cfg.shape.layers}
    out = {}
    for v, spec in zip(views, specs, strict=True):
        n = v.nbytes_per_step / div[v.side]
        if v.name == "weights":
            n /= 3  # one read of one layer's weights
        fb = fallbacks[0 if v.side == "cpu" else 1]
        share = _fallback_share(cfg, v, n) if spec is not None and spec.name == "tensor" else 0.0
        parts = [_stream_cost(cfg, spec, v, n * (1 - share), region[v.side])]
        if share > 0:
            parts.append(_stream_cost(cfg, fb, v, n * share, region[v.side]))
        out[v.name] = StreamCost(*(sum(col) for col in zip(*parts, strict=True)))
    return out


def _sync_stall_s(cfg: CollabConfig, plan: ProtectionPlan, nbytes: float, t: Toggles) -> float:
    if plan.verify != "sync" or not t.verify:
        return 0.0
    return math.ceil(nbytes / cfg.tile_bytes) * cfg.verify_latency_s


def compute_times(
    cfg: CollabConfig, plan: ProtectionPlan, traffic: dict[str, StreamCost], t: Toggles
) -> tuple[float, float]:
    """Seconds of one layer's forward and backward on one micro-batch: the roofline over
    protected bytes, at least the protected bytes over the accelerator's MAC engine, plus
    synchronous-verification stalls and delayed-verification window stalls."""
    s = cfg.shape
    p_layer = s.params / s.layers
    flops = 2.0 * p_layer * cfg.tokens_mb + 2.0 * cfg.tokens_mb * cfg.seq_len * s.hidden
    w, aw, ar, g = (
        traffic[k] for k in ("weights", "activations_write", "activations_read", "grads")
    )
    fwd_bytes = w.total_bytes + aw.total_bytes
    bwd_bytes = 2 * w.total_bytes + ar.total_bytes + g.total_bytes
    fwd = op_time_s(cfg.accel, flops, fwd_bytes, cfg.dtype)
    bwd_flops = (3.0 if cfg.recompute else 2.0) * flops  # + the recomputed forward
    bwd = op_time_s(cfg.accel, bwd_flops, bwd_bytes, cfg.dtype)
    if t.metadata:
        fwd = max(fwd, (w.engine_bytes + aw.engine_bytes) / cfg.accel_mac_Bps)
        bwd = max(bwd, (2 * w.engine_bytes + ar.engine_bytes + g.engine_bytes) / cfg.accel_mac_Bps)
    raw_w = 2 * p_layer
    window = 0.0
    if plan.verify == "delayed" and t.verify:  # verification must land within the window
        window = max(0.0, cfg.verify_latency_s - cfg.verify_window_layers * fwd)
    return (
        fwd + _sync_stall_s(cfg, plan, raw_w, t) + window,
        bwd + _sync_stall_s(cfg, plan, 2 * raw_w, t) + window,
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
    """One transfer end; the CPU's software crypto rate replaces the preset's."""
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
    tasks: list[Task]  # the step's task graph


CPU_STREAMS = ("grads_in", "optimizer_read", "optimizer_write", "params_out")


def stage_row(
    cfg: CollabConfig, plan: ProtectionPlan, t: Toggles
) -> tuple[list[float], float, float, tuple[Pass, ...], tuple[Pass, ...], dict[str, StreamCost]]:
    """One layer's seconds per stage of :data:`STAGES`, forward and backward seconds,
    the transfer passes and the traffic."""
    views = streams(cfg)
    fallbacks = (
        tee_preset(plan.fallback_cpu) if t.metadata else None,
        tee_preset(plan.fallback_accel) if t.metadata else None,
    )
    traffic = per_layer_traffic(cfg, views, stream_specs(plan, t.metadata), fallbacks)
    fwd, bwd = compute_times(cfg, plan, traffic, t)
    grads, params = transfer_passes(cfg, plan, t)
    cpu = [traffic[k] for k in CPU_STREAMS]
    p_layer = cfg.shape.params / cfg.shape.layers
    c_share, m_share = cfg.cpu_shares
    adam = op_time_s(
        cfg.cpu,
        cfg.adam_flops_per_param * p_layer / c_share,
        sum(c.total_bytes for c in cpu) / m_share,
        "fp32",
    )
    if cfg.cpu_mee is not None and t.metadata:
        adam = max(adam, sum(c.engine_bytes for c in cpu) / cfg.cpu_mee.throughput_Bps)
        adam += sum(c.latency_s for c in cpu)
    commit = cfg.commit_latency_s if plan.verify == "delayed" and t.verify else 0.0
    row = [
        bwd,
        side_time_s(grads, "src") + commit,
        side_time_s(grads, "link"),
        side_time_s(grads, "dst") + adam + side_time_s(params, "src"),
        side_time_s(params, "link"),
        side_time_s(params, "dst"),
    ]
    return row, fwd, bwd, grads, params, traffic


def step_tasks(cfg: CollabConfig, row: list[float], fwd: float, bwd: float) -> list[Task]:
    """The task graph of one step: every micro-batch's forward and all but the last
    backward on the accelerator, then the last backward layer by layer through the
    stages of :data:`STAGES` (each stage one resource, layers in order)."""
    layers, m = cfg.shape.layers, cfg.micro_batches
    tasks: list[Task] = []
    prev: tuple[int, ...] = ()
    for mb in range(m):
        for j in range(layers):
            tasks.append(Task(f"mb{mb} fwd {j}", "accel_backward", fwd, prev))
            prev = (len(tasks) - 1,)
    for mb in range(m - 1):
        for j in reversed(range(layers)):
            tasks.append(Task(f"mb{mb} bwd {j}", "accel_backward", bwd, prev))
            prev = (len(tasks) - 1,)
    for j in reversed(range(layers)):
        dep = prev
        for k, stage in enumerate(STAGES):
            if row[k] <= 0 and k > 0:
                continue
            tasks.append(Task(f"layer {j} {stage}", stage, row[k], dep))
            dep = (len(tasks) - 1,)
            if k == 0:
                prev = dep  # the next layer's backward follows this one
    return tasks


def step(cfg: CollabConfig, plan: ProtectionPlan, t: Toggles | None = None) -> StepResult:
    """Time of one training step under ``plan`` with the toggled costs (default: all on)."""
    t = t or Toggles()
    row, fwd, bwd, grads, params, traffic = stage_row(cfg, plan, t)
    layers, m = cfg.shape.layers, cfg.micro_batches
    times = np.repeat(np.asarray(row)[:, None], layers, axis=1)
    meta_layer = sum(
        _meta_per_step(k, (v.total_bytes, v.metadata_bytes), m) for k, v in traffic.items()
    )
    crypto = crypto_bytes(grads) + crypto_bytes(params)
    crypto_s = sum(p.time_s for p in (*grads, *params) if p.kind == "crypto")
    tasks = step_tasks(cfg, row, fwd, bwd)
    return StepResult(
        makespan_s(tasks),
        m * layers * fwd,
        m * layers * bwd,
        times,
        meta_layer * layers,
        crypto * layers,
        crypto_s * layers,
        tasks,
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
