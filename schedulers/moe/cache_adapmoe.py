"""AdapMoE (ICCAD'24) cache: dynamic-programming slot allocation across layers, LRU
eviction within each layer.

The DP (papers/moe.md 1.3, public ``src/dp.py``) minimises the expected on-demand
loads per token, ``sum_l f(l, s_l)`` subject to ``sum_l s_l = S``, ``1 <= s_l <= E``,
assuming uniform expert selection. With ``r1`` the layer's top-1 share under adaptive
gating and ``a`` its prefetch accuracy (both from the warm-up profile in the view), a
top-1 token misses with probability ``(1 - s/E)(1 - a)``; a top-k token draws ``U``
uncached experts (hypergeometric: ``k`` draws from ``E`` with ``E - s`` uncached) and
costs ``m(U)``: 0 for U = 0, ``w1 (1 - a)`` for U = 1, ``U - a`` for U >= 2 (one of
them prefetched with probability a). ``w1 = 1``: the public code writes the one-uncached
probability as ``2 s (E - s) / (E (E - 1))``, which is the hypergeometric ``P(U = 1)``
itself, so the term carries no extra weight (an earlier version here used 2; the
parameter stays for that ablation). For k = 2 this is the public formula; for k > 2 it
is a generalisation.
"""

from __future__ import annotations

from math import comb

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.schedulers.moe._params import NoParams
from hetsim.schedulers.moe.cache_lru import LruCache
from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import AllocationView, CacheDecision, CacheView


class AdapMoECacheParams(BaseModel):
    """``one_miss_weight``: weight of the one-uncached term (1, as in the public code)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    one_miss_weight: float = Field(
        1.0,
        ge=0,
        description="Weight w1 of the one-uncached-expert term of the DP's miss cost (1, "
        "as in AdapMoE's public code; 2 for the earlier ablation).",
    )


def expected_misses(
    experts: int, k: int, slots: int, top1: float, acc: float, one_miss_weight: float = 1.0
) -> float:
    """``f(l, s)``: expected on-demand loads per token of a layer with ``slots`` slots."""
    e, s = experts, slots
    single = (1.0 - s / e) * (1.0 - acc)
    total = comb(e, k)
    multi = 0.0
    for u in range(1, k + 1):
        p = comb(e - s, u) * comb(s, k - u) / total
        cost = one_miss_weight * (1.0 - acc) if u == 1 else u - acc
        multi += p * cost
    return top1 * single + (1.0 - top1) * multi


def dp_allocate(cost: np.ndarray, total: int, lo: int) -> tuple[int, ...]:
    """Minimise ``sum_l cost[l, s_l]`` with ``sum s_l = total`` and ``s_l >= lo``
    (``cost`` is layers x (E + 1)); ties go to fewer slots in later layers' choices."""
    layers, width = cost.shape
    hi = width - 1
    best = np.full(total + 1, np.inf)
    best[0] = 0.0
    choice = np.zeros((layers, total + 1), dtype=np.int64)
    s = np.arange(lo, hi + 1)
    for layer in range(layers):
        j = np.arange(total + 1)[:, None] - s[None, :]
        cand = np.where(j >= 0, best[np.clip(j, 0, None)] + cost[layer, s][None, :], np.inf)
        pick = cand.argmin(axis=1)
        choice[layer] = s[pick]
        best = cand[np.arange(total + 1), pick]
    out = []
    left = total
    for layer in range(layers - 1, -1, -1):
        out.append(int(choice[layer, left]))
        left -= out[-1]
    return tuple(reversed(out))


@policies.register("moe.cache", "adapmoe")
class AdapMoECache:
    """AdapMoE: DP slots per layer from the top-1 share and prefetch accuracy; LRU inside."""

    Params = AdapMoECacheParams

    def __init__(self, params: AdapMoECacheParams, rng: np.random.Generator) -> None:
        self.params = params
        self.lru = LruCache(NoParams(), rng)

    def allocate(self, view: AllocationView) -> tuple[int, ...]:
        """The DP allocation of ``total_slots`` across layers."""
        self.lru.allocate(view)
        e, k = view.experts, view.top_k
        total = min(view.total_slots, view.layers * e)
        lo = 1 if total >= view.layers else 0
        cost = np.array([
            [expected_misses(e, k, s, float(view.top1_ratio[layer]),
                             float(view.prefetch_accuracy[layer]), self.params.one_miss_weight)
             for s in range(e + 1)]
            for layer in range(view.layers)
        ])  # fmt: skip
        return dp_allocate(cost, total, lo)

    def observe(self, layer: int, probs: np.ndarray, selected: np.ndarray, step: int) -> None:
        """LRU recency."""
        self.lru.observe(layer, probs, selected, step)

    def admit(self, view: CacheView) -> CacheDecision:
        """LRU admission and eviction within the layer."""
        return self.lru.admit(view)
