"""Mitigation: evict a detected straggler and bring in a spare (no rollback).

Data-parallel replicas hold identical weights, so a replacement rank can copy them from
a peer and the job pauses only for ``replace_s`` (the mechanism's estimate), instead of
rolling back to the last checkpoint. The common production remedy (ByteRobust,
MegaScale both describe machine eviction); simplified to a fixed pause.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.observability.view import Action, MitigationView


class EvictReplaceParams(BaseModel):
    """``min_slowdown``: act only when the job runs at least this much slower (1 = always)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    min_slowdown: float = Field(
        default=1.0,
        ge=1.0,
        description="Evict only when the job runs at least this many "
        "times slower than nominal (1: always).",
    )


@policies.register("observability.mitigation", "evict-replace")
class EvictReplace:
    """Evict the flagged rank and replace it with a spare, if the job is slow enough."""

    Params = EvictReplaceParams

    def __init__(self, params: EvictReplaceParams, rng: np.random.Generator) -> None:
        self.params = params

    def decide(self, view: MitigationView) -> Action:
        """``evict`` when the slowdown reaches ``min_slowdown``, else ``ignore``."""
        return "evict" if view.slowdown >= self.params.min_slowdown else "ignore"
