"""Routing traces: full router probability vectors per token and MoE layer.

A trace holds router logits ``z[t, l, e]`` for every token ``t`` (prompt tokens first,
then generated tokens) and MoE layer ``l``, and the *predicted* logits of layer ``l``
computed from an earlier layer's hidden state (gate reuse, AdapMoE section 1.2 and
HybriMoE section 2.3 in papers/moe.md): ``z[t, l] + sigma_l * sqrt(depth) * eps[t, l]``.

Synthetic generator (every knob a parameter; defaults calibrated to published numbers):

- popularity skew: a per-layer bias ``b[l, e] ~ N(0, popularity_skew^2)``;
- token-to-token reuse: ``z[t] = b + logit_scale * x[t]`` with ``x`` an AR(1) process of
  coefficient ``token_reuse`` (stationary variance 1);
- layer-to-layer predictability: ``sigma_l`` is solved (Monte Carlo bisection) so that the
  arg-max of the predicted vector is among the true top-k with probability ``acc_l``.

Calibration (reconstruction, script in docs/moe.md): with 8 experts, ``logit_scale = 1.65``
and skew 0.5 give a mean top-1 share of 0.25 under AdapMoE's T = 0.005 (published 0.248);
``token_reuse = 0.2`` makes the top-1 expert repeat for consecutive tokens about 21% of the
time (published 14-28%, 12.5% random). Routing is softmax for every model (DeepSeek-V3's
sigmoid scores and group limit are not modelled).

- score persistence (HybriMoE Fig. 3b: experts with high but unselected scores are
  selected more often in later tokens): a share ``persistent_share`` of ``x``'s variance
  is a slow AR(1) component of coefficient ``persistence`` and the rest a fast one whose
  coefficient is solved so that the lag-1 correlation stays ``token_reuse``:
  ``x = sqrt(s) y + sqrt(1 - s) f``, ``rho_f = (token_reuse - s persistence) / (1 - s)``.
  Two consecutive tokens' logits then have the same joint law as without it (so the
  published consecutive-repeat rate is kept), while a score several tokens back still
  predicts selection. No published measurement sets ``s``; it is a named reconstruction
  (default 0: memory of one token only), swept in scenarios/hybrimoe-ablation.yaml over
  its feasible range ``s <= token_reuse / persistence``.

Replay file format (``kind: replay``): a NumPy ``.npy`` array or an ``.npz`` with array
``probs`` of shape ``(tokens, moe_layers, experts)`` holding router probabilities, and
optionally ``predicted`` of the same shape (layer ``l`` predicted from layer ``l - 1``);
without it, predictions follow the generator's noise model around ``log(probs)``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from hetsim.simulator import diskcache
from hetsim.workloads.models.moe import MoEModel

UNPREDICTABLE_SIGMA = 1e3  # noise std that makes a prediction random (accuracy 0 layers)


class SyntheticRouting(BaseModel):
    """``routing: {kind: synthetic}``: the generator described in the module docstring."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["synthetic"] = Field(default="synthetic", description="Routing kind (synthetic).")
    popularity_skew: float = Field(
        0.5,
        ge=0,
        description="Standard deviation of each layer's per-expert logit "
        "bias b ~ N(0, skew^2) (calibrated: 0.5).",
    )
    token_reuse: float = Field(
        0.2,
        ge=0,
        lt=1,
        description="Lag-1 AR(1) coefficient of the logits from token to token "
        "(0.2: the top-1 expert repeats about 21% of the time).",
    )
    logit_scale: float = Field(
        1.65,
        gt=0,
        description="Scale of the token-varying logit term: z = b + logit_scale "
        "x (1.65: top-1 share 0.25 under AdapMoE's T).",
    )
    accuracy: float | list[float] | None = Field(
        None, description="next-layer prediction accuracy; None: model profile or 0.866"
    )
    persistent_share: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="share of the token-to-token logit variance that persists over many "
        "tokens (HybriMoE Fig. 3b's reuse of high-but-unselected experts; reconstruction, "
        "0 = none); at most token_reuse / persistence",
    )
    persistence: float = Field(
        0.95, gt=0, lt=1, description="AR(1) coefficient of the persistent component"
    )

    @model_validator(mode="after")
    def _feasible(self) -> SyntheticRouting:
        """The fast component's coefficient must not be negative."""
        if self.persistent_share * self.persistence > self.token_reuse + 1e-12:
            raise ValueError(
                f"persistent_share: {self.persistent_share} x persistence "
                f"{self.persistence} exceeds token_reuse {self.token_reuse} (the lag-1 "
                "correlation it must keep)"
            )
        return self


class ReplayRouting(BaseModel):
    """``routing: {kind: replay, path: trace.npz}``: recorded router probabilities."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["replay"] = Field(default="replay", description="Routing kind (replay).")
    path: str = Field(
        description=".npy or .npz file of router probabilities (tokens, MoE "
        "layers, experts), optionally with predicted."
    )
    accuracy: float | list[float] | None = Field(
        default=None,
        description="Next-layer prediction accuracy when the file has no "
        "predicted array (null: model profile or 0.866).",
    )
    popularity_skew: float = Field(
        default=0.5,
        description="Logit bias spread assumed when solving the prediction "
        "noise for accuracy (no predicted array).",
    )
    logit_scale: float = Field(
        default=1.65,
        description="Logit scale assumed when solving the prediction "
        "noise for accuracy (no predicted array).",
    )


Routing = Annotated[SyntheticRouting | ReplayRouting, Field(discriminator="kind")]


class RoutingTrace:
    """Router logits and prediction noise of ``tokens x moe_layers x experts``."""

    def __init__(self, logits: np.ndarray, eps: np.ndarray, sigma: np.ndarray) -> None:
        # float32 without a copy where they are already (the generator's arrays, owned here)
        self.logits = logits.astype(np.float32, copy=False)
        self.eps = eps.astype(np.float32, copy=False)
        self.sigma = sigma.astype(np.float32)
        self.tokens, self.layers, self.experts = logits.shape

    def probs(self, t0: int, t1: int, layer: int) -> np.ndarray:
        """Router probabilities of tokens ``t0..t1-1`` at ``layer``: (tokens, experts)."""
        return softmax(self.logits[t0:t1, layer])

    def token_probs(self, t: int) -> np.ndarray:
        """Router probabilities of token ``t`` at every layer: (layers, experts) (the same
        numbers as :meth:`probs`, one softmax per row, computed for all layers at once)."""
        return softmax(self.logits[t])

    def token_probs_block(self, t0: int, t1: int) -> np.ndarray:
        """:meth:`token_probs` of tokens ``t0 .. t1 - 1`` stacked: (tokens, layers,
        experts) (each row's softmax the same numbers)."""
        return softmax(self.logits[t0:t1])

    def predicted(self, t0: int, t1: int, layer: int, depth: int) -> np.ndarray:
        """Probabilities of ``layer`` predicted ``depth`` layers earlier: (tokens, experts)."""
        noise = self.sigma[layer] * np.sqrt(depth) * self.eps[t0:t1, layer]
        return softmax(self.logits[t0:t1, layer] + noise)


def predicted_block_depths(trace: RoutingTrace, t0: int, t1: int, depth: int) -> np.ndarray:
    """:func:`predicted_token_depths` of tokens ``t0 .. t1 - 1`` stacked: (tokens,
    depth, layers, experts) (element by element the same float32 operations and each
    softmax row reduced alone, so the same numbers, with one numpy call per operation
    for the whole block)."""
    root = np.sqrt(np.arange(1, depth + 1)).astype(np.float32)  # np.float32(np.sqrt(d))
    noise = (trace.sigma[None, :] * root[:, None])[None, :, :, None] * trace.eps[t0:t1, None]
    return softmax(trace.logits[t0:t1, None] + noise)


def predicted_token(trace: RoutingTrace, t: int, depth: int) -> np.ndarray:
    """Predicted probabilities of every layer of token ``t`` at ``depth``: (layers, experts)
    (the same numbers as :meth:`RoutingTrace.predicted`, vectorised over layers)."""
    noise = (trace.sigma * np.float32(np.sqrt(depth)))[:, None] * trace.eps[t]
    return softmax(trace.logits[t] + noise)


def predicted_token_depths(trace: RoutingTrace, t: int, depth: int) -> np.ndarray:
    """:func:`predicted_token` of token ``t`` at depths ``1..depth`` stacked: (depth,
    layers, experts) (element by element the same float32 operations, so the same
    numbers, with one numpy call per operation for all depths)."""
    root = np.sqrt(np.arange(1, depth + 1)).astype(np.float32)  # np.float32(np.sqrt(d))
    noise = (trace.sigma[None, :] * root[:, None])[:, :, None] * trace.eps[t]
    return softmax(trace.logits[t] + noise)


def softmax(z: np.ndarray) -> np.ndarray:
    """Softmax over the last axis (computed in one new array: the same operations as
    ``e = exp(z - max); e / sum(e)``, hence the same numbers)."""
    out: np.ndarray = z - z.max(axis=-1, keepdims=True)
    np.exp(out, out=out)
    np.divide(out, out.sum(axis=-1, keepdims=True), out=out)
    return out


def accuracy_profile(spec: RoutingParamsLike, model: MoEModel) -> np.ndarray:
    """Per-layer next-layer prediction accuracy: the parameter, the model's profile, or
    0.866 (AdapMoE's Mixtral mean) with 0 at the first layer when nothing precedes it."""
    n = model.moe_layers
    if isinstance(spec.accuracy, list):
        if len(spec.accuracy) != n:
            raise ValueError(f"routing.accuracy: needs {n} values (one per MoE layer)")
        return np.asarray(spec.accuracy, dtype=float)
    if spec.accuracy is not None:
        acc = np.full(n, float(spec.accuracy))
    elif model.next_layer_accuracy is not None:
        return np.asarray(model.next_layer_accuracy, dtype=float)
    else:
        acc = np.full(n, 0.866)
    if model.dense_layers == 0:
        acc[0] = 0.0
    return acc


RoutingParamsLike = SyntheticRouting | ReplayRouting


def sigma_for_accuracy(
    acc: float, experts: int, top_k: int, scale: float, skew: float, rng: np.random.Generator
) -> float:
    """Noise std whose prediction arg-max lands in the true top-k with probability ``acc``
    (Monte Carlo over 4000 draws, bisection on log sigma)."""
    if acc <= 0:
        return UNPREDICTABLE_SIGMA
    n = 4000
    z = rng.normal(0, skew, experts) + scale * rng.normal(size=(n, experts))
    noise = rng.normal(size=(n, experts))
    # the bisection is a pure function of the draws: kept between processes
    # (``simulator.diskcache``), keyed by the draws themselves and this file
    digest = hashlib.sha256(z.tobytes() + noise.tobytes()).hexdigest()
    key = repr((float(acc), int(top_k), z.shape, digest))
    return diskcache.cached(
        "moe-sigma", key, lambda: _bisect_sigma(acc, z, noise, top_k), [__file__]
    )


def _bisect_sigma(acc: float, z: np.ndarray, noise: np.ndarray, top_k: int) -> float:
    """Bisection on log sigma (30 steps in [-6, 6]) for :func:`sigma_for_accuracy`."""
    top = np.argpartition(-z, top_k - 1, axis=1)[:, :top_k]
    # in_top[i, e]: expert e is in draw i's true top-k, so a pick hits where it is True
    # (the same booleans as ``(top == pick[:, None]).any(axis=1)``, in one lookup)
    in_top = np.zeros(z.shape, dtype=bool)
    np.put_along_axis(in_top, top, True, axis=1)
    rows = np.arange(z.shape[0])
    noisy = np.empty_like(z)
    lo, hi = -6.0, 6.0
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        np.multiply(np.exp(mid), noise, out=noisy)  # z + exp(mid) * noise, in place
        np.add(z, noisy, out=noisy)
        pick = np.argmax(noisy, axis=1)
        hit = float(in_top[rows, pick].mean())
        lo, hi = (mid, hi) if hit > acc else (lo, mid)
    return float(np.exp(0.5 * (lo + hi)))


def build_trace(
    spec: RoutingParamsLike, model: MoEModel, tokens: int, rng: np.random.Generator, base: Path
) -> RoutingTrace:
    """Generate or load the trace of ``tokens`` tokens for ``model``."""
    shape = (tokens, model.moe_layers, model.routed_experts)
    predicted = None
    if isinstance(spec, SyntheticRouting):
        logits = _synthetic(spec, shape, rng)
    else:
        logits, predicted = _replay(spec, shape, base)
    eps = rng.standard_normal(shape, dtype=np.float32)
    if predicted is not None:  # recorded predictions: depth-1 noise is their difference
        return RoutingTrace(logits, predicted - logits, np.ones(model.moe_layers))
    acc = accuracy_profile(spec, model)
    cache: dict[float, float] = {}
    sig = []
    for a in acc:
        if a not in cache:
            cache[a] = sigma_for_accuracy(
                a, model.routed_experts, model.top_k, spec.logit_scale, spec.popularity_skew, rng
            )
        sig.append(cache[a])
    return RoutingTrace(logits, eps, np.asarray(sig))


def _synthetic(
    spec: SyntheticRouting, shape: tuple[int, int, int], rng: np.random.Generator
) -> np.ndarray:
    tokens, layers, experts = shape
    bias = rng.normal(0.0, spec.popularity_skew, (layers, experts)).astype(np.float32)
    fresh = rng.standard_normal(shape, dtype=np.float32)
    s = spec.persistent_share
    if s > 0:
        return _two_speed(spec, bias, fresh, rng)
    rho = np.float32(spec.token_reuse)
    keep = np.float32(np.sqrt(1.0 - spec.token_reuse**2))
    # x[t] = rho x[t - 1] + keep fresh[t], then bias + scale x, computed in place in
    # ``fresh`` (the same float32 operations; IEEE addition is commutative, so the sums are
    # bit for bit those of the out-of-place form, without two more trace-sized arrays)
    x = fresh
    for t in range(1, tokens):
        row = x[t]
        np.multiply(row, keep, out=row)
        row += rho * x[t - 1]
    x *= np.float32(spec.logit_scale)
    x += bias[None]
    return x


def _ar1(fresh: np.ndarray, rho: float) -> np.ndarray:
    """``fresh`` turned in place into an AR(1) process of coefficient ``rho`` along
    axis 0 with stationary variance 1 (``x[0] = fresh[0]``)."""
    r = np.float32(rho)
    keep = np.float32(np.sqrt(1.0 - rho**2))
    for t in range(1, len(fresh)):
        row = fresh[t]
        np.multiply(row, keep, out=row)
        row += r * fresh[t - 1]
    return fresh


def _two_speed(
    spec: SyntheticRouting, bias: np.ndarray, fresh: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Logits with a persistent and a fast component (module docstring)."""
    s, slow_rho = spec.persistent_share, spec.persistence
    fast_rho = max(0.0, (spec.token_reuse - s * slow_rho) / (1.0 - s))
    slow = _ar1(rng.standard_normal(fresh.shape, dtype=np.float32), slow_rho)
    x = _ar1(fresh, fast_rho)
    x *= np.float32(np.sqrt(1.0 - s))
    x += np.float32(np.sqrt(s)) * slow
    x *= np.float32(spec.logit_scale)
    x += bias[None]
    return x


def _replay(
    spec: ReplayRouting, shape: tuple[int, int, int], base: Path
) -> tuple[np.ndarray, np.ndarray | None]:
    data = np.load(base / spec.path)
    if isinstance(data, np.ndarray):
        return _checked_logits(spec.path, data, shape), None
    if "probs" not in data:
        raise KeyError(f"routing.path: {spec.path} has no array 'probs'")
    logits = _checked_logits(spec.path, data["probs"], shape)
    pred = data.get("predicted")
    return logits, None if pred is None else _checked_logits(spec.path, pred, shape)


def _checked_logits(name: str, probs: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    if probs.ndim != 3 or probs.shape[1:] != shape[1:] or probs.shape[0] < shape[0]:
        raise ValueError(
            f"routing.path: trace {name} has shape {tuple(probs.shape)}; expected "
            f"(tokens >= {shape[0]}, moe_layers = {shape[1]}, experts = {shape[2]})"
        )
    if not np.isfinite(probs).all() or (probs < 0).any():
        raise ValueError(f"routing.path: trace {name} holds negative or non-finite values")
    return np.log(np.asarray(probs[: shape[0]], dtype=np.float64) + 1e-9).astype(np.float32)
