"""Costs of MoE work on one GPU + CPU + PCIe node.

GPU work is priced kernel by kernel with the fitted kernel classes
(:mod:`hetsim.devices.kernels`): a routed expert is a gate+up GEMM, SiLU-and-mul and a
down GEMM on its tokens (weight-only int8/int4 formats by the expert's bits per weight);
attention is one projection GEMM of the layer's attention weights, norms, residual adds
and prefill or paged decode attention; the LM head is a GEMM on the sampling sequences.
CPU work is priced by the CPU roofline or, with ``cpu_model``, the CPU kernel model;
copies by the topology over the GPU's PCIe link. Nothing is a constant of a paper.
The formulas below are the CPU roofline's (and the GPU's FLOP and byte counts).
Expert times are tabulated once for every token load a step can
produce (``0..max_tokens``), so the hot path indexes an array.

Ops (``h`` hidden size, ``I`` expert FFN, ``n`` tokens, ``b`` bits per weight):

- routed expert: ``6 h I n`` FLOPs; bytes = weights ``3 h I b / 8`` + activations
  ``4 h n`` (fp16 input and output);
- attention of one layer over ``n`` new tokens with ``c`` tokens of context (mean over the
  new tokens): ``2 P_att n + 4 n c h`` FLOPs (projections, then QK^T and AV with the query
  width taken as ``h``: an approximation for MLA); bytes = weights + KV of the context;
- shared experts / dense FFN: ``6 h F n`` FLOPs, their weights in bytes;
- LM head on the last token: ``2 V h`` FLOPs, its weights in bytes.

Hand-off (``handoff_s``, scenario ``cpu_handoff``): in a layer whose routed experts run
partly on the CPU, the hidden states go GPU -> CPU before the CPU experts start and their
output goes CPU -> GPU before the layer ends: two copies of ``n h`` activations, each
the link's per-copy latency plus bytes at its rate, and any host functions the engine
enqueues in the GPU stream to submit and await the CPU experts (scenario
``host_callbacks_per_layer`` x ``host_callback_s``; the caller's function).

Engine host time (``layer_host_s``, ``layer_sync_s``, set from an engine profile by
:mod:`hetsim.workloads.moe.engines`; default 0): the attention stage of each layer takes
``max(attention, layer_host_s) + layer_sync_s``.

Software overheads (parameters, default 0: the pure roofline): a fixed time per expert
call on the GPU and on the CPU, and a CPU intercept once per layer in which the CPU runs
experts (thread-pool wake-up; HybriMoE's profile has it as a first-expert intercept).
Kernel switch (``cpu_amx_tokens_per_expert``, weight formats ``int4``/``int8``: kt-kernel's
AMXINT4/AMXINT8): a call whose experts' loads sum to more than that many tokens per
expert of the layer (``sum(loads) > t E``; kt-kernel: ``qlen > 4 E / k``) prices its
CPU experts on the AMX matrix path, any other on the AVX-512 vector path (the GEMV term
at every load: :mod:`hetsim.devices.cpu`); ``None`` takes the faster of the two.
With ``cpu_model`` (a :class:`devices.cpu.CpuModel`, scenario ``cpu_model: kernels``)
CPU experts, CPU attention and CPU shared experts are priced by the CPU kernel model
(quantised GEMV/GEMM efficiencies, thread scaling, NUMA, per-call overhead) instead of
the CPU roofline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from hetsim.devices.cpu import INT8_PATH_FORMATS, CpuModel, MatrixPath
from hetsim.devices.kernels import (
    attention_decode_time_s,
    attention_prefill_time_s,
    elementwise_time_s,
    gemm_time_s,
    kernel_fits,
)
from hetsim.devices.precision import Precision
from hetsim.devices.roofline import op_time_s, op_times_s
from hetsim.devices.spec import DeviceSpec
from hetsim.devices.sustained import DEFAULT_GPU_CLOCKS, GpuClocks
from hetsim.workloads.models.moe import MoEModel


def cpu_override(spec: DeviceSpec, cores: int | None, bandwidth_Bps: float | None) -> DeviceSpec:
    """A CPU spec limited to ``cores`` cores (peaks scaled by cores / spec.cores) and/or a
    different DRAM bandwidth: how a scenario models a core-limited or other host CPU
    until the catalogue has it (reconstruction: linear core scaling)."""
    if cores is None and bandwidth_Bps is None:
        return spec
    peaks = dict(spec.peak_flops)
    n = spec.cores
    if cores is not None:
        if not n:
            raise ValueError(f"cpu_cores: device {spec.name} has no core count to scale")
        if cores > n:
            raise ValueError(f"cpu_cores: {cores} is more than {spec.name}'s {n} cores")
        peaks = {k: v * cores / n for k, v in peaks.items()}
        n = cores
    bw = bandwidth_Bps if bandwidth_Bps is not None else spec.memory_bandwidth_Bps
    return dataclasses.replace(spec, peak_flops=peaks, cores=n, memory_bandwidth_Bps=bw)


@dataclass(frozen=True)
class StepCosts:
    """Per-layer dense work of one step (seconds), on the GPU and on the CPU."""

    attention_gpu_s: float
    attention_cpu_s: float
    shared_gpu_s: float
    shared_cpu_s: float
    dense_ffn_gpu_s: float
    lm_head_s: float
    handoff_s: float = 0.0  # GPU->CPU hidden states + CPU->GPU expert output, per layer


class StepFlops(NamedTuple):
    """FLOPs of a step's dense work (the module doc's counts, the whole model's: a GPU
    of a tensor-parallel group does 1/gpu_tp of them): per layer attention, shared
    experts and dense FFN, and the step's LM head. The energy accounting's compute
    utilisation (:mod:`hetsim.devices.power`)."""

    attention: float
    shared: float
    dense_ffn: float
    lm_head: float


_UNIT: dict[int, tuple[int, ...]] = {}


def read_only(a: np.ndarray) -> np.ndarray:
    """``a`` with its writeable flag cleared (views hand policies read-only arrays)."""
    a.setflags(write=False)
    return a


def unit_loads(n: int) -> tuple[int, ...]:
    """Loads of ``n`` experts with one token each (every decode layer-step under top-k
    gating), built once and shared."""
    a = _UNIT.get(n)
    if a is None:
        a = _UNIT[n] = (1,) * n
    return a


class MoECosts:
    """Roofline prices of a model's ops on one GPU and one CPU, plus the expert copy time."""

    def __init__(
        self,
        model: MoEModel,
        gpu: DeviceSpec,
        cpu: DeviceSpec,
        copy_s: float,
        *,
        expert_bits: float,
        dense_bits: float,
        gpu_dtype: str,
        cpu_dtype: str,
        max_tokens: int,
        gpu_expert_overhead_s: float = 0.0,
        cpu_expert_overhead_s: float = 0.0,
        cpu_layer_overhead_s: float = 0.0,
        cpu_model: CpuModel | None = None,
        cpu_format: str = "q4_k",
        cpu_calls_per_expert: int = 2,
        cpu_amx_tokens_per_expert: float | None = None,
        gpu_tp: int = 1,
        gpu_clocks: GpuClocks = DEFAULT_GPU_CLOCKS,
        tp_allreduce_s: Callable[[float], float] | None = None,
        handoff_s: Callable[[float], float] | None = None,
    ) -> None:
        self.model, self.gpu, self.cpu = model, gpu, cpu
        if gpu_tp < 1 or (gpu_tp > 1 and tp_allreduce_s is None):
            raise ValueError("gpu_tp: must be >= 1, with an all-reduce price when > 1")
        self.tp = gpu_tp
        self.tp_allreduce_s = tp_allreduce_s
        self.handoff_fn = handoff_s
        self.copy_s = copy_s
        self.dense_bits = dense_bits
        self.gpu_dtype, self.cpu_dtype = gpu_dtype, cpu_dtype
        self.expert_bytes = model.expert_bytes(expert_bits)
        loads = np.arange(max_tokens + 1, dtype=float)
        flops = model.expert_flops(1) * loads
        nbytes = self.expert_bytes + 4.0 * model.hidden * loads
        # compute roofs at the clock regime (devices/sustained.py)
        self.fits = kernel_fits(gpu, gpu_clocks)
        self.expert_precision = _weight_format(expert_bits, gpu_dtype)
        self.dense_precision = _weight_format(dense_bits, gpu_dtype)
        self.gpu_expert_s = np.asarray(
            self._gpu_mlp_s(model.expert_ffn, loads, self.expert_precision), dtype=float
        )
        self.cpu_model, self.cpu_format = cpu_model, cpu_format
        # kt-kernel's kernel switch (cpu_amx_tokens_per_expert): the AMX matrix-path
        # table, used when a call routes more than cpu_matrix_above expert-tokens
        self.cpu_matrix_s: np.ndarray | None = None
        self.cpu_matrix_above = float("inf")
        if cpu_model is None:
            self.cpu_expert_s = op_times_s(cpu, flops, nbytes, cpu_dtype)
        else:  # cpu_calls_per_expert kernel calls (0: one fused call per layer)
            extra = (cpu_calls_per_expert - 1) * cpu_model.call_overhead_s
            params, hidden = model.expert_params(), 4.0 * model.hidden

            def table(path: MatrixPath) -> np.ndarray:
                t = cpu_model.matmul_times_s(
                    params, loads, self.expert_bytes, cpu_format, hidden, path
                )
                return np.asarray(t + extra, dtype=float)

            self.cpu_expert_s = table("auto")
            if cpu_amx_tokens_per_expert is not None and cpu_format in INT8_PATH_FORMATS:
                self.cpu_expert_s = table("vector")  # kt-kernel's decode kernel
                self.cpu_matrix_s = table("matrix")
                self.cpu_matrix_above = cpu_amx_tokens_per_expert * model.routed_experts
        self.gpu_expert_s[1:] += gpu_expert_overhead_s
        self.cpu_expert_s[1:] += cpu_expert_overhead_s
        self.gpu_expert_s[0] = self.cpu_expert_s[0] = 0.0
        if self.cpu_matrix_s is not None:
            self.cpu_matrix_s[1:] += cpu_expert_overhead_s
            self.cpu_matrix_s[0] = 0.0
        self.cpu_first_s = cpu_layer_overhead_s
        # an engine's host time per MoE layer before its router (workloads/moe/engines.py):
        # the attention stage lasts at least layer_host_s, then layer_sync_s more
        self.layer_host_s = 0.0
        self.layer_sync_s = 0.0
        self._unit_times: dict[int, tuple[tuple[float, ...], tuple[float, ...]]] = {}
        # FFN prices by (device, dtype, width, tokens): the same for every decode step
        self._ffn_s: dict[tuple[int, str, int, int], float] = {}
        # context-free attention kernels by tokens and LM head by sequences (the same
        # for every decode step)
        self._attn_fixed_s: dict[int, tuple[float, float]] = {}
        self._lm_head: dict[int, float] = {}

    def expert_times(self, loads: tuple[int, ...]) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(GPU, CPU) seconds of experts at ``loads`` tokens each; built once per length
        for the shared loads of :func:`unit_loads` (the same tuples each time)."""
        n = len(loads)
        if loads is _UNIT.get(n):
            hit = self._unit_times.get(n)
            if hit is None:
                hit = self._unit_times[n] = self._times(loads)
            return hit
        return self._times(loads)

    def _times(self, loads: tuple[int, ...]) -> tuple[tuple[float, ...], tuple[float, ...]]:
        idx = np.asarray(loads, dtype=np.int64)
        cpu = self.cpu_expert_s
        if self.cpu_matrix_s is not None and sum(loads) > self.cpu_matrix_above:
            cpu = self.cpu_matrix_s  # kt-kernel: > 4 tokens per expert on average -> AMX
        return tuple(self.gpu_expert_s[idx].tolist()), tuple(cpu[idx].tolist())

    def _gpu_mlp_s(self, ffn: int, tokens: Any, precision: Precision) -> Any:
        """A gated MLP (gate+up GEMM, SiLU-and-mul, down GEMM) on the GPU, kernel by kernel
        (:mod:`hetsim.devices.kernels`), for ``tokens`` tokens (scalar or array)."""
        up, act, down = self._gpu_mlp_parts(ffn, tokens, precision)
        return up + act + down

    def _gpu_mlp_parts(self, ffn: int, tokens: Any, precision: Precision) -> tuple[Any, Any, Any]:
        """:meth:`_gpu_mlp_s` by kernel: (gate+up GEMM, activation, down GEMM)."""
        h, f, g = self.model.hidden, self.fits.fits, self.gpu
        width = ffn / self.tp if self.tp > 1 else ffn  # tensor parallel: 1/tp per GPU
        t = np.asarray(tokens, dtype=float)
        act = 3.0 * width * t * precision.activation_bytes
        return (
            gemm_time_s(g, f.gemm, t, 2 * width, h, precision),
            elementwise_time_s(g, f.elementwise, act, "activation"),
            gemm_time_s(g, f.gemm, t, h, width, precision),
        )

    def _ffn(self, spec: DeviceSpec, dtype: str, ffn: int, tokens: int) -> float:
        key = (id(spec), dtype, ffn, tokens)  # spec is self.gpu or self.cpu (held by self)
        hit = self._ffn_s.get(key)
        if hit is None:
            hit = self._ffn_s[key] = self._ffn_price(spec, dtype, ffn, tokens)
        return hit

    def _ffn_price(self, spec: DeviceSpec, dtype: str, ffn: int, tokens: int) -> float:
        params = 3 * self.model.hidden * ffn
        if params == 0:
            return 0.0
        nbytes = params * self.dense_bits / 8 + 4.0 * self.model.hidden * tokens
        if spec is self.cpu and self.cpu_model is not None:
            return self.cpu_model.matmul_time_s(params, tokens, nbytes, self.cpu_format)
        if spec is self.gpu:
            return float(self._gpu_mlp_s(ffn, tokens, self.dense_precision))
        return op_time_s(spec, 2.0 * params * tokens, nbytes, dtype)

    def _attention(
        self, spec: DeviceSpec, dtype: str, tokens: int, context: int, seqs: int = 1
    ) -> float:
        m = self.model
        new = tokens / seqs  # new tokens per sequence
        mean_ctx = context + (new + 1) / 2.0
        flops = 2.0 * m.attention_params * tokens + 4.0 * tokens * mean_ctx * m.hidden
        kv = m.kv_bytes_per_token / m.layers * seqs * (context + new)
        weights = m.attention_params * self.dense_bits / 8
        nbytes = weights + kv + 4.0 * m.hidden * tokens
        if spec is self.cpu and self.cpu_model is not None:
            proj = self.cpu_model.matmul_time_s(m.attention_params, tokens, weights,
                                                self.cpu_format)  # fmt: skip
            return proj + self.cpu_model.stream_time_s(
                kv, flops - 2.0 * m.attention_params * tokens
            )
        if spec is self.gpu:
            return self._gpu_attention_s(tokens, context, seqs)
        return op_time_s(spec, flops, nbytes, dtype)

    def _gpu_attention_s(self, tokens: int, context: int, seqs: int) -> float:
        """One layer's attention block on the GPU, kernel by kernel: the projections as
        one GEMM of ``attention_params`` weights (hidden x attention_params / hidden),
        two norms and two residual adds, and prefill (chunks of ``tokens / seqs`` new
        tokens) or decode attention over the cached KV (query width = hidden; KV width
        from the model's KV bytes per token, MLA latents included)."""
        return sum(self._gpu_attention_parts(tokens, context, seqs).values())

    def _gpu_attention_parts(self, tokens: int, context: int, seqs: int) -> dict[str, float]:
        """:meth:`_gpu_attention_s` by kernel class (``collective``: the TP all-reduces)."""
        m, g, f, p = self.model, self.gpu, self.fits.fits, self.dense_precision
        h, t, tp = m.hidden, float(tokens), self.tp
        kv_width = m.kv_bytes_per_token / (m.layers * 2 * 2)  # K and V elements per token
        proj, small = self._attention_fixed(tokens)
        q = t / seqs
        if q > 1:
            cls = "attention_prefill"
            attn = float(attention_prefill_time_s(
                g, f.attention_prefill, seqs * q * context, seqs * q * q, t, seqs * context,
                1.0 / tp, kv_width / h / tp, h, p,
            ))  # fmt: skip
        else:
            cls = "attention_decode"
            attn = float(attention_decode_time_s(
                g, f.attention_decode, seqs, seqs * (context + 1), 1.0 / tp, kv_width / h / tp, h, p
            ))  # fmt: skip
        return {"gemm": proj, "elementwise": small, cls: attn,
                "collective": self._tp_reduce_s(tokens)}  # fmt: skip

    def gpu_class_seconds(self, context: int, experts_per_token: float) -> dict[str, float]:
        """GPU seconds by kernel class of one decode token through one layer with every
        expert on the GPU: the attention block, ``experts_per_token`` routed experts and
        the shared expert (the weights of :mod:`workloads.moe.trust`'s error band)."""
        out = dict(self._gpu_attention_parts(1, context, 1))
        for ffn, n in ((self.model.expert_ffn, experts_per_token),
                       (self.model.shared_ffn, 1.0)):  # fmt: skip
            if ffn <= 0 or n <= 0:
                continue
            up, act, down = self._gpu_mlp_parts(ffn, 1, self.expert_precision)
            out["gemm"] = out.get("gemm", 0.0) + n * float(up + down)
            out["elementwise"] = out.get("elementwise", 0.0) + n * float(act)
        return out

    def _attention_fixed(self, tokens: int) -> tuple[float, float]:
        """The attention block's kernels that do not depend on the context (projection
        GEMM; norms and residual adds) on ``tokens`` tokens, priced once per count."""
        hit = self._attn_fixed_s.get(tokens)
        if hit is None:
            m, g, f, p = self.model, self.gpu, self.fits.fits, self.dense_precision
            h, t = m.hidden, float(tokens)
            proj = float(gemm_time_s(g, f.gemm, t, m.attention_params / h / self.tp, h, p))
            a = p.activation_bytes
            small = 2 * float(elementwise_time_s(g, f.elementwise, 2 * t * h * a, "norm"))
            small += 2 * float(elementwise_time_s(g, f.elementwise, 3 * t * h * a, "add"))
            hit = self._attn_fixed_s[tokens] = (proj, small)
        return hit

    def _lm_head_s(self, seqs: int) -> float:
        """The LM head GEMM on ``seqs`` sampling sequences, priced once per count."""
        hit = self._lm_head.get(seqs)
        if hit is None:
            m = self.model
            hit = self._lm_head[seqs] = float(
                gemm_time_s(
                    self.gpu, self.fits.fits.gemm, seqs, m.vocab / self.tp, m.hidden,
                    self.dense_precision,
                )
            )  # fmt: skip
        return hit

    def _tp_reduce_s(self, tokens: int) -> float:
        """The two all-reduces of a layer's activations under tensor parallelism (after
        attention and after the MLP/MoE block), charged with the attention block."""
        if self.tp == 1 or self.tp_allreduce_s is None:
            return 0.0
        nbytes = float(tokens) * self.model.hidden * self.dense_precision.activation_bytes
        return 2.0 * self.tp_allreduce_s(nbytes)

    def step_flops(self, tokens: int, context: int, seqs: int = 1) -> StepFlops:
        """:class:`StepFlops` of a step over ``tokens`` new tokens of ``seqs`` sequences
        after ``context`` tokens each (the counts :meth:`_attention` and the FFN prices
        use)."""
        m = self.model
        new = tokens / seqs
        mean_ctx = context + (new + 1) / 2.0
        attention = 2.0 * m.attention_params * tokens + 4.0 * tokens * mean_ctx * m.hidden
        shared = 6.0 * m.hidden * m.shared_experts * m.shared_ffn * tokens
        return StepFlops(attention, shared, 6.0 * m.hidden * m.dense_ffn * tokens,
                         2.0 * m.vocab * m.hidden * seqs)  # fmt: skip

    def step(self, tokens: int, context: int, seqs: int = 1) -> StepCosts:
        """Dense per-layer work of a step over ``tokens`` new tokens of ``seqs``
        sequences after ``context`` tokens each."""
        m = self.model
        g, c = (self.gpu, self.gpu_dtype), (self.cpu, self.cpu_dtype)
        shared = m.shared_experts * m.shared_ffn
        return StepCosts(
            attention_gpu_s=max(self._attention(*g, tokens, context, seqs), self.layer_host_s)
            + self.layer_sync_s,
            attention_cpu_s=self._attention(*c, tokens, context, seqs),
            shared_gpu_s=self._ffn(*g, shared, tokens),
            shared_cpu_s=self._ffn(*c, shared, tokens),
            dense_ffn_gpu_s=self._ffn(*g, m.dense_ffn, tokens),
            lm_head_s=self._lm_head_s(seqs),
            handoff_s=0.0
            if self.handoff_fn is None
            else self.handoff_fn(float(tokens) * m.hidden * self.dense_precision.activation_bytes),
        )


def _weight_format(bits: float, activations: str) -> Precision:
    """The GPU weight format nearest to ``bits`` per weight (16+: the activations' format;
    8: int8 weight-only; 4 or fewer: int4 weight-only), activations and KV in
    ``activations`` (fp16 where that is not an activation format)."""
    act = activations if activations in ("fp16", "bf16", "fp32") else "fp16"
    if bits >= 12:
        return Precision(act, act, act)  # type: ignore[arg-type]
    fmt = "int8" if bits > 5 else "int4"
    return Precision(fmt, act, act)  # type: ignore[arg-type]
