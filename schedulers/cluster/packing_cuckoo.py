"""Cuckoo's packing: multi-objective max-weight matching with a deadline constraint.

RECONSTRUCTION (Cuckoo's abstract only; ../shared/papers/cluster.md §3.2). Edge weight
``alpha * U(P) + beta * sum_j urg_j - gamma * sum_j slow_j`` with U Muri's utilisation,
``urg_j = min(1, R_j / (D_j - now))`` for a deadline job that can still meet its deadline
alone (R_j its remaining solo time; 0 otherwise) and ``slow_j = T_P / solo_j - 1``.
An edge is removed when packing makes a member miss a deadline it meets alone
(estimated with the packed iteration time and the restart delay), or gains nothing
(T_P >= sum of solo times). T_P is the stage-grained estimate (per-stage interference,
``PackingView.estimate_stage_iter_s``; Cuckoo's abstract: "stage-grained execution-time
estimation with runtime interference"), where Muri uses its coarse per-size factors.
Estimates are on the reference GPU type; the allocation step then prices the group per
type. alpha, beta, gamma are not published: exposed here.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from schedulers.cluster._matching import Facts, matching_rounds
from schedulers.cluster.packing_muri import utilisation
from schedulers.cluster.view import PackingView
from simulator.registry import policies


class CuckooPackingParams(BaseModel):
    """Weights of the reconstructed objective (not from the paper: assumptions)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    alpha: float = Field(1.0, ge=0.0)
    beta: float = Field(1.0, ge=0.0)
    gamma: float = Field(0.5, ge=0.0)
    estimate: Literal["stage", "group"] = Field(
        "stage", description="packed-time estimate: stage-grained, or Muri's (ablation)"
    )


@policies.register("cluster.packing", "cuckoo")
class CuckooPacking:
    """Matching rounds on utilisation + urgency - slowdown, deadline-safe edges only."""

    Params = CuckooPackingParams

    def __init__(self, params: CuckooPackingParams, rng: np.random.Generator) -> None:
        self.params = params

    def weight(self, view: PackingView, facts: Facts, members: tuple[int, ...]) -> float:
        """The edge weight, or 0 when the merge breaks a deadline or gains nothing."""
        u, t_p, solo_sum = utilisation(
            view, facts, members, stage_grained=self.params.estimate == "stage"
        )
        if t_p >= solo_sum:
            return 0.0
        urg = slow = 0.0
        for j in members:
            solo, rem, deadline, _ = facts[j]
            left = deadline - view.now_s
            alone_ok = np.isfinite(deadline) and rem * solo <= left
            if alone_ok and view.restart_s + rem * t_p > left:
                return 0.0
            urg += min(1.0, rem * solo / left) if alone_ok else 0.0
            slow += t_p / solo - 1.0
        p = self.params
        return p.alpha * u + p.beta * urg - p.gamma * slow

    def pack(self, view: PackingView) -> list[tuple[int, ...]]:
        """Merges chosen by matching rounds."""
        return matching_rounds(view, self.weight)
