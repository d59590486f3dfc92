"""Top-k gating: every token activates the model's ``top_k`` most probable experts."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import GatingView


class TopKParams(BaseModel):
    """No parameters: k is the model's ``num_experts_per_tok``."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def topk_mask(probs: np.ndarray, k: int) -> np.ndarray:
    """Bool mask (tokens, experts) of each row's ``k`` largest entries."""
    mask = np.zeros(probs.shape, dtype=bool)
    if probs.shape[0] == 1:  # decode fast path, same result
        mask[0][(-probs[0]).argpartition(k - 1)[:k]] = True  # (row first: cheaper)
        return mask
    idx = np.argpartition(-probs, k - 1, axis=1)[:, :k]
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
