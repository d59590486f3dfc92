"""AdapMoE (ICCAD'24) sensitivity-based adaptive gating.

From papers/moe.md 1.1 (public code ``run.py``): with the renormalised top-k weights
``w_1 >= w_2 >= ...``, dropping expert ``j`` changes the loss by about ``F_l * w_j^2``
(Fisher approximation, ``F_l`` the layer's sensitivity); expert ``j >= 2`` is kept only
when ``F_l * w_j^2 >= threshold``. The top-1 expert is always kept. Applied in decode
only (batch size 1), as in the paper. Generalised here from top-2 to top-k (each tail
expert tested alone: an extension, identical to the paper for Mixtral's top-2).
``F_l`` comes from the model spec (published for Mixtral) or the ``sensitivity``
parameter.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.schedulers.moe.gating_topk import topk_mask
from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import GatingView


class AdapMoEGatingParams(BaseModel):
    """``threshold``: T of the rule (public default 0.005; the MMLU sweep uses 0-0.013).
    ``sensitivity``: per-MoE-layer F_l overriding the model's profile."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    threshold: float = Field(
        0.005,
        ge=0,
        description="Threshold T: a tail expert j is kept only if F_l w_j^2 >= T "
        "(public default 0.005; the MMLU sweep uses 0-0.013).",
    )
    sensitivity: list[float] | None = Field(
        default=None,
        description="Sensitivity F_l per MoE layer, overriding the "
        "model's profile (null: the model's).",
    )
    decode_only: bool = Field(
        default=True,
        description="Apply the adaptive rule in decode only (as the "
        "paper); prefill keeps the plain top-k.",
    )


@policies.register("moe.gating", "adapmoe")
class AdapMoEGating:
    """AdapMoE: keep a tail expert only when its weight clears the layer's threshold."""

    Params = AdapMoEGatingParams

    def __init__(self, params: AdapMoEGatingParams, rng: np.random.Generator) -> None:
        self.params = params

    def _sensitivity(self, view: GatingView) -> float:
        if self.params.sensitivity is not None:
            if view.layer >= len(self.params.sensitivity):
                raise ValueError(f"sensitivity: no value for MoE layer {view.layer}")
            return self.params.sensitivity[view.layer]
        if view.sensitivity is None:
            raise ValueError("sensitivity: the model has no AdapMoE profile; give one")
        return view.sensitivity

    def select(self, view: GatingView) -> np.ndarray:
        """Top-k mask with the tail experts below the threshold dropped."""
        mask = topk_mask(view.probs, view.top_k)
        if (self.params.decode_only and view.phase != "decode") or view.top_k == 1:
            return mask
        f = self._sensitivity(view)
        top = np.where(mask, view.probs, 0.0)
        weights = top / top.sum(axis=1, keepdims=True)
        first = weights.argmax(axis=1)
        keep = f * weights**2 >= self.params.threshold
        keep[np.arange(len(first)), first] = True
        return mask & keep
