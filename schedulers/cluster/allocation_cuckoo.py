"""Cuckoo's allocation of packed groups to GPU types by min-cost max-flow / min-cut.

RECONSTRUCTION (Cuckoo's abstract only; ../shared/papers/cluster.md §3.3). Network:
source -> group (capacity = its GPUs) -> GPU type (an edge only where the group may run
and, if any type lets every deadline member finish in time, only such types) -> sink
(capacity = free GPUs). The min-cost max-flow places as many GPUs as possible,
then minimises cost per GPU = ``w (r_t / r_best - 2) + rank_weight x rank`` with
``w = 1 + urgency_weight x urgency`` and r_t the group's remaining time on type t: the
slowdown over its best type, weighted by urgency (urgent groups claim the faster types),
minus a placement credit w (when GPUs are short, the flow leaves out the groups whose
placement is worth least: the least urgent, then the latest in the order). An earlier
version had cost ``w r_t / r_best + rank_weight x rank``: with every group's cost scaled
up by its urgency, a short cluster left the *most* urgent groups out (docs/cluster.md). A group
must run on one type: it takes the type carrying most of its flow if it still fits,
else its next cheapest edge that fits; groups that fit nowhere (source side of the min
cut) wait. When no type is contended, each group's cheapest edge is the min-cost flow
and no flow is solved; otherwise schedulers.cluster._flow returns networkx's flow, with
the max-flow value in closed form and a lone group's unique flow found without networkx.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.schedulers.cluster._flow import min_cost_max_flow
from hetsim.simulator.registry import policies
from hetsim.workloads.cluster.view import AllocationView, GroupView


class CuckooAllocationParams(BaseModel):
    """Cost weights of the reconstructed flow (assumptions, not from the paper)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    urgency_weight: float = Field(
        4.0,
        ge=0.0,
        description="Weight of a group's urgency in its cost per GPU: w = 1 + "
        "urgency_weight x urgency (assumption, not from the paper).",
    )
    rank_weight: float = Field(
        0.01,
        ge=0.0,
        description="Cost per GPU added per place in the ordering, so "
        "earlier groups win ties (assumption).",
    )
    cost_scale: float = Field(1000.0, gt=0.0, description="integer resolution of costs")
    estimate: Literal["stage", "group"] = Field(
        "stage", description="group-time estimate: stage-grained, or Muri's (ablation)"
    )


@policies.register("cluster.allocation", "cuckoo")
class CuckooAllocation:
    """Min-cost max-flow from packed groups to GPU types, rounded to one type per group."""

    Params = CuckooAllocationParams

    def __init__(self, params: CuckooAllocationParams, rng: np.random.Generator) -> None:
        self.params = params

    def edges(self, g: GroupView, rank: int) -> dict[int, int]:
        """Type index -> integer cost per GPU of the group's allowed edges."""
        types = [t for t, ok in enumerate(g.allowed) if ok]
        safe = [t for t in types if g.meets_deadlines[t]]
        if g.has_deadline and safe:
            types = safe
        if not types:
            return {}
        best = min(g.remaining_s[t] for t in types)
        p = self.params
        factor = 1.0 + p.urgency_weight * g.urgency
        return {
            t: round(p.cost_scale * (factor * (g.remaining_s[t] / best - 2) + p.rank_weight * rank))
            for t in types
        }

    def allocate(self, view: AllocationView) -> list[int | None]:
        """Type index per group, or None (the group waits); stage-grained estimates where
        the view carries them (``groups_stage``), else the coarse ones."""
        if view.groups_stage and self.params.estimate == "stage":
            view = view._replace(groups=view.groups_stage)
        costs = [self.edges(g, r) for r, g in enumerate(view.groups)]
        cheapest = [min(c, key=lambda t: (c[t], t)) if c else None for c in costs]
        use = np.zeros(len(view.types), dtype=np.int64)
        for g, t in zip(view.groups, cheapest, strict=True):
            if t is not None:
                use[t] += g.gpus
        if np.all(use <= np.array(view.free_gpus)):
            return cheapest
        return self._flow(view, costs)

    def _flow(self, view: AllocationView, costs: list[dict[int, int]]) -> list[int | None]:
        gpus = [g.gpus for g in view.groups]
        flow = min_cost_max_flow(gpus, costs, [int(f) for f in view.free_gpus])
        room = list(view.free_gpus)
        out: list[int | None] = []
        for g, c, got in zip(view.groups, costs, flow, strict=True):
            prefs = sorted(c, key=lambda t: (-got.get(t, 0), c[t], t))
            pick = next((t for t in prefs if room[t] >= g.gpus and got.get(t, 0) > 0), None)
            if pick is not None:
                room[pick] -= g.gpus
            out.append(pick)
        return out
