"""A hand-written kernel-by-kernel price of dense (and MoE) transformer iterations, for
tests of the mechanisms that use the cost model.

It re-derives every kernel's shape and bytes from the model's published sizes (module
doc of ``workloads/models/transformer_cost.py``) and evaluates the kernel-class formulas
with scalar arithmetic, reading only the fitted constants from ``devices/kernels.yaml``.
It shares no code with the simulator's cost path, so a mechanism that sums the wrong
kernels, passes the wrong shapes or drops a term disagrees with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import yaml

from tests.conftest import ROOT

KERNELS = yaml.safe_load((ROOT / "devices" / "kernels.yaml").read_text())


def _hill(c: dict[str, float], x: float) -> float:
    return c["max_eff"] / (1.0 + (c["half_size"] / x) ** c["exponent"]) if x > 0 else 0.0


def _smooth(a: float, b: float, p: float) -> float:
    big, small = max(a, b), min(a, b)
    return big * (1.0 + (small / big) ** p) ** (1.0 / p) if big > 0 else 0.0


@dataclass(frozen=True)
class Gpu:
    """One GPU's peaks and its fitted kernel constants."""

    name: str
    peak: float  # fp16 FLOP/s
    bw: float  # B/s
    fp32: float

    @property
    def fits(self) -> dict[str, Any]:
        """The fitted constants this GPU uses: a byte-size curve fitted on another device
        keeps its half size in time (``borrowed_size_curves: latency``): half bytes over
        the lender's bandwidth, times this GPU's."""
        device = KERNELS["borrow"].get(self.name, self.name)
        raw = KERNELS["fits"][device]
        if KERNELS.get("borrowed_size_curves", "latency") != "latency":
            return raw
        out = dict(raw)
        for cls in ("gemm", "elementwise", "attention_decode"):
            lender = raw["fitted_on"][cls]
            if LENDER_BW[lender] != self.bw:
                curve = dict(raw[cls]["memory"])
                curve["half_size"] *= self.bw / LENDER_BW[lender]
                out[cls] = {**raw[cls], "memory": curve}
        return out


#: HBM bandwidth of the devices the fits were measured on (catalogue.yaml).
LENDER_BW = {"a100-80gb": 2039e9, "h100-sxm": 3350e9}


A100 = Gpu("a100-80gb", 312e12, 2039e9, 19.5e12)  # catalogue.yaml
H100 = Gpu("h100-sxm", 989e12, 3350e9, 66.9e12)


def gemm(g: Gpu, m: float, n: float, k: float, a: float = 2.0, w: float = 2.0) -> float:
    f = g.fits["gemm"]
    flops, nbytes = 2 * m * n * k, (m * k + m * n) * a + k * n * w
    tc = flops / (g.peak * _hill(f["compute"], flops))
    tm = nbytes / (g.bw * _hill(f["memory"], nbytes))
    return f["floor_s"] + _smooth(tc, tm, f["sharpness"]) if m > 0 else 0.0


def elementwise(g: Gpu, nbytes: float, op: str) -> float:
    f = g.fits["elementwise"]
    eff = _hill(f["memory"], max(nbytes, 1.0)) * f["op_max_eff"][op] / f["memory"]["max_eff"]
    return f["floor_s"] + nbytes / (g.bw * eff) if nbytes > 0 else 0.0


@dataclass(frozen=True)
class Dense:
    """A Llama-style decoder's sizes (models.yaml)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int

    @property
    def d(self) -> int:
        return self.hidden // self.heads


LLAMA3_8B = Dense(32, 4096, 32, 8, 14336, 128256)


def token_part(g: Gpu, m: Dense, t: float, tp: int = 1) -> float:
    """All layers' T-dependent kernels plus the embedding gather (no collectives)."""
    h, d = m.hidden, m.d
    layer = (
        gemm(g, t, (m.heads + 2 * m.kv_heads) * d / tp, h)
        + gemm(g, t, h, m.heads * d / tp)
        + 2 * elementwise(g, 2 * t * h * 2 + 2 * h, "norm")
        + elementwise(g, 2 * t * (m.heads + m.kv_heads) * d / tp * 2, "rotary")
        + 2 * elementwise(g, 3 * t * h * 2, "add")
        + gemm(g, t, 2 * m.ffn / tp, h)
        + elementwise(g, (2 * m.ffn / tp + m.ffn / tp) * t * 2, "activation")
        + gemm(g, t, h, m.ffn / tp)
    )
    return m.layers * layer + elementwise(g, 2 * t * h * 2, "embedding")


def head_part(g: Gpu, m: Dense, s: float, tp: int = 1) -> float:
    """Final norm, LM head and sampling for ``s`` sequences."""
    h = m.hidden
    return (
        elementwise(g, 2 * s * h * 2 + 2 * h, "norm")
        + gemm(g, s, m.vocab / tp, h)
        + elementwise(g, 8 * s * m.vocab, "activation")
    )


def prefill_attention(g: Gpu, m: Dense, q: float, c: float, tp: int = 1) -> float:
    """All layers' attention of one chunk of ``q`` new tokens on ``c`` cached ones."""
    f = g.fits["attention_prefill"]
    heads, kvh = m.heads / tp, max(m.kv_heads / tp, 1)
    flops = 4 * heads * m.d * (q * c + f["self_factor"] * q * q)
    nbytes = 2 * q * heads * m.d * 2 + 2 * (q + c) * kvh * m.d * 2
    tc = flops / (g.peak * _hill(f["compute"], flops))
    tm = nbytes / (g.bw * f["memory_max_eff"])
    return m.layers * (f["floor_s"] + _smooth(tc, tm, f["sharpness"]))


def decode_attention(g: Gpu, m: Dense, seqs: float, ctx: float, tp: int = 1) -> float:
    """All layers' decode attention of ``seqs`` sequences reading ``ctx`` cached tokens."""
    f = g.fits["attention_decode"]
    heads, kvh = m.heads / tp, max(m.kv_heads / tp, 1)
    nbytes = 2 * ctx * kvh * m.d * 2 + 2 * seqs * heads * m.d * 2
    t = nbytes / (g.bw * _hill(f["memory"], nbytes))
    return m.layers * (f["floor_s"] + f["per_seq_s"] * seqs + t)


def prefill_s(g: Gpu, m: Dense, q: int, c: int = 0) -> float:
    """One chunk of ``q`` prompt tokens on ``c`` cached ones, finishing its prompt."""
    return token_part(g, m, q) + head_part(g, m, 1) + prefill_attention(g, m, q, c)


def decode_s(g: Gpu, m: Dense, seqs: int, ctx: int) -> float:
    """One decode step of ``seqs`` sequences holding ``ctx`` cached tokens in all
    (each step's own new token included in ``ctx`` by the caller)."""
    return token_part(g, m, seqs) + head_part(g, m, seqs) + decode_attention(g, m, seqs, ctx)


def check_close(a: float, b: float, rel: float = 1e-9) -> bool:
    """``a`` equals ``b`` up to ``rel``."""
    return math.isclose(a, b, rel_tol=rel)


@dataclass(frozen=True)
class Moe(Dense):
    """A decoder whose every layer's MLP is ``experts`` routed experts, top ``top_k``."""

    experts: int = 8
    top_k: int = 2


MIXTRAL = Moe(32, 4096, 32, 8, 14336, 32000, experts=8, top_k=2)


def moe_token_part(g: Gpu, m: Moe, t: float) -> float:
    """As :func:`token_part` with each MLP replaced by the router GEMM and the expected
    distinct experts ``a = E (1 - (1 - k/E)^t)``, each on ``t k / a`` tokens."""
    h, d, f = m.hidden, m.d, m.ffn
    a = m.experts * (1 - (1 - m.top_k / m.experts) ** t)
    pe = t * m.top_k / a
    expert = (
        gemm(g, pe, 2 * f, h) + elementwise(g, 3 * f * pe * 2, "activation") + gemm(g, pe, h, f)
    )
    layer = (
        gemm(g, t, (m.heads + 2 * m.kv_heads) * d, h)
        + gemm(g, t, h, m.heads * d)
        + 2 * elementwise(g, 2 * t * h * 2 + 2 * h, "norm")
        + elementwise(g, 2 * t * (m.heads + m.kv_heads) * d * 2, "rotary")
        + 2 * elementwise(g, 3 * t * h * 2, "add")
        + gemm(g, t, m.experts, h)
        + a * expert
    )
    return m.layers * layer + elementwise(g, 2 * t * h * 2, "embedding")
