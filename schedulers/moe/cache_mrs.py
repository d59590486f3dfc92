"""HybriMoE (DAC'25) score-aware caching: Minus Recent Score (MRS).

Per (layer, expert) priority ``S``, updated for every token from its router
probability vector ``s``: ``S <- alpha * TopP(s) + (1 - alpha) * S``, where TopP keeps
the ``p = p_factor x (experts the token activated)`` largest probabilities and zeroes
the rest (papers/moe.md 2.4; public code alpha = 0.5, p = 2 x activated). A step of
several tokens applies the update token by token (closed form). Eviction removes the
cached expert with the lowest S in the same layer. Admission as the public code
(``KScoreAwareCache``): every loaded expert, demand-loaded or prefetched, enters the
cache, evicting the lowest-score unprotected expert of its layer when no slot is free.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.schedulers.moe._evict import victims_by_key
from hetsim.schedulers.moe._slots import uniform_slots
from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import AllocationView, CacheDecision, CacheView


class MrsParams(BaseModel):
    """``alpha``: weight of the newest token; ``p_factor``: top-p = factor x activated."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    alpha: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Weight of the newest token's top-p router probabilities in the "
        "score: S <- alpha TopP(s) + (1 - alpha) S (public code 0.5).",
    )
    p_factor: int = Field(
        2,
        ge=1,
        description="TopP keeps p_factor x (experts the token activated) "
        "largest probabilities (public code 2).",
    )


@policies.register("moe.cache", "mrs")
class MrsCache:
    """Evict the lowest exponentially averaged top-p routing score within the layer."""

    Params = MrsParams

    def __init__(self, params: MrsParams, rng: np.random.Generator) -> None:
        self.params = params
        self.score = np.zeros((0, 0))
        # (step, each layer's alpha x top-p probabilities, 0 elsewhere) of a decode token
        self._token_tops: tuple[int, np.ndarray] = (-1, np.zeros((0, 0)))

    def allocate(self, view: AllocationView) -> tuple[int, ...]:
        """Uniform slots per layer (and reset scores)."""
        self.score = np.zeros((view.layers, view.experts))
        self._token_tops = (-1, np.zeros((0, 0)))
        return uniform_slots(view)

    def observe_token(self, probs: np.ndarray, selected: np.ndarray, step: int) -> None:
        """A decode token's routing at every layer, ahead of its layer-by-layer
        :meth:`observe` calls: each layer's top-p experts are found here at once (one
        vectorised sort; the scores still change layer by layer, in :meth:`observe`)."""
        layers, experts = probs.shape
        n = np.minimum(self.params.p_factor * np.count_nonzero(selected, axis=1), experts)
        neg = -probs
        s = np.sort(neg, axis=1)
        rows = np.arange(layers)
        full = n >= experts
        nth = s[rows, n - 1]
        after = s[rows, np.where(full, 0, n)]
        # where the n-th largest is strictly above the next (no tie, no NaN there), the
        # n largest are exactly the entries at or above it: the introselect's set
        tops = neg <= nth[:, None]
        tops[full] = True  # every expert (NaN too, as the introselect takes them)
        exact = full | (nth < after)
        for layer in (~exact).nonzero()[0].tolist():  # a tie: the introselect decides
            m = int(n[layer])
            tops[layer] = False
            tops[layer][neg[layer].argpartition(m - 1)[:m]] = True
        # the same products as layer by layer at the top-p, 0 elsewhere (scores are
        # never -0.0, so adding 0.0 leaves them bit for bit)
        a = self.params.alpha
        gain = np.zeros(probs.shape, dtype=np.result_type(a, probs))
        np.multiply(probs, a, out=gain, where=tops)
        self._token_tops = (step, gain)

    def observe(self, layer: int, probs: np.ndarray, selected: np.ndarray, step: int) -> None:
        """Fold every token's top-p probabilities into the layer's scores."""
        tokens, experts = probs.shape
        a = self.params.alpha
        if tokens == 1:  # the decode fast path of the same update
            row = self.score[layer]
            if self._token_tops[0] == step:  # the top-p found by observe_token
                row *= 1.0 - a
                row += self._token_tops[1][layer]
                return
            n = min(self.params.p_factor * int(np.count_nonzero(selected)), experts)
            top_ids = (-probs[0]).argpartition(n - 1)[:n]
            row *= 1.0 - a
            row[top_ids] += a * probs[0][top_ids]  # (row first: cheaper than [0, ids])
            return
        p = np.minimum(self.params.p_factor * selected.sum(axis=1), experts)
        rank = np.argsort(np.argsort(-probs, axis=1, kind="stable"), axis=1, kind="stable")
        top = np.where(rank < p[:, None], probs, 0.0)
        weights = (1.0 - a) ** np.arange(tokens - 1, -1, -1)
        self.score[layer] = (1.0 - a) ** tokens * self.score[layer] + a * (weights @ top)

    def admit(self, view: CacheView) -> CacheDecision:
        """Admit every incoming expert (highest score first), evicting lowest-score victims."""
        s = self.score[view.layer]
        free = view.slots - view.occupied
        victims = victims_by_key(view, s, len(view.incoming) - free)
        admit: list[int] = []
        evict: list[int] = []
        incoming = view.incoming
        if len(incoming) > 1:
            incoming = tuple(sorted(incoming, key=lambda e: (-s[e], e)))
        for e in incoming:
            if free > 0:
                free -= 1
            elif victims:
                evict.append(victims.pop(0))
            else:
                continue
            admit.append(e)
        return CacheDecision(tuple(admit), tuple(evict))
