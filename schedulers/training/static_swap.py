"""Capuchin-like static swap/recompute plan from one profiled iteration.

Capuchin (Peng et al., ASPLOS'20): a passive first iteration records every tensor's
accesses; then, per activation, ``FreeTime = SwapInStart - SwapOutEnd`` with
``SwapOutEnd = t_evict + size/BW`` and ``SwapInStart = t_back - size/BW`` (both copy times
read from the view, the mechanism's estimates). Swaps are chosen in FreeTime order while
they hide (FreeTime > 0) until the memory excess is covered; the rest is covered by
recomputation in ``MSPS = size / recompute time`` order. The prefetch
("in-trigger") is the last op that starts before ``SwapInStart``.

Keying (``keying``): ``capuchin`` (default, as Capuchin keys it) names each tensor by its
identity (layer, name: TensorFlow's op and output) and each in-trigger by the operation
that triggers it ((phase, layer, op name, occurrence)), so the plan still applies when ops
are inserted elsewhere; ``index`` writes absolute op indices of the profiled iteration
(the weakest static plan, kept for comparison).

Simplified: the plan is fixed after the profiled iteration (no runtime feedback adjusting
in-triggers, no re-planning when sizes change): the regular-access assumption that
eager-mode sequence changes break. Tensors are assumed all live at the peak, so the excess
is covered by the sum of chosen sizes.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.training.view import (
    ProfileView,
    StepDecision,
    StepReport,
    SwapOrder,
    SwapPlan,
)


class StaticSwapParams(BaseModel):
    """Headroom kept below capacity when sizing the plan."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    margin_bytes: int = Field(2 << 30, ge=0, description="headroom below capacity")
    allow_recompute: bool = Field(
        default=True,
        description="Cover the excess that swaps cannot hide by recomputation, in MSPS order.",
    )
    forced_swap_on_oom: bool = Field(True, description="runtime OOM fallback (passive swap)")
    keying: Literal["capuchin", "index"] = Field(
        "capuchin", description="tensors and in-triggers by identity, or by op index"
    )


@policies.register("training.swap", "static-swap")
class StaticSwap:
    """Plan once from the first (passive, forced-swap) iteration; apply it unchanged after."""

    Params = StaticSwapParams

    def __init__(self, params: StaticSwapParams, rng: np.random.Generator) -> None:
        self.params = params
        self.plan: SwapPlan | None = None

    def decide(self, report: StepReport | None) -> StepDecision:
        """Passive profiling first, then the frozen plan."""
        if self.plan is None and report is not None and report.profile is not None:
            self.plan = self.make_plan(report.profile)
        if self.plan is None:
            return StepDecision(SwapPlan(forced_swap_on_oom=True), profile=True)
        return StepDecision(self.plan)

    def make_plan(self, p: ProfileView) -> SwapPlan:
        """Swaps by FreeTime, then recomputation by MSPS, until the excess is covered."""
        excess = int(p.memory_bytes.max()) - (p.capacity_bytes - self.params.margin_bytes)
        cand = np.flatnonzero((p.first_bwd_use >= 0) & (p.last_fwd_use >= 0))
        t_evict = p.op_end_s[p.last_fwd_use[cand]]
        t_back = p.op_start_s[p.first_bwd_use[cand]]
        size = p.size_bytes[cand]
        swap_in_start = t_back - p.swap_in_s[cand]
        free_time = swap_in_start - (t_evict + p.swap_out_s[cand])
        swaps: list[SwapOrder] = []
        chosen: set[int] = set()
        for j in np.argsort(-free_time, kind="stable"):
            if excess <= 0 or free_time[j] <= 0:
                break
            t = int(cand[j])
            trigger = int(np.searchsorted(p.op_start_s, swap_in_start[j], side="right")) - 1
            trigger = max(trigger, int(p.last_fwd_use[t]) + 1)
            if self.params.keying == "capuchin" and p.op_keys:
                swaps.append(SwapOrder(p.keys[t], in_at_key=p.op_keys[trigger]))
            else:
                swaps.append(SwapOrder(p.keys[t], int(p.last_fwd_use[t]), in_at_op=trigger))
            chosen.add(t)
            excess -= int(size[j])
        recompute = self._recompute(p, cand, chosen, excess)
        return SwapPlan(tuple(swaps), recompute, self.params.forced_swap_on_oom)

    def _recompute(self, p: ProfileView, cand: np.ndarray, chosen: set[int],
                   excess: int) -> tuple[tuple[int, str], ...]:  # fmt: skip
        if not self.params.allow_recompute or excess <= 0:
            return ()
        rest = np.array([t for t in cand if t not in chosen], dtype=int)
        msps = p.size_bytes[rest] / np.maximum(p.recompute_s[rest], 1e-12)
        keys = []
        for t in rest[np.argsort(-msps, kind="stable")]:
            if excess <= 0:
                break
            keys.append(p.keys[int(t)])
            excess -= int(p.size_bytes[t])
        return tuple(keys)
