"""Join-the-shortest-queue routing by waiting work (Splitwise's token-JSQ)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import RouteView


class JsqParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("serving.routing", "jsq")
class JsqRouting:
    """Splitwise (Patel et al., ISCA'24) JSQ, token variant: on entry, the candidate with
    the fewest prompt tokens waiting for prefill; for a decode hand-off, the one with
    the most free KV tokens (Splitwise's KV-JSQ). Ties go to the lowest number."""

    Params = JsqParams

    def __init__(self, params: JsqParams, rng: np.random.Generator) -> None:
        pass

    def route(self, view: RouteView) -> int:
        """Shortest prompt-token queue, or most free KV for decodes."""
        if view.stage == "decode":
            return min(view.instances, key=lambda s: (-s.free_kv_tokens, s.number)).number
        return min(view.instances, key=lambda s: (s.queued_tokens, s.number)).number
