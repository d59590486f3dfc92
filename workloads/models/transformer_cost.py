"""The time of one forward iteration of a decoder-only transformer, kernel by kernel.

Every domain that prices transformer inference work uses this module (serving
iterations, queueing LLM demands). An iteration runs a batch in which sequence ``i``
adds ``q_i`` new tokens on top of ``c_i`` cached ones; ``T = sum q_i`` new tokens in
all, ``S`` sequences sample a token at the end. Per layer, on each of ``tp`` GPUs:

=====================  ==============  ===========================================
kernel                 class           shape or bytes (per TP rank)
=====================  ==============  ===========================================
input norm             elementwise     read + write ``T h``, read ``h`` weights
QKV projection         GEMM            ``T x h  @  h x (heads + 2 kv_heads) d / tp``
rotary embedding       elementwise     read + write Q and K
attention, prefill     attn. prefill   chunks ``(q_i, c_i)`` of prefilling sequences
attention, decode      attn. decode    KV of the decoding sequences' contexts
output projection      GEMM            ``T x heads d / tp  @  heads d / tp x h``
TP all-reduce          collective      ``T h`` activation bytes (``tp > 1``)
residual add           elementwise     read 2, write 1 of ``T h``
post-attention norm    elementwise     as the input norm
MLP up (+ gate)        GEMM            ``T x h  @  h x 2 ffn / tp`` (gated; ``ffn`` if not)
activation             elementwise     read ``2 T ffn / tp``, write ``T ffn / tp``
MLP down               GEMM            ``T x ffn / tp  @  ffn / tp x h``
TP all-reduce          collective      as above
residual add           elementwise     as above
=====================  ==============  ===========================================

and per iteration: the embedding gather (``T h``), the final norm, the LM head GEMM
(``S x h @ h x vocab / tp``) and sampling over ``S x vocab`` fp32 logits (priced with
the activation kernels' efficiency: no profile of sampling kernels is in the data).
Mixture-of-experts layers replace the MLP by the router GEMM (``T x h @ h x E``) and
the expert GEMMs: the expected number of distinct experts ``a = E (1 - (1 - k/E)^T)``
each run gate+up and down GEMMs on ``T k / a`` tokens (uniform routing), and the experts
are sharded over the TP ranks as Megatron does.

Weight-only formats dequantised by a kernel of their own (``Precision.weight_dequant:
materialize``, DeepSpeed-Inference's int8 path) add, before each weight GEMM, an
elementwise kernel that reads the narrow weights and writes an activation-format copy,
which the GEMM then reads (both counted in the ``gemm`` class: the copy belongs to the GEMM
it feeds), and one more launch per weight GEMM in eager mode.

**8-bit activations** (FP8, INT8 W8A8; ``Precision.stream_bytes`` and the module doc of
:mod:`hetsim.devices.precision` give the engines' code read). The GEMMs read 8-bit inputs and
write 16-bit outputs; norms, rotary, residual adds, the activation function, the
embedding, the final norm and the TP all-reduces move 16-bit tensors (2 B per element);
each weight GEMM's input is quantised by a pass that reads its 16-bit copy and writes the
8-bit one (a kernel of its own and one more launch in eager mode, or its bytes only with
``fused_elementwise``; counted with the attention block's elementwise kernels, and in the
MLP's sum, as its activation kernel is, for the MLP inputs). The LM head is priced in the
deployment's formats (engines' FP8 checkpoints usually keep it 16-bit: not modelled).
Attention runs in FP8 only where the engine does (``EngineOverheads.fp8_attention``);
otherwise its Q, O and math are 16-bit and its KV reads in the cache's format. Default
(None): FP8 attention iff the activations and the KV cache are both FP8, TensorRT-LLM's
rule: with paged context FMHA (on by default in 1.x; earlier releases defaulted it and FP8
context FMHA off) an FP8 KV cache turns FP8 context FMHA on and a 16-bit KV cache turns it
off (``tensorrt_llm/commands/build.py``: "FP8 Context FMHA is enabled by default to
support FP8 Paged Context FMHA", "FP8 Paged Context FMHA is disabled because it must be
used together with fp8 KV Cache"). vLLM with an FP8 KV cache runs attention in FP8 on its
FlashAttention-3 backend (``docs/features/quantization/quantized_kvcache.md``), but its
0.6-era docs say the FP8 KV cache brings no fused dequantise-and-attend kernel (16-bit
math): set ``fp8_attention`` for the version run. **Reconstruction**: which quantisation
passes an engine fuses into the producing kernel is version-dependent and unmeasured here.

Kernel times come from :mod:`hetsim.devices.kernels` (fitted efficiencies per device);
TP all-reduces from :func:`hetsim.devices.collectives.collective_time_s` (NCCL: the fitted
algorithm with the least time, as NCCL's tuner picks) or, for engines with their own IPC
kernel (TensorRT-LLM, vLLM, SGLang), :mod:`hetsim.devices.custom_allreduce`
(``EngineOverheads.tp_allreduce``). On the host,
each kernel launch costs ``cpu_launch_s`` unless the iteration runs as a CUDA graph
(:class:`~hetsim.devices.kernels.LaunchModel`), and every iteration pays the engine's
``framework_s + framework_per_seq_s x sequences`` (scheduling, input preparation,
sampling bookkeeping) before its kernels run.

Speed: the token-proportional part of an iteration (GEMMs, norms, collectives) depends
on ``T`` alone and the head on ``S`` alone, so both are tabulated once per cost object
(numpy over ``T = 1..table_tokens``); an iteration is then two lookups and the two
attention terms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from hetsim.devices.collectives import ALGORITHMS, CollectiveFabric, collective_time_s
from hetsim.devices.custom_allreduce import custom_allreduce
from hetsim.devices.kernels import (
    DEQUANT_KERNEL_OP,
    KernelFitRef,
    LaunchModel,
    attention_decode_time_s,
    attention_prefill_time_s,
    dequant_kernel_time_s,
    elementwise_time_s,
    gemm_time_s,
    kernel_fits,
    residual_band,
)
from hetsim.devices.precision import Precision
from hetsim.devices.spec import DeviceSpec
from hetsim.devices.sustained import DEFAULT_GPU_CLOCKS
from hetsim.workloads.models.dense import ModelSpec

#: New-token counts tabulated up front (longer iterations are priced directly).
TABLE_TOKENS = 8192
#: Kernel launches per layer in eager mode (the rows of the module's table, one per kernel).
KERNELS_PER_LAYER = 13
#: Weight GEMMs per layer among them (QKV, output projection, MLP up(+gate), MLP down).
GEMMS_PER_LAYER = 4
#: Op kind whose fitted efficiency prices the quantisation of a GEMM input to 8 bits
#: (one element in, one out, as a residual add streams its operands; no profile of a
#: quantisation kernel is in the calibration data), as :data:`DEQUANT_KERNEL_OP`.
QUANT_KERNEL_OP = DEQUANT_KERNEL_OP


@dataclass(frozen=True)
class EngineOverheads:
    """Host-side costs of a serving engine (per iteration), how kernels launch, and the
    clock regime they run at."""

    launch: LaunchModel = field(default_factory=LaunchModel)
    framework_s: float = 0.0
    framework_per_seq_s: float = 0.0
    #: norms, rotary, activation and adds fused into neighbouring kernels (TensorRT-LLM,
    #: LMDeploy TurboMind): their bytes still move, at their op's peak efficiency, but
    #: without a kernel of their own (no floor, no small-size penalty). Reconstruction:
    #: no fused-kernel profile is in the calibration data.
    fused_elementwise: bool = False
    #: clock regime of the GPUs' compute-bound kernels (:mod:`hetsim.devices.sustained`:
    #: ``sustained``, the default, or ``boost``)
    gpu_clocks: str = DEFAULT_GPU_CLOCKS
    #: attention math in FP8 under FP8 activations (None: when the KV cache is FP8 too,
    #: as TensorRT-LLM decides; module doc, "8-bit activations")
    fp8_attention: bool | None = None
    #: how the TP all-reduces run: ``nccl`` (the fabric's fitted NCCL algorithms, the one
    #: with the least predicted time, as NCCL's tuner picks) or an engine's own IPC kernel,
    #: ``trtllm`` or ``vllm`` (:mod:`hetsim.devices.custom_allreduce`)
    tp_allreduce: str = "nccl"
    #: GEMM memory curve of a GPU that ``kernels.yaml`` gives a GEMV memory fit
    #: (``gemv_memory_borrow``): ``shipped`` (that fit) or ``lender`` (its kernel
    #: lender's curve); :func:`hetsim.devices.kernels.kernel_fits`
    gemv_memory: str = "shipped"
    #: Q, K, V and the MLP's gate and up projections as separate GEMMs, each quantising
    #: its own input under 8-bit activations (llama.cpp's graph: three ``ggml_mul_mat``
    #: for Q, K, V and two for gate and up), instead of fused QKV and gate+up GEMMs
    split_projections: bool = False
    #: kernels per layer that the engine's graph runs beyond this module's table (e.g.
    #: llama.cpp: a separate weight multiply after each RMS norm, a second rotary
    #: kernel, two KV-cache copies, attention as KQ, softmax, KQV and a copy, SiLU and
    #: the gate multiply apart): each costs the elementwise class's minimum kernel time
    #: on the GPU and one launch
    extra_kernels_per_layer: int = 0

    def __post_init__(self) -> None:
        if self.extra_kernels_per_layer < 0:
            raise ValueError(
                f"extra_kernels_per_layer: must be >= 0, got {self.extra_kernels_per_layer}"
            )
        if self.tp_allreduce != "nccl":
            custom_allreduce(self.tp_allreduce)  # ValueError naming the valid ones


@dataclass(frozen=True)
class Batch:
    """What one iteration computes, in the sums the cost needs.

    ``tokens``: new tokens ``T``; ``sampled``: sequences that sample a token; prefill
    chunks: ``prefill_tokens = sum q``, ``prefill_ctx = sum c``, ``cross_units = sum q c``,
    ``self_units = sum q^2``; decoding sequences: ``decode_seqs`` and their cached
    tokens ``decode_ctx`` (a decode step with look-ahead ``K`` counts as a prefill chunk
    of ``K`` tokens)."""

    tokens: int
    sampled: int
    prefill_tokens: int = 0
    prefill_ctx: int = 0
    cross_units: float = 0.0
    self_units: float = 0.0
    decode_seqs: int = 0
    decode_ctx: int = 0


@dataclass(frozen=True)
class TransformerCost:
    """Prices iterations of ``model`` on ``tp`` GPUs of type ``spec`` (module doc)."""

    model: ModelSpec
    spec: DeviceSpec
    tp: int = 1
    precision: Precision = field(default_factory=Precision)
    fabric: CollectiveFabric | None = None
    overheads: EngineOverheads = field(default_factory=EngineOverheads)
    table_tokens: int = TABLE_TOKENS

    def __post_init__(self) -> None:
        self.precision.check(self.spec)
        m = self.model
        if m.heads % self.tp or (m.kv_heads % self.tp and self.tp % m.kv_heads):
            raise ValueError(
                f"tp {self.tp} does not divide {m.name}'s {m.heads} heads / {m.kv_heads} KV heads"
            )

    # ---- shapes -------------------------------------------------------------------------
    @cached_property
    def fits(self) -> KernelFitRef:
        """The kernel fits this device uses (calibrated, borrowed or uncalibrated)."""
        o = self.overheads
        return kernel_fits(self.spec, o.gpu_clocks, gemv_memory=o.gemv_memory)

    @cached_property
    def _moe(self) -> tuple[int, int, int, int]:
        """(routed experts E, top k, MoE layers, expert FFN) or zeros for a dense model."""
        m: Any = self.model
        if getattr(m, "moe_layers", 0) and getattr(m, "routed_experts", 0):
            expert_ffn = round(m.expert_params / (3 * m.hidden))
            return int(m.routed_experts), int(m.top_k), int(m.moe_layers), expert_ffn
        return 0, 0, 0, 0

    @property
    def kv_heads_per_rank(self) -> float:
        """KV heads held by one TP rank (replicated when tp exceeds the KV heads)."""
        return max(self.model.kv_heads / self.tp, 1.0)

    # ---- the token-proportional part: a table over T ------------------------------------
    def _dense_layer_s(self, t: np.ndarray) -> dict[str, np.ndarray]:
        """Per-layer seconds of the kernels that depend on T only, by kernel class."""
        m, tp, p = self.model, self.tp, self.precision
        h, d = m.hidden, m.head_dim
        a = p.stream_bytes  # 16-bit between kernels under 8-bit activations
        o = self.overheads
        if o.split_projections:  # Q, K, V apart, each quantising its own input
            qkv = self._gemm(t, m.heads * d / tp, h) + 2 * self._gemm(t, m.kv_heads * d / tp, h)
            qkv_quant = 3 * self._quant(t, h)
        else:
            qkv = self._gemm(t, (m.heads + 2 * m.kv_heads) * d / tp, h)
            qkv_quant = self._quant(t, h)
        gemm = qkv + self._gemm(t, h, m.heads * d / tp)
        norm = 2 * self._ew(2 * t * h * a + h * a, "norm")
        rope = self._ew(2 * t * (m.heads + m.kv_heads) * d / tp * a, "rotary")
        add = 2 * self._ew(3 * t * h * a, "add")
        quant = qkv_quant + self._quant(t, m.heads * d / tp)  # QKV, output inputs
        # the engine's other kernels, at the elementwise class's minimum kernel time
        extra_s = o.extra_kernels_per_layer * self.fits.fits.elementwise.floor_s
        extra = np.full_like(np.asarray(t, dtype=float), extra_s)
        experts, top_k, moe_layers, expert_ffn = self._moe
        if experts:
            dense_share = (m.layers - moe_layers) / m.layers
            mlp = self._mlp_s(t, m.ffn) * dense_share
            mlp += self._moe_s(t, experts, top_k, expert_ffn) * (moe_layers / m.layers)
        else:
            mlp = self._mlp_s(t, m.ffn)
        comm = np.zeros_like(t, dtype=float)
        if tp > 1 and self.fabric is not None:
            comm = 2 * np.array([self._allreduce_s(int(x)) for x in t])
        return {"gemm": gemm + mlp, "elementwise": norm + rope + add + quant + extra,
                "collective": comm}  # fmt: skip

    def _gemm(self, t: Any, n: Any, k: Any) -> Any:
        """A weight GEMM ``(t x k) @ (k x n)``, with its dequantisation kernel when the
        engine materialises dequantised weights (``Precision.weight_dequant``; once per
        GEMM, whatever ``t``: the copy does not depend on the tokens)."""
        f, p = self.fits.fits, self.precision
        t_arr = np.asarray(t, dtype=float)
        # 8-bit inputs, 16-bit output (module doc, "8-bit activations")
        out = p.stream_bytes if p.quantised_activations else None
        gemm = gemm_time_s(self.spec, f.gemm, t_arr, n, k, p, out)
        if not p.materializes:
            return gemm
        deq = dequant_kernel_time_s(self.spec, f.elementwise, n, k, p)
        return gemm + np.where(t_arr > 0, deq, 0.0)

    def _ew(self, nbytes: Any, op: str) -> Any:
        """Seconds of an elementwise kernel (or of its bytes inside a fused kernel)."""
        fit = self.fits.fits.elementwise
        if self.overheads.fused_elementwise and op != "embedding":
            return np.asarray(nbytes, dtype=float) / (
                self.spec.memory_bandwidth_Bps * fit.max_eff(op)
            )
        return elementwise_time_s(self.spec, fit, nbytes, op)

    def _quant(self, t: Any, k: Any) -> Any:
        """The quantisation pass of an 8-bit GEMM's ``t x k`` input from its 16-bit copy
        (read 2 B, write 1 B per element; 0 unless the activations are 8-bit): a kernel of
        its own, or its bytes only with ``fused_elementwise`` (module doc)."""
        p = self.precision
        if not p.quantised_activations:
            return np.zeros_like(np.asarray(t, dtype=float))
        nbytes = np.asarray(t, dtype=float) * k * (p.stream_bytes + p.activation_bytes)
        return self._ew(nbytes, QUANT_KERNEL_OP)

    def _gated(self) -> bool:
        return bool(getattr(self.model, "gated_mlp", True))

    def _mlp_s(self, t: np.ndarray, ffn: int) -> np.ndarray:
        """Up (+gate), activation and down of a dense MLP on ``t`` tokens."""
        m, tp, p = self.model, self.tp, self.precision
        up_n = (2 if self._gated() else 1) * ffn / tp
        act_bytes = (up_n + ffn / tp) * t * p.stream_bytes
        if self.overheads.split_projections and self._gated():  # gate and up apart
            up = 2 * self._gemm(t, ffn / tp, m.hidden) + 2 * self._quant(t, m.hidden)
        else:
            up = self._gemm(t, up_n, m.hidden) + self._quant(t, m.hidden)
        return (
            up
            + self._ew(act_bytes, "activation")
            + self._gemm(t, m.hidden, ffn / tp)
            + self._quant(t, ffn / tp)
        )

    def _moe_s(self, t: np.ndarray, experts: int, top_k: int, ffn: int) -> np.ndarray:
        """Router GEMM plus the active experts' MLPs on their share of ``t`` tokens."""
        m = self.model
        active = experts * (1.0 - (1.0 - top_k / experts) ** t)
        per_expert = np.where(active > 0, t * top_k / np.maximum(active, 1e-9), 0.0)
        router = self._gemm(t, experts, m.hidden)
        return router + active * self._mlp_s(per_expert, ffn)

    def _allreduce_s(self, tokens: int) -> float:
        """One TP all-reduce of ``tokens`` activations: the engine's custom kernel up to
        its largest message, else NCCL's fastest fitted algorithm
        (``EngineOverheads.tp_allreduce``)."""
        fabric = self.fabric
        assert fabric is not None
        msg = int(tokens * self.model.hidden * self.precision.stream_bytes)
        kind = self.overheads.tp_allreduce
        if kind != "nccl" and custom_allreduce(kind).handles(msg):
            return custom_allreduce(kind).time_s(self.tp, msg, fabric)
        fitted = [a for a in ALGORITHMS["all_reduce"] if a in fabric.algorithms]
        return min(collective_time_s("all_reduce", self.tp, msg, fabric, a) for a in fitted)

    def _per_token_s(self, t: np.ndarray) -> dict[str, np.ndarray]:
        """All layers' T-dependent seconds plus the embedding, by class (launch-adjusted)."""
        layer = self._dense_layer_s(t)
        out = {k: self.model.layers * v for k, v in layer.items()}
        f = self.fits.fits
        h, a = self.model.hidden, self.precision.stream_bytes
        out["elementwise"] = out["elementwise"] + elementwise_time_s(
            self.spec, f.elementwise, 2 * t * h * a, "embedding"
        )
        return out

    @cached_property
    def _token_table(self) -> np.ndarray:
        """Seconds of the T-dependent kernels for T = 0..table_tokens."""
        t = np.arange(self.table_tokens + 1, dtype=float)
        total = _total(self._per_token_s(t))
        total[0] = 0.0
        return total

    def tokens_s(self, tokens: int) -> float:
        """Seconds of the T-dependent kernels of an iteration with ``tokens`` new tokens."""
        if tokens <= self.table_tokens:
            return float(self._token_table[tokens])
        return float(_total(self._per_token_s(np.array([float(tokens)])))[0])

    # ---- the head: a table over S ------------------------------------------------------
    def _head_parts(self, s: np.ndarray) -> dict[str, np.ndarray]:
        m, p, spec = self.model, self.precision, self.spec
        f = self.fits.fits
        h, a = m.hidden, p.stream_bytes
        norm = self._ew(2 * s * h * a + h * a, "norm")
        head = self._gemm(s, m.vocab / self.tp, h)
        sampling = elementwise_time_s(spec, f.elementwise, 2 * 4.0 * s * m.vocab, "activation")
        return {"gemm": head, "elementwise": norm + sampling}

    @cached_property
    def _head_table(self) -> np.ndarray:
        s = np.arange(self.table_tokens + 1, dtype=float)
        total = _total(self._head_parts(s))
        total[0] = 0.0
        return total

    def head_s(self, sampled: int) -> float:
        """Seconds of final norm, LM head and sampling for ``sampled`` sequences."""
        if sampled <= self.table_tokens:
            return float(self._head_table[sampled])
        return float(_total(self._head_parts(np.array([float(sampled)])))[0])

    # ---- attention ---------------------------------------------------------------------
    @cached_property
    def attention_fp8(self) -> bool:
        """Attention math in FP8: FP8 activations and the engine's ``fp8_attention``, or,
        when that is None, an FP8 KV cache too (module doc, "8-bit activations")."""
        p = self.precision
        if p.activations != "fp8":
            return False
        flag = self.overheads.fp8_attention
        return p.kv_cache == "fp8" if flag is None else flag

    @cached_property
    def attention_precision(self) -> Precision:
        """The formats attention kernels run in: the deployment's, or 16-bit Q, O and math
        (the KV cache in its own format) unless the activations are FP8 and
        :attr:`attention_fp8`."""
        p = self.precision
        if not p.quantised_activations or self.attention_fp8:
            return p
        return Precision(p.weights, "fp16", p.kv_cache, p.group_size)

    def attention_s(self, b: Batch) -> tuple[float, float]:
        """(prefill, decode) attention seconds of all layers for batch ``b``."""
        m, p, spec = self.model, self.attention_precision, self.spec
        f = self.fits.fits
        heads, kvh = m.heads / self.tp, self.kv_heads_per_rank
        pre = dec = 0.0
        if b.prefill_tokens:
            pre = float(attention_prefill_time_s(
                spec, f.attention_prefill, b.cross_units, b.self_units, b.prefill_tokens,
                b.prefill_ctx, heads, kvh, m.head_dim, p,
            ))  # fmt: skip
        if b.decode_seqs:
            dec = float(attention_decode_time_s(
                spec, f.attention_decode, b.decode_seqs, b.decode_ctx, heads, kvh,
                m.head_dim, p,
            ))  # fmt: skip
        return m.layers * pre, m.layers * dec

    @cached_property
    def _attn_consts(self) -> tuple[float, ...]:
        """Constants of the scalar attention formulas of :meth:`step_s` (hot path)."""
        m, p, spec = self.model, self.attention_precision, self.spec
        f = self.fits.fits
        ap, ad = f.attention_prefill, f.attention_decode
        heads, kvh, d = m.heads / self.tp, self.kv_heads_per_rank, m.head_dim
        dtype = p.activations if p.activations != "int8" else "fp16"
        peak = spec.peak(dtype) * ap.compute_clock  # as attention_prefill_time_s
        return (
            4.0 * heads * d, ap.self_factor, peak, ap.compute.max_eff,
            ap.compute.half_size, ap.compute.exponent,
            2.0 * heads * d * p.activation_bytes, 2.0 * kvh * d * p.kv_bytes,
            spec.memory_bandwidth_Bps * ap.memory_max_eff, ap.sharpness, ap.floor_s,
            ad.memory.max_eff, ad.memory.half_size, ad.memory.exponent, ad.per_seq_s,
            ad.floor_s, spec.memory_bandwidth_Bps, float(m.layers),
        )  # fmt: skip

    def step_s(
        self, tokens: int, sampled: int, prefill_tokens: int, prefill_ctx: int,
        cross_units: float, self_units: float, decode_seqs: int, decode_ctx: int,
    ) -> float:  # fmt: skip
        """:meth:`iteration_s` from plain numbers (the serving hot path: no objects, no
        numpy); equal to it up to floating-point rounding. :meth:`decode_steps_s`
        repeats its decode-only arithmetic: change both together."""
        if tokens <= 0:
            return 0.0
        (fl_unit, self_f, peak, ce, ch, cx, q_bytes, kv_bytes, pre_bw, sharp, pre_floor,
         de, dh, dx, per_seq, dec_floor, bw, layers) = self._attn_consts  # fmt: skip
        attn = 0.0
        if prefill_tokens:
            flops = fl_unit * (cross_units + self_f * self_units)
            tc = flops / (peak * ce / (1.0 + (ch / flops) ** cx)) if flops > 0 else 0.0
            tm = (q_bytes * prefill_tokens + kv_bytes * (prefill_tokens + prefill_ctx)) / pre_bw
            big, small = (tc, tm) if tc >= tm else (tm, tc)
            attn += pre_floor + big * (1.0 + (small / big) ** sharp) ** (1.0 / sharp)
        if decode_seqs:
            nbytes = max(kv_bytes * decode_ctx + q_bytes * decode_seqs, 1.0)
            attn += (
                dec_floor + per_seq * decode_seqs + nbytes / (bw * de / (1.0 + (dh / nbytes) ** dx))
            )
        gpu = (
            (self._token_table[tokens] if tokens <= self.table_tokens else self.tokens_s(tokens))
            + (self._head_table[sampled] if sampled <= self.table_tokens else self.head_s(sampled))
            + layers * attn
        )
        o = self.overheads
        floor = self._launch_floor_s
        return float(max(gpu, floor)) + o.framework_s + o.framework_per_seq_s * sampled

    def decode_steps_s(self, seqs: int, ctx: int, count: int) -> list[float]:
        """:meth:`step_s` of ``count`` consecutive decode-only iterations of ``seqs``
        sequences, the first with ``ctx`` cached tokens in all (each adds ``seqs``):
        ``step_s(seqs, seqs, 0, 0, 0.0, 0.0, seqs, ctx + seqs + k seqs)``, k = 0..count-1.
        Its decode branch, term by term in the same order, so the floats are identical
        (``tests/test_serving_decode_runs.py`` checks; change both together)."""
        if seqs <= 0 or seqs > self.table_tokens:
            return [
                self.step_s(seqs, seqs, 0, 0, 0.0, 0.0, seqs, ctx + seqs + k * seqs)
                for k in range(count)
            ]
        (_, _, _, _, _, _, q_bytes, kv_bytes, _, _, _,
         de, dh, dx, per_seq, dec_floor, bw, layers) = self._attn_consts  # fmt: skip
        fixed = self._token_table[seqs] + self._head_table[seqs]
        per_seq_attn = dec_floor + per_seq * seqs
        q = q_bytes * seqs
        bw_de = bw * de
        floor = self._launch_floor_s
        o = self.overheads
        frame, frame_seqs = o.framework_s, o.framework_per_seq_s * seqs
        out = []
        c = ctx + seqs
        for _ in range(count):
            nbytes = max(kv_bytes * c + q, 1.0)
            attn = 0.0 + (per_seq_attn + nbytes / (bw_de / (1.0 + (dh / nbytes) ** dx)))
            out.append(float(max(fixed + layers * attn, floor)) + frame + frame_seqs)
            c += seqs
        return out

    # ---- one iteration -----------------------------------------------------------------
    @cached_property
    def _launch_floor_s(self) -> float:
        """Host time to launch one iteration's kernels (eager mode; 0 with graphs)."""
        o = self.overheads
        launch = o.launch
        if launch.cuda_graphs:
            return launch.graph_launch_s
        layers = self.model.layers
        # K, V (and the gate, in a gated MLP) as GEMMs of their own
        split = (2 + (1 if self._gated() else 0)) if o.split_projections else 0
        gemms = GEMMS_PER_LAYER + split
        kernels = (KERNELS_PER_LAYER + split + o.extra_kernels_per_layer) * layers + 4
        if self.precision.materializes:  # one dequantisation kernel per weight GEMM
            kernels += gemms * layers + 1
        if self.precision.quantised_activations:  # one quantisation kernel per weight GEMM
            kernels += gemms * layers
        return kernels * launch.cpu_launch_s

    def iteration_s(self, b: Batch) -> float:
        """Seconds of one iteration (0 for an empty batch): the GPU's kernels, or the
        host's launches when those take longer (eager mode), plus the engine's
        per-iteration overhead."""
        if b.tokens <= 0:
            return 0.0
        pre, dec = self.attention_s(b)
        gpu = self.tokens_s(b.tokens) + self.head_s(b.sampled) + pre + dec
        o = self.overheads
        seqs = b.sampled
        return max(gpu, self._launch_floor_s) + o.framework_s + o.framework_per_seq_s * seqs

    def breakdown(self, b: Batch) -> dict[str, float]:
        """Seconds of one iteration by kernel class (GPU time, before launch limits)."""
        t = np.array([float(b.tokens)])
        parts = {k: float(v[0]) for k, v in self._per_token_s(t).items()}
        head = self._head_parts(np.array([float(b.sampled)]))
        for k, v in head.items():
            parts[k] = parts.get(k, 0.0) + float(v[0])
        parts["attention_prefill"], parts["attention_decode"] = self.attention_s(b)
        parts["framework"] = self.overheads.framework_s + self.overheads.framework_per_seq_s * (
            b.sampled
        )
        return parts

    def error_band(self, batches: tuple[Batch, ...]) -> tuple[float, float, str]:
        """(p50, p90, fit kind) of this config's kernel residuals, weighted by the
        kernel classes' shares of GPU time over ``batches`` (representative
        iterations). The kind is the least trusted of the classes used: calibrated,
        borrowed or uncalibrated."""
        shares: dict[str, float] = {}
        for b in batches:
            for cls, s in self.breakdown(b).items():
                shares[cls] = shares.get(cls, 0.0) + s
        p50, p90 = residual_band(self.fits, shares)
        kinds = {
            self.fits.class_kind(c)
            for c, s in shares.items()
            if s > 0 and c in ("gemm", "elementwise", "attention_prefill", "attention_decode")
        }
        kind = next((k for k in ("uncalibrated", "borrowed") if k in kinds), "calibrated")
        return p50, p90, kind

    def kernel_classes(self) -> tuple[str, ...]:
        """The kernel classes (and collective) this cost uses."""
        classes = ["gemm", "elementwise", "attention_prefill", "attention_decode"]
        if self.tp > 1 and self.fabric is not None:
            classes.append("collective")
        return tuple(classes)


def _total(parts: dict[str, np.ndarray]) -> np.ndarray:
    """Element-wise sum of the parts' arrays (a new float array)."""
    return np.sum(np.stack([np.asarray(v, dtype=float) for v in parts.values()]), axis=0)


# ---- convenience: the two canonical iterations -----------------------------------------
def prefill_batch(prompt_tokens: int) -> Batch:
    """One whole prompt alone in an iteration."""
    q = int(prompt_tokens)
    return Batch(tokens=q, sampled=1, prefill_tokens=q, self_units=float(q * q))


def decode_batch(batch: int, mean_ctx: float) -> Batch:
    """One decode step of ``batch`` sequences of ``mean_ctx`` cached tokens each."""
    return Batch(tokens=batch, sampled=batch, decode_seqs=batch, decode_ctx=int(batch * mean_ctx))
