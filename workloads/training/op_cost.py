"""Seconds of each operator of a single-device training iteration, kernel by kernel.

The operator sequence of :mod:`workloads.training.ops` (Chameleon's workload) is priced by
the kernel classes of :mod:`devices.kernels`, the same fits the serving, queueing and
training-parallel domains use (issue 15):

- GEMMs (QKV, output projection, the two FFN GEMMs, the LM head) at their ``(M, N, K)``
  shape, ``M`` the tokens of the micro-batch (the FFN's scaled by the routed share); the
  backward of a GEMM is its data gradient ``(M, K, N)`` and weight gradient ``(K, N, M)``.
- Flash attention as the ``attention_prefill`` class on the whole sequence (causal: a
  chunk's own block; not causal: every query on every key); its backward is the forward
  class on ``attn_bwd_flops_ratio`` times the work at ``attn_bwd_relative_efficiency``
  of its efficiency (the constants of :class:`workloads.training.step_cost.StepKnobs`).
- Eager attention (no flash): the score and value products as batched GEMMs of one
  ``s x s`` block per head and sequence (cuBLAS computes the full block; the mask is
  applied afterwards), backward twice the forward.
- Normalisations, activations, dropout-adds, embedding look-ups and the Adam update as
  bandwidth-bound ``elementwise`` kernels of their kind on the op's bytes.

The attention fit comes from serving prefill kernels of up to 4,096 tokens (Vidur's A100
profile; other devices borrow it), so at long training sequences, where attention is most
of the step, it is an extrapolation: ``attention_peak_fraction`` replaces it by a fixed
share of the dense peak (published forward shares: FlashAttention-2 50-73% on A100, Dao
2023, arXiv 2307.08691; 35% on H100, Shah et al. 2024, arXiv 2407.08608), and the
robustness scenario sweeps it.

``TrainingParams.cost_model: roofline`` keeps the earlier single-roofline pricing (every op
at the device's large-GEMM efficiency) for comparison with results made before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import cast

import numpy as np

from hetsim.devices.kernels import (
    ATTENTION_PREFILL_FIT_MAX_TOKENS,
    KERNEL_CLASSES,
    KernelFitRef,
    KernelFits,
    attention_prefill_time_s,
    elementwise_time_s,
    gemm_time_s,
    kernel_fits,
    residual_band,
)
from hetsim.devices.precision import Format, Precision
from hetsim.devices.spec import DeviceSpec
from hetsim.devices.sustained import DEFAULT_GPU_CLOCKS, GpuClocks
from hetsim.workloads.training.model import TransformerSpec
from hetsim.workloads.training.ops import FWD, Lifetimes, Variant
from hetsim.workloads.training.step_cost import StepKnobs

#: elementwise kernel kind of each non-GEMM op, by forward name
EW_KIND = {
    "ln1": "norm", "ln2": "norm", "gelu": "activation", "drop_add1": "add",
    "drop_add2": "add", "dropout": "add", "extra": "add", "extra_use": "add",
    "embed": "embedding", "adam": "add",
}  # fmt: skip


@dataclass(frozen=True)
class OpPricer:
    """Kernel-class seconds of the ops of one iteration variant on one device."""

    spec: DeviceSpec
    model: TransformerSpec
    variant: Variant
    dtype: str
    knobs: StepKnobs = field(default_factory=StepKnobs)
    #: flash attention's forward share of the dense peak, overriding the fitted kernel
    #: class (None: the device's attention_prefill fit)
    attention_peak_fraction: float | None = None

    @cached_property
    def fit_ref(self) -> KernelFitRef:
        """The device's kernel fits (calibrated, borrowed or derived) at the clock regime
        (:mod:`hetsim.devices.sustained`)."""
        return kernel_fits(self.spec, self.knobs.gpu_clocks, self.knobs.sustained_matmul_ratio)

    @property
    def fits(self) -> KernelFits:
        """The device's kernel fits, compute roofs at the clock regime."""
        return self.fit_ref.fits

    @cached_property
    def precision(self) -> Precision:
        """Weights, activations and KV all in the training dtype."""
        fmt = cast(Format, self.dtype)
        return Precision(fmt, fmt, fmt)

    @cached_property
    def shapes(self) -> dict[str, tuple[float, float, float]]:
        """Forward ``(M, N, K)`` of each GEMM op by name."""
        m, v = self.model, self.variant
        tok = float(v.seq_len * m.micro_batch)
        ffn_tok = tok * v.ffn_tokens
        h, f = float(m.hidden), float(m.ffn)
        return {
            "qkv": (tok, 3 * h, h),
            "proj": (tok, h, h),
            "fc1": (ffn_tok, f, h),
            "fc2": (ffn_tok, h, f),
            "head": (tok, float(m.vocab), h),
        }

    def gemm_s(self, m: float, n: float, k: float) -> float:
        """One ``(m x k) @ (k x n)`` GEMM."""
        return float(gemm_time_s(self.spec, self.fits.gemm, m, n, k, self.precision))

    def gemm_op_s(self, base: str, phase: int, name: str) -> float:
        """Forward, data-gradient or weight-gradient GEMM of op ``base``."""
        m, n, k = self.shapes[base]
        if phase == FWD:
            return self.gemm_s(m, n, k)
        if name.endswith("_dgrad"):
            return self.gemm_s(m, k, n)
        if name.endswith("_wgrad"):
            return self.gemm_s(k, n, m)
        return self.gemm_s(m, k, n) + self.gemm_s(k, n, m)  # one op for both (the head)

    def flash_s(self, phase: int) -> float:
        """Flash attention over the whole sequence, forward or backward."""
        m, v = self.model, self.variant
        scale = 1.0 if phase == FWD else self.knobs.attn_bwd_flops_ratio
        b, s = float(m.micro_batch), float(v.seq_len)
        units = scale * b * s * s
        if self.attention_peak_fraction is not None:
            flops = 4.0 * units * m.hidden * (0.5 if m.causal else 1.0)
            peak = self.spec.peak(self.precision.math_dtype()) * self.fit_ref.clock_ratio
            t = flops / (peak * self.attention_peak_fraction)
            return t if phase == FWD else t / self.knobs.attn_bwd_relative_efficiency
        cross, own = (0.0, units) if m.causal else (units, 0.0)
        t = float(
            attention_prefill_time_s(
                self.spec, self.fits.attention_prefill, cross, own, b * s, 0.0,
                m.heads, m.heads, m.hidden // m.heads, self.precision,
            )
        )  # fmt: skip
        return t if phase == FWD else t / self.knobs.attn_bwd_relative_efficiency

    def eager_s(self, kind: str, phase: int) -> float:
        """Score (``q k^T``) or value (``p v``) product as ``b a`` batched GEMMs."""
        m, s = self.model, float(self.variant.seq_len)
        rows = float(m.micro_batch * m.heads) * s
        d = float(m.hidden // m.heads)
        t = self.gemm_s(rows, s, d) if kind == "scores" else self.gemm_s(rows, d, s)
        return t if phase == FWD else 2.0 * t

    def elementwise_s(self, name: str, nbytes: float) -> float:
        """A bandwidth-bound op of its kind (``EW_KIND``; ``add`` otherwise)."""
        op = EW_KIND.get(name.removesuffix("_bwd"), "add")
        return float(elementwise_time_s(self.spec, self.fits.elementwise, nbytes, op))

    def kernel_class(self, name: str, kind: str) -> str:
        """The kernel class an op is priced by (``gemm``, ``attention_prefill``,
        ``elementwise``)."""
        base = name.split("_")[0]
        if kind.startswith("gemm") or kind in ("scores", "av") or base == "head":
            return "gemm"
        return "attention_prefill" if kind == "attn" else "elementwise"

    def op_s(self, name: str, phase: int, kind: str, nbytes: float) -> float:
        """Seconds of one op."""
        base = name.split("_")[0]
        if base in self.shapes and (kind.startswith("gemm") or base == "head"):
            return self.gemm_op_s(base, phase, name)
        if kind == "attn":
            return self.flash_s(phase)
        if kind in ("scores", "av"):
            return self.eager_s(kind, phase)
        return self.elementwise_s(name, nbytes)

    def times_s(self, lt: Lifetimes) -> np.ndarray:
        """Seconds of every op of ``lt``, in op order (ops of one shape priced once)."""
        seq = lt.seq
        cache: dict[tuple[str, int, float], float] = {}
        out = np.empty(seq.n_ops)
        for i, key in enumerate(zip(seq.op_name, seq.op_phase, lt.nbytes.tolist(), strict=True)):
            t = cache.get(key)
            if t is None:
                t = cache[key] = self.op_s(key[0], key[1], seq.op_kind[i], key[2])
            out[i] = t
        return out


def kernel_op_times_s(
    spec: DeviceSpec,
    lt: Lifetimes,
    m: TransformerSpec,
    v: Variant,
    dtype: str,
    attention_peak_fraction: float | None = None,
    gpu_clocks: GpuClocks = DEFAULT_GPU_CLOCKS,
) -> np.ndarray:
    """Seconds of every op of ``lt`` on ``spec`` (module doc), in op order, compute roofs
    at the clock regime ``gpu_clocks`` (:mod:`hetsim.devices.sustained`)."""
    knobs = StepKnobs(gpu_clocks=gpu_clocks)
    pricer = OpPricer(spec, m, v, dtype, knobs, attention_peak_fraction)
    return pricer.times_s(lt)


def op_trust(
    spec: DeviceSpec,
    lt: Lifetimes,
    op_s: np.ndarray,
    seq_len: int,
    fitted_attention: bool,
    gpu_clocks: GpuClocks = DEFAULT_GPU_CLOCKS,
) -> dict[str, float | str]:
    """The run's error band and fits (the fields of :mod:`workloads.models.trust`): each
    kernel class's residual weighted by its share of the iteration's op time, and
    ``fit_extrapolated`` naming a class used beyond the sizes it was fitted on (the band
    then understates the error)."""
    pricer = OpPricer(spec, TransformerSpec(), Variant(1), "bf16", StepKnobs(gpu_clocks=gpu_clocks))
    ref = pricer.fit_ref
    shares: dict[str, float] = {}
    for name, kind, t in zip(lt.seq.op_name, lt.seq.op_kind, op_s.tolist(), strict=True):
        cls = pricer.kernel_class(name, kind)
        shares[cls] = shares.get(cls, 0.0) + t
    p50, p90 = residual_band(ref, shares)
    used = sorted(c for c in shares if c in KERNEL_CLASSES)
    borrowed = (
        sorted(
            f"{spec.name}.{c}<-{ref.fitted_on.get(c) or 'roofline'}"
            for c in used
            if ref.class_kind(c) != "calibrated"
        )
        + ref.borrowed_extras()
    )
    extrapolated = (
        f"attention_prefill: {seq_len} tokens per sequence > {ATTENTION_PREFILL_FIT_MAX_TOKENS}"
        " profiled"
        if fitted_attention
        and "attention_prefill" in shares
        and seq_len > ATTENTION_PREFILL_FIT_MAX_TOKENS
        else ""
    )
    return {
        "model_error_p50": round(p50, 4),
        "model_error_p90": round(p90, 4),
        "model_fits": ref.kind,
        "kernel_classes": ";".join(used),
        "borrowed_fits": ";".join(borrowed),
        "fit_extrapolated": extrapolated,
    }
