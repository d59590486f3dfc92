"""Elementwise work of a Llama layer as torchtitan's eager PyTorch modules run it
(**reconstruction** from the model code, not a profile).

Without ``torch.compile`` every PyTorch op of torchtitan's Llama is its own kernel that
reads its inputs from HBM and writes its output there, in the op's dtype. The op
sequences are those of ``torchtitan/models/norms.py`` (``RMSNorm``: ``x.float()``,
``pow(2)``, ``mean``, ``x * rsqrt(...)``, ``type_as(x)``, ``* weight``; selected by
``norm_type = "rmsnorm"`` in ``train_configs/llama3_8b.toml``) and
``torchtitan/models/llama/model.py`` (``apply_rotary_emb``: ``float()``, a complex64
multiply, ``type_as``; ``FeedForward``: ``silu(w1 x) * w3 x``; ``repeat_kv``: an
``expand`` + ``reshape`` that copies K and V to every query head), and autograd's
backward of each. Bytes are per element of the op's natural tensor (``t h`` for a norm,
``t x heads x head_dim`` for rotary on Q or K, ``t x ffn`` for SwiGLU), per kernel:
bf16 is 2 B, fp32 4 B, reductions over the hidden dimension write a negligible ``t``
elements, broadcast operands (``rsqrt`` per row, the weight, the rotary table) are not
counted.

Each kernel is a simple streaming kernel, priced at the device's STREAM rate (its
catalogue ``memory_efficiency``, fitted to the triad microbenchmarks K01) plus the
elementwise class's per-kernel floor. The fused alternative (``fused``: the kernel
classes' own norm, rotary and activation fits, from fused inference kernels) is what
``torch.compile``, Transformer Engine or llm-foundry's fused layers run.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from hetsim.devices.kernels import ElementwiseFit
from hetsim.devices.spec import DeviceSpec

ElementwiseImpl = Literal["fused", "torchtitan-eager"]

#: Bytes per element of each kernel of an eager op, forward and backward (module doc).
EAGER_KERNEL_BYTES: dict[str, dict[str, tuple[float, ...]]] = {
    # to fp32 (r2 w4), pow (r4 w4), mean (r4), x * rstd (r4 w4), to bf16 (r4 w2), * w (r2 w2)
    "norm": {
        "fwd": (6, 8, 4, 8, 6, 4),
        # g * w (r2 w2); g * y for dw (r4 w2) and its row sum (r2); grad to fp32 (r2 w4);
        # g * rstd (r4 w4); g * x (r8 w4) and its row sum (r4); mean's expand / N (w4);
        # pow's 2 x g (r8 w4); sum of the two paths to x (r8 w4); to bf16 (r4 w2)
        "bwd": (4, 6, 2, 6, 8, 12, 4, 4, 12, 12, 6),
    },
    # to fp32 (r2 w4), complex multiply (r4 w4), to bf16 (r4 w2); backward the same chain
    # with the conjugate table
    "rotary": {"fwd": (6, 8, 6), "bwd": (6, 8, 6)},
    # silu (r2 w2), product (r4 w2); backward: two products (r4 w2 each), silu's (r4 w2)
    "swiglu": {"fwd": (4, 6), "bwd": (6, 6, 6)},
}


def repeat_kv_bytes(rep: float) -> tuple[float, float]:
    """(forward, backward) bytes per K or V element before ``repeat_kv`` copies it to
    ``rep`` query heads (read 2, write ``2 rep``; backward sums the copies back)."""
    if rep <= 1:
        return 0.0, 0.0
    return 2.0 + 2.0 * rep, 2.0 * rep + 2.0


def stream_kernel_s(spec: DeviceSpec, fit: ElementwiseFit, nbytes: float) -> float:
    """Seconds of one streaming kernel moving ``nbytes`` at the device's STREAM rate."""
    if nbytes <= 0:
        return 0.0
    eff = float(spec.memory_efficiency(max(nbytes, 1.0)))
    return fit.floor_s + nbytes / (spec.memory_bandwidth_Bps * eff)


def eager_op_s(spec: DeviceSpec, fit: ElementwiseFit, op: str, phase: str,
               elements: float) -> float:  # fmt: skip
    """Seconds of eager op ``op`` (``EAGER_KERNEL_BYTES``) over ``elements`` elements in
    ``phase`` (``fwd`` or ``bwd``): one streaming kernel per entry."""
    per = EAGER_KERNEL_BYTES[op][phase]
    return float(np.sum([stream_kernel_s(spec, fit, b * elements) for b in per]))
