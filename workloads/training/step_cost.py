"""One micro-batch's kernels on one rank of a TP x CP x PP x DP training job, and its memory.

Forward kernels per layer are those of the inference cost model
(:mod:`hetsim.workloads.models.transformer_cost`) on ``T = b s / cp`` tokens per rank:
norms, QKV, rotary, flash attention (causal, the rank's share of the sequence), output
projection, MLP up(+gate), activation, down, residual adds. Backward of a GEMM
``(m x k) @ (k x n)`` is two GEMMs of their own shapes: dgrad ``(m x n) @ (n x k)`` and
wgrad ``(k x m) @ (m x n)`` (together 2x the forward FLOPs). Elementwise backward kernels
move the bytes listed in :data:`EW_BACKWARD_BYTES`.

**Attention backward (reconstruction).** No training profile is in the calibration data.
The backward of flash attention does 2.5x the forward's matrix FLOPs (five matmuls to the
forward's two, FlashAttention-2, Dao 2023, Sec. 3.1.2) and reaches a lower share of peak;
it is priced as the forward kernel class on 2.5x the work, divided by
``attn_bwd_relative_efficiency`` (default 0.86 = 63% / 73%, FlashAttention-2's best
backward / forward fraction of A100 peak, its Sec. 4.1). Both are named parameters.
With ``attention_kernel`` naming a kernel (``fa2``, ``fa3``, ``cudnn``, ``eager``), the
forward and backward are priced instead from that kernel's published microbenchmarks
(:mod:`hetsim.devices.attention_kernels`: FLOPs counted the papers' way, the causal half,
over the device's BF16 peak times the measured efficiency at the kernel's key length: the
sequence, ``s / cp`` for a ring step, the slice's end for a slice); the backward uses the
kernel's own measured efficiency and ``attn_bwd_relative_efficiency`` is not applied.

**FP8 GEMMs (reconstruction of Transformer Engine's / torchao's casts).** A GEMM in FP8
first casts its 16-bit operands: forward, the activation and the weight (read 2 B, write
1 B per element); backward, the output gradient (3 B per element) and transposed FP8
copies of the activation and the weight for wgrad and dgrad (read 1 B, write 1 B). These
run as elementwise kernels. Scaling (``fp8_scaling``): ``delayed`` (Transformer Engine's
DelayedScaling: the scale comes from earlier steps' amax history and the amax is taken
inside the cast kernel; its once-per-step amax all-reduce of a few KB is left out) or
``dynamic`` (per-tensor current scaling: torchao's tensor-wise dynamic scales, TE's
Float8CurrentScaling "FP8-CS"): the cast needs the amax of the tensor it casts, so an amax
reduction reads each 16-bit activation (forward) and output gradient (backward) once more
before its cast (2 B per element; weights' scales are taken with their casts, once per
step in torchtitan's precomputed FSDP scales; the amax all-reduces over sequence-parallel
shards are left out; **reconstruction**). Attention stays 16-bit.

**Clock regime** (``gpu_clocks``, default ``sustained``; ``sustained_matmul_ratio`` overrides
the device's measured ratio). Decided once, in the cost layer, for every domain
(:mod:`hetsim.devices.sustained`, applied by :func:`~hetsim.devices.kernels.kernel_fits`):
the kernel fits are boost-clock bursts, and under back-to-back compute-bound kernels a GPU
settles at the clock its power limit allows, so the compute roofs of BF16/FP16 GEMMs and
of attention (fitted class or published profile) are scaled by the device's sustained
ratio (Bekman's MSMF / MAMF: 0.848 for GH100 parts, 0.815 for B200, 1.0 where none is
measured); memory-bound roofs and elementwise kernels are left as they are. FP8 GEMMs are
priced by the GEMM class's ``format_compute_scale`` (fitted to the K03 cuBLASLt FP8
measurements, themselves sustained), once, in the kernel layer, as in every other domain;
the sustained ratio is not applied on top. No power-capped H100 measurement is in hand:
the 500 W part carries the 700 W value as an upper bound, and the ratio is swept in
``scenarios/training-power-limit.yaml``. A run's power cap (``power_cap_w``,
:mod:`hetsim.devices.power`) multiplies the ratio by its clock factor, in the kernel layer.

**Eager elementwise kernels** (``elementwise_impl: torchtitan-eager``; default ``fused``).
Without ``torch.compile``, torchtitan's Llama runs each PyTorch op of its RMSNorm (fp32
upcast), complex-fp32 rotary, SwiGLU and ``repeat_kv`` as its own streaming kernel;
:mod:`hetsim.workloads.training.eager_ops` lists their bytes from the model code
(**reconstruction**) and prices them at the device's STREAM rate. Residual adds, the
embedding, the loss and FP8 casts are priced as in the fused case.

**Tensor parallelism.** Without sequence parallelism each layer all-reduces ``T h``
activations twice forward and twice backward; with it, each all-reduce becomes a
reduce-scatter plus an all-gather of the same buffer (Korthikanti et al., 2022) and the
norms, adds and dropout run on ``T / tp`` tokens. ``tp_comm_overlap`` (Megatron's
userbuffer overlap, reconstruction) hides a collective behind the GEMM beside it in
``tp_overlap_chunks`` pieces: exposed ``max(comm - gemm, comm / chunks)``.

**Context parallelism** (``cp_comm: ring``, ring attention, reconstruction of Megatron's
CP): each rank keeps ``s / cp`` tokens (load-balanced causal halves); K and V of the other
``cp - 1`` ranks pass around the ring during attention, forward once and backward twice
(K, V and their gradients), overlapped with the attention kernel: exposed
``max(0, ring - attention)``.
``cp_comm: ulysses`` (DeepSpeed-Ulysses): an all-to-all turns the rank's ``s / cp`` tokens
of all heads into all ``s`` tokens of ``1 / cp`` of the heads before attention (Q, K, V)
and back after it (O); backward all-to-alls dO and dQ, dK, dV. They are not overlapped
(exposed in full); attention runs unsplit on the rank's heads.

**Expert parallelism** (MoE layers; reconstruction of Megatron-core's all-to-all token
dispatcher with expert tensor parallel 1, ``ep`` consecutive ranks): the MLP becomes a
router GEMM on the rank's ``T / tp`` tokens (sequence parallel), a permute, a dispatch
all-to-all over the ``ep`` group, the ``E / ep`` local experts' GEMMs on their tokens, the
activation, a combine all-to-all and an unpermute; backward mirrors it (two all-to-alls of
gradients, dgrad + wgrad). The busiest rank computes and receives ``T / tp x top_k x L``
token copies, ``L`` the routing load (:attr:`StepKnobs.moe_load`: the imbalance, capped by
the capacity factor when tokens are dropped, or the capacity when padded to it); each
all-to-all moves that many ``h``-wide activations per rank. The all-to-alls are exposed
(no overlap with compute is modelled). Shared experts run on every token as a TP-sharded
dense MLP with its TP collectives; a MoE layer without them has only the attention's.

**Activation memory** per layer and micro-batch (Korthikanti et al., 2022, Sec. 4, with
flash attention): ``10 s b h`` outside the TP region (``8 s b h`` without dropout, whose
two masks are the difference; divided by ``tp`` with sequence parallelism) plus
``8 s b h + m s b f`` inside it (divided by ``tp``), ``m = 4`` for a GeLU MLP and 6 for
a gated one (up, gate and their product); ``s`` is the rank's ``s / cp``. A MoE layer
keeps its shared experts' ``m s b f`` the same way and, for each routed token copy, its
permuted input (``2 h``) and the expert's ``m f``. Full
recomputation keeps only each layer's ``2 s b h`` input (``/ tp`` with
SP) and charges the whole forward again; selective recomputation (Megatron's) drops the
attention core's ``5 a s^2 b`` only, which flash attention never stores, so with flash it
costs and saves nothing.

**Op-level selective checkpointing** (``recompute: op``, torchtitan's
``selective_ac_option = "op"``): inside each layer, the outputs of the attention kernel and
of every other matmul are saved, in forward order the 1st, 3rd, ... of ``wq, wk, wv, wo,
w1, w3, w2`` (torchtitan's policy recomputes "every second mm"; its count runs on across
calls, so which half is saved alternates, and the first call's half is priced here), plus
the layer's input and the attention's fp32 log-sum-exp; everything else (the other
matmuls, norms, rotary, activation, adds) is recomputed before the layer's backward.
Dense layers only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from hetsim.devices.attention_kernels import (
    AttentionKernel,
    KernelProfileRef,
    attention_kernel_time_s,
    kernel_profile,
)
from hetsim.devices.kernels import (
    KernelFitRef,
    KernelFits,
    attention_prefill_time_s,
    elementwise_time_s,
    gemm_time_s,
    kernel_fits,
)
from hetsim.devices.precision import Precision
from hetsim.devices.spec import DeviceSpec
from hetsim.devices.sustained import DEFAULT_GPU_CLOCKS, clocked_spec
from hetsim.workloads.training.eager_ops import (
    ElementwiseImpl,
    eager_op_s,
    repeat_kv_bytes,
    stream_kernel_s,
)
from hetsim.workloads.training.parallel_comm import Fabrics, Layout

Recompute = Literal["none", "selective", "op", "full"]

#: Elementwise backward bytes as a multiple of the forward's (read x and dy, write dx;
#: the activation's backward reads both of its inputs and the gradient, writes two).
EW_BACKWARD_BYTES = {"norm": 1.5, "rotary": 1.0, "activation": 5.0 / 3.0, "add": 1.0}


@dataclass(frozen=True)
class DenseModel:
    """A decoder-only dense transformer as training sees it."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    gated_mlp: bool = True
    tied_embeddings: bool = False
    #: routed experts per MoE layer (0: a dense model), each a ``hidden x expert_ffn`` MLP
    experts: int = 0
    top_k: int = 0
    expert_ffn: int = 0
    #: FFN width of the shared experts together (0: none), run on every token
    shared_ffn: int = 0
    #: leading layers with the dense ``ffn`` MLP (DeepSeek's ``first_k_dense_replace``)
    dense_layers: int = 0

    @property
    def head_dim(self) -> int:
        """Hidden size per head."""
        return self.hidden // self.heads

    @property
    def moe(self) -> bool:
        """Whether the model has routed experts."""
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        """Layers with routed experts (all but the leading ``dense_layers``)."""
        return self.layers - self.dense_layers if self.moe else 0

    @property
    def attention_params(self) -> int:
        """QKV and output projection weights of one layer."""
        h, d = self.hidden, self.head_dim
        return h * (self.heads + 2 * self.kv_heads) * d + self.heads * d * h

    def mlp_params(self, ffn: int) -> int:
        """Weights of an MLP of width ``ffn`` (three matrices when gated, else two)."""
        return (3 if self.gated_mlp else 2) * self.hidden * ffn

    @property
    def params_per_layer(self) -> int:
        """QKV, output projection and MLP weights of one dense layer (norms left out)."""
        return self.attention_params + self.mlp_params(self.ffn)

    @property
    def expert_params(self) -> int:
        """Weights of one routed expert."""
        return self.mlp_params(self.expert_ffn)

    @property
    def moe_dense_params(self) -> int:
        """Weights of one MoE layer outside the routed experts: attention, router, shared
        experts (the part sharded like a dense layer's)."""
        return self.attention_params + self.hidden * self.experts + self.mlp_params(self.shared_ffn)

    def layer_params(self, moe: bool) -> int:
        """All weights of one dense (``moe`` False) or MoE layer."""
        if not moe:
            return self.params_per_layer
        return self.moe_dense_params + self.experts * self.expert_params

    def active_params(self, moe: bool) -> int:
        """Weights one token meets in a layer (Megatron's FLOP count: router left out)."""
        if not moe:
            return self.params_per_layer
        routed = self.top_k * self.expert_params
        return self.attention_params + self.mlp_params(self.shared_ffn) + routed

    @property
    def embedding_params(self) -> int:
        """Input embedding plus output head (``v h`` each unless tied)."""
        return (1 if self.tied_embeddings else 2) * self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All parameters."""
        dense = self.layers - self.moe_layers
        return (dense * self.params_per_layer + self.moe_layers * self.layer_params(True)
                + self.embedding_params)  # fmt: skip


@dataclass(frozen=True)
class StepKnobs:
    """Framework settings that change a micro-batch's kernels."""

    micro_batch: int = 1
    seq_len: int = 2048
    sequence_parallel: bool = True
    recompute: Recompute = "none"
    tp_comm_overlap: bool = False
    tp_overlap_chunks: int = 4
    attn_bwd_flops_ratio: float = 2.5
    attn_bwd_relative_efficiency: float = 0.86
    dropout: bool = False
    #: tokens an expert may take as a multiple of the balanced share (None: dropless)
    moe_capacity_factor: float | None = None
    #: tokens of the busiest expert-parallel rank over the balanced share, before the
    #: capacity cap (1.0: balanced routing, as force-balanced benchmarks run it)
    moe_load_imbalance: float = 1.0
    #: pad every expert's tokens up to its capacity (Megatron's
    #: ``moe_pad_expert_input_to_capacity``)
    moe_pad_to_capacity: bool = False
    #: context parallelism's exchange: ring attention's K/V ring, or Ulysses' all-to-all
    cp_comm: Literal["ring", "ulysses"] = "ring"
    #: FP8 scaling: ``delayed`` (amax fused into the cast) or ``dynamic`` (an amax pass
    #: over each activation and output gradient before its cast; module doc)
    fp8_scaling: Literal["delayed", "dynamic"] = "delayed"
    #: the attention kernel the framework runs: ``fitted`` (the ``attention_prefill``
    #: class fit, backward at ``attn_bwd_relative_efficiency``) or a published kernel
    #: profile of :mod:`hetsim.devices.attention_kernels` (its own backward efficiency)
    attention_kernel: AttentionKernel = "fitted"
    #: the clock regime of compute-bound kernels (:mod:`hetsim.devices.sustained`)
    gpu_clocks: str = DEFAULT_GPU_CLOCKS
    #: sustained tensor-core throughput over the kernel fits' (short-run, boost-clock)
    #: throughput when sustained (None: the device's measured value; module doc)
    sustained_matmul_ratio: float | None = None
    #: how norms, rotary and the gated activation run: the kernel classes' fused fits, or
    #: torchtitan's eager modules kernel by kernel (:mod:`~hetsim.workloads.training.eager_ops`)
    elementwise_impl: ElementwiseImpl = "fused"

    @property
    def moe_load(self) -> float:
        """Tokens the busiest expert-parallel rank computes and receives over the balanced
        share: the imbalance, capped by the capacity factor (dropped tokens skip the
        experts), or the capacity itself when padded to it."""
        cf = self.moe_capacity_factor
        if cf is None:
            return self.moe_load_imbalance
        return cf if self.moe_pad_to_capacity else min(self.moe_load_imbalance, cf)


def megatron_flops_per_token(m: DenseModel, seq_len: int) -> float:
    """Model FLOPs per token of one training step (forward + backward, no recompute),
    Megatron-LM's convention (Narayanan et al., SC'21, Appendix; generalised to grouped
    KV heads and gated MLPs as Megatron-LM's ``num_floating_point_operations`` does):
    ``3 x 2 x`` (per layer: QKV, projection and MLP weights, plus ``2 s h`` of attention
    scores and values, counted without the causal mask) plus the LM head ``2 x 3 h v``.
    For a GPT (f = 4h, no GQA) this is ``72 l h^2 (1 + s / 6h + v / 12 l h)`` per token.
    A MoE layer counts its shared experts and ``top_k`` routed experts, not the router."""
    attn = 4.0 * seq_len * m.heads * m.head_dim
    dense = m.layers - m.moe_layers
    linear = dense * m.active_params(False) + m.moe_layers * m.active_params(True)
    return 3.0 * (2.0 * linear + m.layers * attn + 2.0 * m.hidden * m.vocab)


@dataclass(frozen=True)
class MicroBatchCost:
    """Seconds of one micro-batch on one rank, per layer and for the model's ends."""

    spec: DeviceSpec
    model: DenseModel
    layout: Layout
    fabrics: Fabrics
    knobs: StepKnobs = field(default_factory=StepKnobs)
    precision: Precision = field(default_factory=lambda: Precision("bf16", "bf16", "bf16"))
    #: the part ``[lo, hi)`` of each sequence this micro-batch unit covers (a slice of a
    #: sliced schedule: its tokens attend to the ``lo`` before them as cached context)
    slice_lo: float = 0.0
    slice_hi: float = 1.0
    #: price a layer with routed experts instead of the dense MLP
    moe_layer: bool = False

    @cached_property
    def fit_ref(self) -> KernelFitRef:
        """Kernel fits of the device (calibrated, borrowed or derived) at the clock regime."""
        kn = self.knobs
        return kernel_fits(self.spec, kn.gpu_clocks, kn.sustained_matmul_ratio)

    @property
    def fits(self) -> KernelFits:
        """Kernel fits of the device, compute roofs at the clock regime (:attr:`fit_ref`)."""
        return self.fit_ref.fits

    @cached_property
    def compute_spec(self) -> DeviceSpec:
        """The device with its compute peaks at the clock regime's factor, for the
        published attention profiles (priced from the spec, not from a kernel fit)."""
        return clocked_spec(self.spec, self.fit_ref.clock_ratio)

    @cached_property
    def attention_profile(self) -> KernelProfileRef | None:
        """The published attention-kernel profile priced (None: the fitted class)."""
        kernel = self.knobs.attention_kernel
        return None if kernel == "fitted" else kernel_profile(self.spec, kernel)

    @property
    def sliced(self) -> bool:
        """Whether this unit is a slice of the sequence rather than all of it."""
        return self.slice_hi - self.slice_lo < 1.0

    @property
    def tokens(self) -> int:
        """Tokens one rank computes per unit: ``b s / cp`` (times the slice's share)."""
        share = self.slice_hi - self.slice_lo
        return round(self.knobs.micro_batch * self.knobs.seq_len * share) // self.layout.cp

    @property
    def attention_bytes(self) -> float:
        """Bytes of one attention activation element (16-bit even under FP8 GEMMs)."""
        return float(self._attn_precision.activation_bytes)

    @property
    def _attn_precision(self) -> Precision:
        a = self.precision.activations if self.precision.activations != "fp8" else "bf16"
        return Precision(a, a, a)

    def _gemm(self, m: float, n: float, k: float) -> float:
        return float(gemm_time_s(self.spec, self.fits.gemm, m, n, k, self.precision))

    def _gemm_fwd_bwd(self, m: float, n: float, k: float) -> tuple[float, float]:
        """(forward, backward = dgrad + wgrad) seconds of ``(m x k) @ (k x n)``."""
        return self._gemm(m, n, k), self._gemm(m, k, n) + self._gemm(k, n, m)

    def _ew(self, nbytes: float, op: str) -> float:
        return float(elementwise_time_s(self.spec, self.fits.elementwise, nbytes, op))

    def _tp(self, op: str, nbytes: float) -> float:
        return self.fabrics.time_s(op, self.layout, "tp", nbytes)

    # ---- one layer ------------------------------------------------------------------
    @cached_property
    def layer(self) -> dict[str, float]:
        """Seconds of one layer: ``fwd_<class>``, ``bwd_<class>`` for gemm, attention,
        elementwise, tp (exposed TP communication) and cp (exposed ring exchange)."""
        md, lay, kn = self.model, self.layout, self.knobs
        tp, t, h, d = lay.tp, float(self.tokens), md.hidden, md.head_dim
        a = self.precision.activation_bytes
        heads, kvh = md.heads / tp, max(md.kv_heads / tp, 1.0)
        ffn = md.shared_ffn if self.moe_layer else md.ffn
        up = 2 if md.gated_mlp else 1
        gemms = self._layer_gemms()
        fb = [self._gemm_fwd_bwd(*g) for g in gemms]
        sp = tp if kn.sequence_parallel else 1
        norm = 2 * self._ew((2 * t * h / sp + h) * a, "norm")
        add = 2 * self._ew(3 * t * h / sp * a, "add")
        rope = self._ew(2 * t * (heads + kvh) * d * a, "rotary")
        act_bytes = (up + 1) * ffn / tp * t * a
        act = self._ew(act_bytes, "activation") if ffn else 0.0
        moe = self._experts() if self.moe_layer else dict.fromkeys(self._MOE_KEYS, 0.0)
        attn_f, attn_b = self._attention(heads, kvh)
        # TP collectives (per layer: 2 forward, 2 backward, each on the T h buffer)
        buf = t * h * a
        if kn.sequence_parallel:
            one = self._tp("reduce_scatter", buf) + self._tp("all_gather", buf)
        else:
            one = self._tp("all_reduce", buf)
        pair = fb[1::2]  # the GEMMs each collective follows (fwd) / precedes (bwd)
        tp_f = sum(self._exposed(one, g[0]) for g in pair)
        tp_b = sum(self._exposed(one, g[1]) for g in pair)
        cp_f, cp_b = self._ring(attn_f, attn_b, kvh)
        cast_f, cast_b = self._fp8_casts(gemms + self._expert_gemms()[1:])
        if kn.elementwise_impl == "torchtitan-eager":
            eager_f, eager_b = self._eager_elementwise(heads, kvh, ffn)
            fwd_ew = add + cast_f + moe["fwd_ew"] + eager_f
            bwd_ew = add * EW_BACKWARD_BYTES["add"] + cast_b + moe["bwd_ew"] + eager_b
        else:
            fwd_ew = norm + add + rope + act + cast_f + moe["fwd_ew"]
            bwd_ew = (
                norm * EW_BACKWARD_BYTES["norm"] + add * EW_BACKWARD_BYTES["add"]
                + rope * EW_BACKWARD_BYTES["rotary"] + cast_b + moe["bwd_ew"]
                + (self._ew(act_bytes * EW_BACKWARD_BYTES["activation"], "activation")
                   if ffn else 0)
            )  # fmt: skip
        return {
            "fwd_gemm": sum(f for f, _ in fb) + moe["fwd_gemm"],
            "bwd_gemm": sum(b for _, b in fb) + moe["bwd_gemm"],
            "fwd_attention": attn_f, "bwd_attention": attn_b,
            "fwd_elementwise": fwd_ew, "bwd_elementwise": bwd_ew,
            "fwd_tp": tp_f, "bwd_tp": tp_b, "fwd_cp": cp_f, "bwd_cp": cp_b,
            "fwd_ep": moe["fwd_ep"], "bwd_ep": moe["bwd_ep"],
        }  # fmt: skip

    def _eager_elementwise(self, heads: float, kvh: float, ffn: float) -> tuple[float, float]:
        """(forward, backward) seconds of one layer's norms, rotary, SwiGLU and
        ``repeat_kv`` copies as torchtitan's eager modules run them
        (:mod:`hetsim.workloads.training.eager_ops`; 16-bit activations)."""
        md, kn, tp = self.model, self.knobs, self.layout.tp
        t, h, d = float(self.tokens), md.hidden, md.head_dim
        fit = self.fits.elementwise
        sp = tp if kn.sequence_parallel else 1

        def op(name: str, phase: str, n: float) -> float:
            return eager_op_s(self.spec, fit, name, phase, n)

        out = []
        for phase in ("fwd", "bwd"):
            s = 2 * op("norm", phase, t * h / sp)
            s += op("rotary", phase, t * heads * d) + op("rotary", phase, t * kvh * d)
            if ffn and md.gated_mlp:
                s += op("swiglu", phase, t * ffn / tp)
            elif ffn:  # one fused activation kernel either way
                a = self.precision.activation_bytes
                ratio = EW_BACKWARD_BYTES["activation"] if phase == "bwd" else 1.0
                s += self._ew(2 * ffn / tp * t * a * ratio, "activation")
            per_kv = repeat_kv_bytes(heads / kvh)[0 if phase == "fwd" else 1]
            s += 2 * stream_kernel_s(self.spec, fit, per_kv * t * kvh * d)  # K and V
            out.append(s)
        return out[0], out[1]

    # ---- routed experts -------------------------------------------------------------
    _MOE_KEYS = ("fwd_gemm", "bwd_gemm", "fwd_ew", "bwd_ew", "fwd_ep", "bwd_ep")

    @property
    def routed_tokens(self) -> float:
        """Token copies the busiest expert-parallel rank computes in one MoE layer:
        its own ``T / tp`` tokens (sequence-parallel shard) times ``top_k`` times the
        routing load (:attr:`StepKnobs.moe_load`)."""
        return self.tokens / self.layout.tp * self.model.top_k * self.knobs.moe_load

    def _expert_gemms(self) -> list[tuple[float, float, float]]:
        """(m, n, k) of every routed-expert GEMM on one rank, router included: each of
        its ``E / ep`` experts takes ``routed_tokens / (E / ep)`` tokens."""
        if not self.moe_layer:
            return []
        md = self.model
        local = md.experts / self.layout.ep
        n = self.routed_tokens / local
        up = 2 if md.gated_mlp else 1
        router = (self.tokens / self.layout.tp, float(md.experts), float(md.hidden))
        experts = [(n, up * md.expert_ffn, md.hidden), (n, md.hidden, md.expert_ffn)]
        return [router] + [g for g in experts for _ in range(round(local))]

    def ep_bytes(self) -> float:
        """Bytes of one expert-parallel all-to-all per rank (dispatch or combine, forward
        or backward): the busiest rank's routed token copies of ``h`` activations."""
        return self.routed_tokens * self.model.hidden * self.precision.activation_bytes

    def _experts(self) -> dict[str, float]:
        """Seconds of the routed experts of one MoE layer (reconstruction of Megatron-core's
        all-to-all token dispatcher with expert tensor parallel 1): router GEMM; permute,
        dispatch all-to-all over the ``ep`` group, the local experts' GEMMs (a grouped
        GEMM priced as its members), activation, combine all-to-all, unpermute. Backward
        runs the mirror image: two all-to-alls of the gradients, dgrad + wgrad."""
        md = self.model
        a = self.precision.activation_bytes
        fb = [self._gemm_fwd_bwd(*g) for g in self._expert_gemms()]
        r = self.routed_tokens
        move = 2.0 * r * md.hidden * a  # read + write one copy of every routed token
        permute = 2 * self._ew(move, "embedding")  # permute before, unpermute after
        act_bytes = ((2 if md.gated_mlp else 1) + 1) * md.expert_ffn * r * a
        act = self._ew(act_bytes, "activation")
        a2a = 2 * self.fabrics.time_s("all_to_all", self.layout, "ep", self.ep_bytes())
        return {
            "fwd_gemm": sum(f for f, _ in fb), "bwd_gemm": sum(b for _, b in fb),
            "fwd_ew": permute + act,
            "bwd_ew": permute + self._ew(act_bytes * EW_BACKWARD_BYTES["activation"],
                                         "activation"),
            "fwd_ep": a2a, "bwd_ep": a2a,
        }  # fmt: skip

    def _layer_gemms(self) -> list[tuple[float, float, float]]:
        """(m, n, k) per rank of a layer's fused GEMMs: QKV, projection, MLP up(+gate) and
        down (the TP collective sits after the 2nd and 4th); no MLP for a MoE layer without
        shared experts."""
        md, tp = self.model, self.layout.tp
        t, h, d = float(self.tokens), md.hidden, md.head_dim
        heads, kvh = md.heads / tp, max(md.kv_heads / tp, 1.0)
        ffn = md.shared_ffn if self.moe_layer else md.ffn
        up = 2 if md.gated_mlp else 1
        gemms = [(t, (heads + 2 * kvh) * d, h), (t, h, heads * d)]
        if ffn:
            gemms += [(t, up * ffn / tp, h), (t, h, ffn / tp)]
        return gemms

    def _fp8_casts(self, gemms: list[tuple[float, float, float]]) -> tuple[float, float]:
        """(forward, backward) seconds of FP8 casts around the GEMMs (module doc)."""
        if self.precision.math_dtype() != "fp8":
            return 0.0, 0.0
        fwd = sum(self._ew(3.0 * (m * k + k * n), "activation") for m, n, k in gemms)
        bwd = sum(self._ew(3.0 * m * n + 2.0 * (m * k + k * n), "activation") for m, n, k in gemms)
        if self.knobs.fp8_scaling == "dynamic":  # amax of the activation / output gradient
            fwd += sum(self._ew(2.0 * m * k, "activation") for m, _, k in gemms)
            bwd += sum(self._ew(2.0 * m * n, "activation") for m, n, _ in gemms)
        return fwd, bwd

    def _exposed(self, comm_s: float, gemm_s: float) -> float:
        if not self.knobs.tp_comm_overlap:
            return comm_s
        return max(comm_s - gemm_s, comm_s / self.knobs.tp_overlap_chunks)

    def _attention(self, heads: float, kvh: float) -> tuple[float, float]:
        """(forward, backward) seconds of causal flash attention on the rank's tokens."""
        md, kn, cp = self.model, self.knobs, self.layout.cp
        if kn.cp_comm == "ulysses" and cp > 1:  # all of the sequence, 1/cp of the heads
            heads, kvh, cp = heads / cp, max(kvh / cp, 1.0), 1
        b, s = kn.micro_batch, kn.seq_len
        q = s / cp
        self_units = b * q * q
        cross_units = b * (s * s / (2.0 * cp) - q * q / 2.0)
        ctx = b * (s - q)
        if self.sliced:  # cp is 1: the slice's queries on the slices before it
            q = s * (self.slice_hi - self.slice_lo)
            self_units, cross_units, ctx = (
                b * q * q,
                b * q * s * self.slice_lo,
                b * s * self.slice_lo,
            )
        ref = self.attention_profile
        if ref is not None:  # a published kernel profile, at the kernel's key length
            keys = s * self.slice_hi if self.sliced else s / cp
            flops = 4.0 * heads * md.head_dim * (cross_units + 0.5 * self_units)
            fwd = attention_kernel_time_s(self.compute_spec, ref.profile, "forward", flops, keys)
            bwd = attention_kernel_time_s(self.compute_spec, ref.profile, "backward",
                                          kn.attn_bwd_flops_ratio * flops, keys)  # fmt: skip
            return fwd, bwd
        prec = self._attn_precision
        fit = self.fits.attention_prefill

        def run(scale: float) -> float:
            return float(attention_prefill_time_s(
                self.spec, fit, scale * cross_units, scale * self_units, b * q, ctx,
                heads, kvh, md.head_dim, prec,
            ))  # fmt: skip

        fwd = run(1.0)
        bwd = run(kn.attn_bwd_flops_ratio) / kn.attn_bwd_relative_efficiency
        return fwd, bwd

    def ulysses_bytes(self) -> tuple[float, float]:
        """(Q, K and V; O) bytes per rank of Ulysses' two all-to-alls per layer forward
        (backward: dO and dQ, dK, dV of the same sizes). K/V heads fewer than ``cp`` are
        sent to every rank that needs them (replicated)."""
        md, lay = self.model, self.layout
        hq, kvh = md.heads / lay.tp, max(md.kv_heads / lay.tp, 1.0)
        unit = self.tokens * md.head_dim * self.attention_bytes
        return unit * (hq + 2 * max(kvh, float(lay.cp))), unit * hq

    def _ring(self, attn_f: float, attn_b: float, kvh: float) -> tuple[float, float]:
        """Exposed seconds of the context-parallel exchange (forward, backward): the ring
        KV exchange, or Ulysses' all-to-alls (``cp_comm``)."""
        cp = self.layout.cp
        if cp <= 1:
            return 0.0, 0.0
        if self.knobs.cp_comm == "ulysses":
            one = sum(self.fabrics.time_s("all_to_all", self.layout, "cp", x)
                      for x in self.ulysses_bytes())  # fmt: skip
            return one, one
        kv = 2.0 * self.tokens * kvh * self.model.head_dim * self._attn_precision.activation_bytes
        hop = self.fabrics.time_s("all_gather", self.layout, "cp", kv * cp) / (cp - 1)
        ring_f = (cp - 1) * hop
        return max(0.0, ring_f - attn_f), max(0.0, 2 * ring_f - attn_b)

    # ---- totals per micro-batch ---------------------------------------------------------
    def layer_fwd_s(self) -> float:
        """Forward seconds of one layer (kernels plus exposed TP/CP communication)."""
        return sum(v for k, v in self.layer.items() if k.startswith("fwd_"))

    def layer_bwd_s(self) -> float:
        """Backward seconds of one layer, including its recomputation."""
        bwd = sum(v for k, v in self.layer.items() if k.startswith("bwd_"))
        return bwd + self.layer_recompute_s()

    def layer_wgrad_s(self) -> float:
        """Seconds of one layer's weight-gradient GEMMs (each GEMM's ``(k x m) @ (m x n)``,
        routed experts and router included): the W unit of a split backward; the rest of
        the backward (dgrad, attention, elementwise, TP/CP/EP traffic, recomputation) is
        its B unit."""
        return sum(self._gemm(k, n, m) for m, n, k in self._layer_gemms() + self._expert_gemms())

    def layer_recompute_s(self) -> float:
        """Seconds of forward work recomputed before one layer's backward."""
        if self.knobs.recompute == "full":
            return self.layer_fwd_s()
        if self.knobs.recompute == "op":
            _, again = self._op_matmuls()
            gemms = sum(self._gemm(*g) for g in again)
            casts = self._fp8_casts(self._layer_gemms())[0]  # of the whole forward
            return gemms + self._fp8_casts(again)[0] + self.layer["fwd_elementwise"] - casts
        return 0.0

    def _dense_gemms(self) -> list[tuple[float, float, float]]:
        """(m, n, k) of a dense layer's matmuls as torchtitan's Llama runs them, in forward
        order: wq, wk, wv, wo, then w1, w3 (gated) and w2 (or fc1, fc2)."""
        md, tp = self.model, self.layout.tp
        t, h, d = float(self.tokens), md.hidden, md.head_dim
        heads, kvh = md.heads / tp, max(md.kv_heads / tp, 1.0)
        f = md.ffn / tp
        mlp = [(t, f, h)] * (2 if md.gated_mlp else 1) + [(t, h, f)]
        return [(t, heads * d, h), (t, kvh * d, h), (t, kvh * d, h), (t, h, heads * d), *mlp]

    def _op_matmuls(self) -> tuple[list[tuple[float, float, float]], ...]:
        """(saved, recomputed) matmuls of one layer under op-level checkpointing."""
        if self.moe_layer:
            raise ValueError("recompute: op (torchtitan's op-level checkpointing) is modelled "
                             "for dense layers only")  # fmt: skip
        mms = self._dense_gemms()
        return mms[0::2], mms[1::2]

    def recompute_flops_ratio(self) -> float:
        """Recomputed FLOPs of one layer over its forward FLOPs (HFU's extra share)."""
        if self.knobs.recompute == "full":
            return 1.0
        if self.knobs.recompute == "op":
            again = sum(2.0 * m * n * k for m, n, k in self._op_matmuls()[1])
            return again / self.layer_flops()[0]
        return 0.0

    def layer_flops(self) -> tuple[float, float]:
        """(forward, backward) FLOPs one rank executes for one layer (hardware count,
        causal attention halved)."""
        md, kn, lay = self.model, self.knobs, self.layout
        t = self.tokens
        gemm = 2.0 * t * md.params_per_layer / lay.tp
        if self.moe_layer:
            gemm = (
                2.0
                * t
                * (md.attention_params + md.hidden * md.experts + md.mlp_params(md.shared_ffn))
                / lay.tp
            )
            gemm += 2.0 * self.routed_tokens * md.expert_params
        s, lo, hi = kn.seq_len, self.slice_lo, self.slice_hi
        pairs = s * s * (hi * hi - lo * lo) / 2.0 / lay.cp  # causal query-key pairs
        attn = 4.0 * kn.micro_batch * pairs * md.heads * md.head_dim / lay.tp
        return gemm + attn, 2 * gemm + kn.attn_bwd_flops_ratio * attn

    @cached_property
    def embedding(self) -> tuple[float, float]:
        """(forward, backward) seconds of the embedding (gather; scatter-add of gradients,
        plus the vocab-parallel all-reduce of its output with TP)."""
        t, h, a = float(self.tokens), self.model.hidden, self.precision.activation_bytes
        gather = self._ew(2 * t * h * a, "embedding")
        comm = self._tp("all_reduce", t * h * a)
        return gather + comm, 1.5 * gather

    @cached_property
    def head(self) -> tuple[float, float]:
        """(forward, backward) seconds of final norm, LM head GEMM and cross-entropy loss
        over fp32 logits (vocab-parallel: ``v / tp`` columns per rank)."""
        md, t, a = self.model, float(self.tokens), self.precision.activation_bytes
        v = md.vocab / self.layout.tp
        f, b = self._gemm_fwd_bwd(t, v, md.hidden)
        norm = self._ew(2 * t * md.hidden * a, "norm")
        norm_b = 1.5 * norm
        if self.knobs.elementwise_impl == "torchtitan-eager":
            fit = self.fits.elementwise
            norm = eager_op_s(self.spec, fit, "norm", "fwd", t * md.hidden)
            norm_b = eager_op_s(self.spec, fit, "norm", "bwd", t * md.hidden)
        loss_f = self._ew(2 * 4.0 * t * v, "activation")  # softmax over fp32 logits
        loss_b = self._ew(3 * 4.0 * t * v, "activation")
        small = 2 * self._tp("all_reduce", 4.0 * t)
        return f + norm + loss_f + small, b + norm_b + loss_b

    # ---- memory -------------------------------------------------------------------------
    def _full_activation_bytes(self) -> float:
        md, kn, tp = self.model, self.knobs, self.layout.tp
        sbh = self.tokens * md.hidden * 1.0
        sp = tp if kn.sequence_parallel else 1
        per_f = 6.0 if md.gated_mlp else 4.0
        mlp = per_f * self.tokens * (md.shared_ffn if self.moe_layer else md.ffn)
        outside = (10.0 if kn.dropout else 8.0) * sbh
        routed = 0.0
        if self.moe_layer:  # expert inputs and intermediates of the routed token copies
            routed = self.routed_tokens * (2.0 * md.hidden + per_f * md.expert_ffn)
        return outside / sp + (8.0 * sbh + mlp) / tp + routed

    def layer_activation_bytes(self) -> float:
        """Activations one layer keeps from forward to backward for one unit. A slice
        under full recompute also keeps its K and V: the later slices' recomputed
        forwards attend to them."""
        if self.knobs.recompute in ("full", "op"):
            sp = self.layout.tp if self.knobs.sequence_parallel else 1
            kept = 2.0 * self.tokens * self.model.hidden / sp
            if self.knobs.recompute == "op":  # saved matmul and attention outputs (16-bit)
                md, t = self.model, self.tokens
                heads = md.heads / self.layout.tp
                saved = sum(m * n for m, n, _ in self._op_matmuls()[0])
                kept += self.attention_bytes * (saved + t * heads * md.head_dim)
                kept += 4.0 * t * heads  # log-sum-exp, fp32
            if self.sliced:
                kvh = max(self.model.kv_heads / self.layout.tp, 1.0)
                kept += 2.0 * self.tokens * kvh * self.model.head_dim * 2.0
            return kept
        return self._full_activation_bytes()

    def layer_working_bytes(self) -> float:
        """One layer's full activations, held while its backward runs under full or
        op-level recomputation (zero otherwise: they are already counted)."""
        full = self.knobs.recompute in ("full", "op")
        return self._full_activation_bytes() if full else 0.0

    def logits_bytes(self) -> float:
        """fp32 logits and their gradient on the last stage for one micro-batch."""
        return 2 * 4.0 * self.tokens * self.model.vocab / self.layout.tp


def fit_trust(cost: MicroBatchCost, extra_classes: tuple[str, ...] = ()) -> dict[str, str]:
    """Which kernel fits priced a layer (``model_fits``: calibrated | borrowed |
    uncalibrated, ``kernel_classes``, ``borrowed_fits``: the columns ``docs/fidelity``
    copies); ``extra_classes`` (e.g. ``collective``) are listed as used."""
    ref = cost.fit_ref
    attn = cost.attention_profile
    classes = [c for c in ("gemm", "attention_prefill", "elementwise")
               if attn is None or c != "attention_prefill"]  # fmt: skip
    kinds = [ref.class_kind(c) for c in classes]
    borrowed = [f"{cost.spec.name}.{c}<-{ref.fitted_on.get(c) or 'roofline'}"
                for c, k in zip(classes, kinds, strict=True) if k != "calibrated"]  # fmt: skip
    borrowed += ref.borrowed_extras((cost.precision.math_dtype(),))
    used = classes + list(extra_classes)
    if attn is not None:  # a published kernel profile (devices/attention_kernels.yaml)
        name = f"attention_{attn.profile.kernel}"
        used.append(name)
        if attn.borrowed:
            kinds.append("borrowed")
            borrowed.append(f"{cost.spec.name}.{name}<-{attn.profile.device}")
    kind = next((k for k in ("uncalibrated", "borrowed") if k in kinds), "calibrated")
    return {"model_fits": kind, "kernel_classes": ";".join(sorted(used)),
            "borrowed_fits": ";".join(borrowed)}  # fmt: skip
