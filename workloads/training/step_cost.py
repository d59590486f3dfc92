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

**FP8 GEMMs (reconstruction of Transformer Engine's / torchao's casts).** A GEMM in FP8
first casts its 16-bit operands: forward, the activation and the weight (read 2 B, write
1 B per element); backward, the output gradient (3 B per element) and transposed FP8
copies of the activation and the weight for wgrad and dgrad (read 1 B, write 1 B). These
run as elementwise kernels; scaling-factor reductions are left out. Attention stays 16-bit.

**Tensor parallelism.** Without sequence parallelism each layer all-reduces ``T h``
activations twice forward and twice backward; with it, each all-reduce becomes a
reduce-scatter plus an all-gather of the same buffer (Korthikanti et al., 2022) and the
norms, adds and dropout run on ``T / tp`` tokens. ``tp_comm_overlap`` (Megatron's
userbuffer overlap, reconstruction) hides a collective behind the GEMM beside it in
``tp_overlap_chunks`` pieces: exposed ``max(comm - gemm, comm / chunks)``.

**Context parallelism** (ring attention, reconstruction of Megatron's CP): each rank keeps
``s / cp`` tokens (load-balanced causal halves); K and V of the other ``cp - 1`` ranks pass
around the ring during attention, forward once and backward twice (K, V and their
gradients), overlapped with the attention kernel: exposed ``max(0, ring - attention)``.

**Activation memory** per layer and micro-batch (Korthikanti et al., 2022, Sec. 4, with
flash attention): ``10 s b h`` outside the TP region (``8 s b h`` without dropout, whose
two masks are the difference; divided by ``tp`` with sequence parallelism) plus
``8 s b h + m s b f`` inside it (divided by ``tp``), ``m = 4`` for a GeLU MLP and 6 for
a gated one (up, gate and their product); ``s`` is the rank's ``s / cp``. Full
recomputation keeps only each layer's ``2 s b h`` input (``/ tp`` with
SP) and charges the whole forward again; selective recomputation (Megatron's) drops the
attention core's ``5 a s^2 b`` only, which flash attention never stores, so with flash it
costs and saves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from hetsim.devices.kernels import (
    KernelFits,
    attention_prefill_time_s,
    elementwise_time_s,
    gemm_time_s,
    kernel_fits,
)
from hetsim.devices.precision import Precision
from hetsim.devices.spec import DeviceSpec
from hetsim.workloads.training.parallel_comm import Fabrics, Layout

Recompute = Literal["none", "selective", "full"]

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

    @property
    def head_dim(self) -> int:
        """Hidden size per head."""
        return self.hidden // self.heads

    @property
    def params_per_layer(self) -> int:
        """QKV, output projection and MLP weights of one layer (norms left out)."""
        h, d = self.hidden, self.head_dim
        attn = h * (self.heads + 2 * self.kv_heads) * d + self.heads * d * h
        return attn + (3 if self.gated_mlp else 2) * h * self.ffn

    @property
    def embedding_params(self) -> int:
        """Input embedding plus output head (``v h`` each unless tied)."""
        return (1 if self.tied_embeddings else 2) * self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All parameters."""
        return self.layers * self.params_per_layer + self.embedding_params


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


def megatron_flops_per_token(m: DenseModel, seq_len: int) -> float:
    """Model FLOPs per token of one training step (forward + backward, no recompute),
    Megatron-LM's convention (Narayanan et al., SC'21, Appendix; generalised to grouped
    KV heads and gated MLPs as Megatron-LM's ``num_floating_point_operations`` does):
    ``3 x 2 x`` (per layer: QKV, projection and MLP weights, plus ``2 s h`` of attention
    scores and values, counted without the causal mask) plus the LM head ``2 x 3 h v``.
    For a GPT (f = 4h, no GQA) this is ``72 l h^2 (1 + s / 6h + v / 12 l h)`` per token."""
    per_layer = 2.0 * m.params_per_layer + 4.0 * seq_len * m.heads * m.head_dim
    return 3.0 * (m.layers * per_layer + 2.0 * m.hidden * m.vocab)


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

    @cached_property
    def fits(self) -> KernelFits:
        """Kernel fits of the device (calibrated, borrowed or derived)."""
        return kernel_fits(self.spec).fits

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
        gemms = [  # (m, n, k) per rank; the TP collective sits after the 2nd and 4th
            (t, (heads + 2 * kvh) * d, h),
            (t, h, heads * d),
            (t, (2 if md.gated_mlp else 1) * md.ffn / tp, h),
            (t, h, md.ffn / tp),
        ]
        fb = [self._gemm_fwd_bwd(*g) for g in gemms]
        sp = tp if kn.sequence_parallel else 1
        norm = 2 * self._ew((2 * t * h / sp + h) * a, "norm")
        add = 2 * self._ew(3 * t * h / sp * a, "add")
        rope = self._ew(2 * t * (heads + kvh) * d * a, "rotary")
        up_n = (2 if md.gated_mlp else 1) * md.ffn / tp
        act_bytes = (up_n + md.ffn / tp) * t * a
        act = self._ew(act_bytes, "activation")
        attn_f, attn_b = self._attention(heads, kvh)
        # TP collectives (per layer: 2 forward, 2 backward, each on the T h buffer)
        buf = t * h * a
        if kn.sequence_parallel:
            one = self._tp("reduce_scatter", buf) + self._tp("all_gather", buf)
        else:
            one = self._tp("all_reduce", buf)
        pair = [fb[1], fb[3]]  # the GEMMs each collective follows (fwd) / precedes (bwd)
        tp_f = sum(self._exposed(one, g[0]) for g in pair)
        tp_b = sum(self._exposed(one, g[1]) for g in pair)
        cp_f, cp_b = self._ring(attn_f, attn_b, kvh)
        cast_f, cast_b = self._fp8_casts(gemms)
        fwd_ew = norm + add + rope + act + cast_f
        bwd_ew = (
            norm * EW_BACKWARD_BYTES["norm"] + add * EW_BACKWARD_BYTES["add"]
            + rope * EW_BACKWARD_BYTES["rotary"]
            + self._ew(act_bytes * EW_BACKWARD_BYTES["activation"], "activation") + cast_b
        )  # fmt: skip
        return {
            "fwd_gemm": sum(f for f, _ in fb), "bwd_gemm": sum(b for _, b in fb),
            "fwd_attention": attn_f, "bwd_attention": attn_b,
            "fwd_elementwise": fwd_ew, "bwd_elementwise": bwd_ew,
            "fwd_tp": tp_f, "bwd_tp": tp_b, "fwd_cp": cp_f, "bwd_cp": cp_b,
        }  # fmt: skip

    def _fp8_casts(self, gemms: list[tuple[float, float, float]]) -> tuple[float, float]:
        """(forward, backward) seconds of FP8 casts around the GEMMs (module doc)."""
        if self.precision.math_dtype() != "fp8":
            return 0.0, 0.0
        fwd = sum(self._ew(3.0 * (m * k + k * n), "activation") for m, n, k in gemms)
        bwd = sum(self._ew(3.0 * m * n + 2.0 * (m * k + k * n), "activation") for m, n, k in gemms)
        return fwd, bwd

    def _exposed(self, comm_s: float, gemm_s: float) -> float:
        if not self.knobs.tp_comm_overlap:
            return comm_s
        return max(comm_s - gemm_s, comm_s / self.knobs.tp_overlap_chunks)

    def _attention(self, heads: float, kvh: float) -> tuple[float, float]:
        """(forward, backward) seconds of causal flash attention on the rank's tokens."""
        md, kn, cp = self.model, self.knobs, self.layout.cp
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

    def _ring(self, attn_f: float, attn_b: float, kvh: float) -> tuple[float, float]:
        """Exposed seconds of the ring KV exchange (forward, backward)."""
        cp = self.layout.cp
        if cp <= 1:
            return 0.0, 0.0
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

    def layer_recompute_s(self) -> float:
        """Seconds of forward work recomputed before one layer's backward."""
        if self.knobs.recompute == "full":
            return self.layer_fwd_s()
        return 0.0

    def layer_flops(self) -> tuple[float, float]:
        """(forward, backward) FLOPs one rank executes for one layer (hardware count,
        causal attention halved)."""
        md, kn, lay = self.model, self.knobs, self.layout
        t = self.tokens
        gemm = 2.0 * t * md.params_per_layer / lay.tp
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
        loss_f = self._ew(2 * 4.0 * t * v, "activation")  # softmax over fp32 logits
        loss_b = self._ew(3 * 4.0 * t * v, "activation")
        small = 2 * self._tp("all_reduce", 4.0 * t)
        return f + norm + loss_f + small, b + 1.5 * norm + loss_b

    # ---- memory -------------------------------------------------------------------------
    def _full_activation_bytes(self) -> float:
        md, kn, tp = self.model, self.knobs, self.layout.tp
        sbh = self.tokens * md.hidden * 1.0
        sp = tp if kn.sequence_parallel else 1
        mlp = (6.0 if md.gated_mlp else 4.0) * self.tokens * md.ffn
        outside = (10.0 if kn.dropout else 8.0) * sbh
        return outside / sp + (8.0 * sbh + mlp) / tp

    def layer_activation_bytes(self) -> float:
        """Activations one layer keeps from forward to backward for one unit. A slice
        under full recompute also keeps its K and V: the later slices' recomputed
        forwards attend to them."""
        if self.knobs.recompute == "full":
            sp = self.layout.tp if self.knobs.sequence_parallel else 1
            kept = 2.0 * self.tokens * self.model.hidden / sp
            if self.sliced:
                kvh = max(self.model.kv_heads / self.layout.tp, 1.0)
                kept += 2.0 * self.tokens * kvh * self.model.head_dim * 2.0
            return kept
        return self._full_activation_bytes()

    def layer_working_bytes(self) -> float:
        """One layer's full activations, held while its backward runs under full
        recomputation (zero otherwise: they are already counted)."""
        return self._full_activation_bytes() if self.knobs.recompute == "full" else 0.0

    def logits_bytes(self) -> float:
        """fp32 logits and their gradient on the last stage for one micro-batch."""
        return 2 * 4.0 * self.tokens * self.model.vocab / self.layout.tp
