"""Cuckoo's packing: multi-objective max-weight matching with a deadline constraint.

RECONSTRUCTION (Cuckoo's abstract only; ../shared/papers/cluster.md §3.2). Edge weight
``alpha * U(P) + beta * sum_j urg_j - gamma * sum_j slow_j`` with U Muri's utilisation,
``urg_j = min(1, R_j / (D_j - now))`` for a deadline job that can still meet its deadline
alone (R_j its remaining solo time on its fastest candidate type; 0 otherwise) and
``slow_j = T_P / solo_j - 1``. T_P is the stage-grained estimate (per-stage interference;
Cuckoo's abstract: "stage-grained execution-time estimation with runtime interference"),
where Muri uses its coarse per-size factors.

Per-type rule (``target: fastest``, default): the GPU stage scales with the type's speed
and the data and network stages do not, so which jobs interleave well depends on the
type. Every quantity above is taken on the merge's *target type*: the type a running
member group holds; else, among the allowed types with free GPUs for the group (all
allowed types if none has room), the one with the least packed iteration time T_P(t)
among those that keep every member's deadline (a member that meets its deadline alone on
its fastest candidate type must finish by it packed on t, restart included). If no type
keeps the deadlines the edge is removed. That target is the type Cuckoo's allocation
then picks for the group alone (its cheapest deadline-safe edge: least remaining time),
so packing and allocation price the same type. An edge that gains nothing on the target
(T_P >= sum of solo times there) is removed. ``target: reference`` is the earlier
estimate on the reference type (ablation). alpha, beta, gamma are not published.

Node contention (``contention: true``, default; used only when the view offers
``estimate_contended_on``, i.e. with ``workload.contention.enabled``): every T(t) above
(packed and solo) is the stage-grained estimate with the data and network stages
stretched by the set's own expected CPU/storage/NIC load against the node share of the
GPUs it will hold (workloads.cluster_contention.ShareEstimate). So a pair whose two data
stages overlap in the cycle and together need more cores than their share loses its gain
(no edge) or weight. Cuckoo's abstract criticises Muri for simplifying interference "when
jobs use one resource simultaneously"; this rule is our reading of it (reconstruction).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.schedulers.cluster._matching import Facts, matching_rounds
from hetsim.schedulers.cluster.packing_muri import utilisation
from hetsim.simulator.registry import policies
from hetsim.workloads.cluster.view import PackingView


class CuckooPackingParams(BaseModel):
    """Weights of the reconstructed objective (not from the paper: assumptions)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    alpha: float = Field(
        1.0,
        ge=0.0,
        description="Weight of the packed group's utilisation U(P) in the "
        "edge weight (not published: assumption).",
    )
    beta: float = Field(
        1.0,
        ge=0.0,
        description="Weight of the members' summed deadline urgency in the "
        "edge weight (not published: assumption).",
    )
    gamma: float = Field(
        0.5,
        ge=0.0,
        description="Weight of the members' summed slowdown T_P / solo - 1, "
        "subtracted from the edge weight (not published: assumption).",
    )
    estimate: Literal["stage", "group"] = Field(
        "stage", description="packed-time estimate: stage-grained, or Muri's (ablation)"
    )
    target: Literal["fastest", "reference"] = Field(
        "fastest",
        description="GPU type the estimate is taken on: the merge's fastest deadline-safe "
        "type with room (see module doc), or the reference type (ablation)",
    )
    contention: bool = Field(
        True,
        description="price merges with the contention-aware estimate when the view offers "
        "it (node contention on); false: contention-blind (ablation)",
    )


@policies.register("cluster.packing", "cuckoo")
class CuckooPacking:
    """Matching rounds on utilisation + urgency - slowdown, deadline-safe edges only."""

    Params = CuckooPackingParams

    def __init__(self, params: CuckooPackingParams, rng: np.random.Generator) -> None:
        self.params = params
        self._held: dict[int, int] = {}  # job id -> type its running group holds

    def weight(self, view: PackingView, facts: Facts, members: tuple[int, ...]) -> float:
        """The edge weight, or 0 when the merge breaks a deadline or gains nothing."""
        on = view.estimate_stage_iter_on
        if self.params.contention and view.estimate_contended_on is not None:
            on = view.estimate_contended_on
        if self.params.target == "reference" or self.params.estimate == "group" or on is None:
            return self._reference_weight(view, facts, members)
        gpus = max(facts[j][3] for j in members)
        held = {self._held[j] for j in members if j in self._held}
        allowed = [t for t in range(len(view.free_by_type)) if np.isfinite(on(members, t))]
        types = sorted(held) or [t for t in allowed if view.free_by_type[t] >= gpus] or allowed
        left = {j: facts[j][2] - view.now_s for j in members}
        solo = {j: [on((j,), t) for t in types] for j in members}
        alone = {j: facts[j][1] * min(solo[j]) <= left[j] for j in members}
        best: tuple[float, int] | None = None
        for i, t in enumerate(types):
            t_p = on(members, t)
            if all(not alone[j] or view.restart_s + facts[j][1] * t_p <= left[j] for j in members):
                best = min(best or (t_p, i), (t_p, i))
        if best is None:
            return 0.0
        t_p, i = best
        solo_sum = sum(solo[j][i] * facts[j][3] for j in members) / gpus  # GPU-weighted
        if t_p >= solo_sum:
            return 0.0
        urg = sum(min(1.0, facts[j][1] * min(solo[j]) / left[j]) for j in members if alone[j])
        slow = sum(t_p / solo[j][i] - 1.0 for j in members)
        p = self.params
        return p.alpha * solo_sum / (view.num_stages * t_p) + p.beta * urg - p.gamma * slow

    def _reference_weight(self, view: PackingView, facts: Facts, members: tuple[int, ...]) -> float:
        """The weight with every time on the reference type (the ablation)."""
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
        self._held = {j: u.running_on for u in view.units if u.running for j in u.members}
        return matching_rounds(view, self.weight)
