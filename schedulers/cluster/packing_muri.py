"""Muri (SIGCOMM'22): interleave jobs by rounds of maximum-weight matching.

Edge weight is Muri's utilisation of the merged group, U(P) = sum_j solo_j / (k T_P),
k the cycle's phases (Muri's multi_resource, 4), T_P the packed iteration time with
Muri's per-size interference factors (its coarse estimate) and solo_j each member's
solo iteration time; an edge exists only if U > lambda |P| / k (``weight_lambda``, Muri's
``weight_lbd``, default 0) and packing gains throughput, T_P < sum_j solo_j (Muri's
``autopack`` split rule applied before matching). Heterogeneity-unaware: times are on
the reference GPU type. Deadlines are ignored.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.schedulers.cluster._matching import Facts, matching_rounds
from hetsim.simulator.registry import policies
from hetsim.workloads.cluster.view import PackingView


class MuriParams(BaseModel):
    """Muri's edge threshold lambda (``weight_lbd`` in its code)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    weight_lambda: float = Field(
        0.0,
        ge=0.0,
        description="Edge threshold lambda: a pair is matched only if U(P) > "
        "lambda |P| / k (Muri's weight_lbd, default 0).",
    )


def utilisation(
    view: PackingView, facts: Facts, members: tuple[int, ...], stage_grained: bool = False
) -> tuple[float, float, float]:
    """(U(P), T_P, sum of solo iteration times) of a set of jobs, with Muri's per-size
    interference factors or (``stage_grained``, when the view offers it) per-stage. With
    members of different GPU counts (the cross-GPU ablation) each solo time is weighted by
    the member's share of the group's GPUs (a 1-GPU job in an 8-GPU gang leaves 7 idle);
    with equal counts this is Muri's plain sum."""
    estimate = view.estimate_iter_s
    if stage_grained and view.estimate_stage_iter_s is not None:
        estimate = view.estimate_stage_iter_s
    t_p = estimate(members)
    gpus = max(facts[j][3] for j in members)
    solo = sum(facts[j][0] * facts[j][3] for j in members) / gpus  # GPU-weighted
    return solo / (view.num_stages * t_p), t_p, solo


@policies.register("cluster.packing", "muri")
class MuriPacking:
    """Max-weight matching rounds on Muri's utilisation weight (same GPU count only)."""

    Params = MuriParams

    def __init__(self, params: MuriParams, rng: np.random.Generator) -> None:
        self.params = params

    def weight(self, view: PackingView, facts: Facts, members: tuple[int, ...]) -> float:
        """U(P) if the merge is worth it, else 0."""
        u, t_p, solo = utilisation(view, facts, members)
        if t_p >= solo or u <= self.params.weight_lambda * len(members) / view.num_stages:
            return 0.0
        return u

    def pack(self, view: PackingView) -> list[tuple[int, ...]]:
        """Merges chosen by matching rounds."""
        return matching_rounds(view, self.weight)
