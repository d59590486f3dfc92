"""Gate-reuse speculative prefetch (Mixtral-offloading; AdapMoE, ICCAD'24).

At each layer the next layers' gates are applied to the current hidden state (the view's
predicted experts, most probable first); the first ``experts_per_layer`` predicted
experts that are not cached are copied ahead, nearest layer first. AdapMoE's public
code: one layer ahead, the first uncached expert among the predicted top-2
(``lookahead_layers = 1, experts_per_layer = 1``). Mixtral-offloading (Eliseev & Mazur)
loads the predicted experts of the next layer speculatively: ``experts_per_layer = 2``
([recall]: the exact count in its code is not verified). Runs in decode only by default.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import PrefetchView


class GatePrefetchParams(BaseModel):
    """How far ahead and how many experts per layer; ``candidates``: how many of the
    most probable predicted experts to consider (0 = the model's top-k)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    lookahead_layers: int = Field(
        1,
        ge=1,
        le=8,
        description="Layers ahead whose experts are predicted and prefetched (AdapMoE's code: 1).",
    )
    experts_per_layer: int = Field(
        1,
        ge=1,
        description="Uncached predicted experts copied ahead per "
        "lookahead layer (AdapMoE's code: 1).",
    )
    candidates: int = Field(
        0,
        ge=0,
        description="Most probable predicted experts considered per layer (0: the model's top-k).",
    )
    decode_only: bool = Field(default=True, description="Prefetch in decode steps only.")


@policies.register("moe.prefetch", "gate")
class GatePrefetch:
    """Copy the most probable uncached predicted experts of the next layers."""

    Params = GatePrefetchParams

    def __init__(self, params: GatePrefetchParams, rng: np.random.Generator) -> None:
        self.params = params
        self.lookahead_layers = params.lookahead_layers

    def prefetch(self, view: PrefetchView) -> tuple[tuple[int, int], ...]:
        """Per lookahead layer, its first uncached predicted experts."""
        if self.params.decode_only and view.phase != "decode":
            return ()
        out: list[tuple[int, int]] = []
        for la in view.lookahead:
            n = self.params.candidates or len(la.predicted)
            picks = [int(e) for e, c in zip(la.predicted[:n], la.cached[:n], strict=True) if not c]
            out += [(la.layer, e) for e in picks[: self.params.experts_per_layer]]
        return tuple(out)
