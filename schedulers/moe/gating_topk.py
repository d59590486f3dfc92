"""Top-k gating: every token activates the model's ``top_k`` most probable experts."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import GatingView, TokenGatingView


class TopKParams(BaseModel):
    """No parameters: k is the model's ``num_experts_per_tok``."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def topk_mask(probs: np.ndarray, k: int) -> np.ndarray:
    """Bool mask (tokens, experts) of each row's ``k`` largest entries (ties at the k-th
    value: the introselect's, numpy's argpartition)."""
    if probs.shape[0] == 1:  # decode fast path, same result
        mask = np.zeros(probs.shape, dtype=bool)
        mask[0][(-probs[0]).argpartition(k - 1)[:k]] = True  # (row first: cheaper)
        return mask
    neg = -probs
    if 0 < k < probs.shape[1]:
        # rows sorted at once (a vectorised sort, several times faster than the row by row
        # introselect): where every row's k-th largest value is strictly above its
        # (k + 1)-th (no tie, no NaN there), each row's k largest are exactly the entries
        # at or above it, the same set the introselect picks
        s = np.sort(neg, axis=1)[:, k - 1 : k + 1]
        if (s[:, 0] < s[:, 1]).all():
            out: np.ndarray = neg <= s[:, :1]
            return out
    mask = np.zeros(probs.shape, dtype=bool)
    idx = np.argpartition(neg, k - 1, axis=1)[:, :k]
    np.put_along_axis(mask, idx, True, axis=1)
    return mask


@policies.register("moe.gating", "topk")
class TopKGating:
    """The model's own router: top-k experts per token (every baseline, and HybriMoE)."""

    Params = TopKParams

    def __init__(self, params: TopKParams, rng: np.random.Generator) -> None:
        self.params = params

    def select(self, view: GatingView) -> np.ndarray:
        """Top-k of each token's router probabilities."""
        return topk_mask(view.probs, view.top_k)

    def select_token(self, view: TokenGatingView) -> np.ndarray:
        """Top-k of the token's router probabilities at every layer (row by row the
        introselect of :meth:`select`)."""
        return topk_mask(view.probs, view.top_k)
