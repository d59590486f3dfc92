"""Chameleon / SmartSwap (arXiv 2509.11076, DAC'26): swapping under changing op sequences.

Step-level state machine of MindSpeed ``smart_swap`` (``swap_manager.py``), defaults from
``swap_policy_config.py`` as read in the project's notes:

- WARMUP: profile only, OOMs become forced swaps; after ``warmup_step`` consecutive steps
  whose op count is within ``op_diff_thresh`` of the reference, go to SEARCHING.
- SEARCHING: profile and regenerate the plan every step (generator v1,
  :mod:`schedulers.training._chameleon_plan`), keep the plan with the best measured step
  time; back to WARMUP if the op count moves; after ``stable_step`` steps go to STABLE.
- STABLE: profiler off, the best plan runs. The op count is still monitored (cheap): a change
  beyond the threshold, or forced swaps, re-initialise to WARMUP; a forced swap also
  grows the headroom by ``adjust_memory_bytes``.

Best-plan selection (issue 19): the warm-up plan (no planned swaps, forced swaps on OOM)
is a candidate too, measured on the last warm-up step, so a generated plan is kept only
if it measured faster. With ``tolerate_measured_forced`` (default) STABLE restarts only on
more forced swaps than the kept plan showed when it was measured (the warm-up plan's are
its design); false restarts on any forced swap (MindSpeed's rule, which makes a kept
warm-up plan restart every step).

``profile_every_step`` keeps the profiler on in STABLE (the paper's "profile every step"
comparison for profiling overhead). Simplified: the policy's search time is not charged.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from hetsim.schedulers.training._chameleon_plan import generate
from hetsim.simulator.registry import policies
from hetsim.workloads.training.view import StepDecision, StepReport, SwapPlan

WARMUP, SEARCHING, STABLE = "warmup", "searching", "stable"


class ChameleonParams(BaseModel):
    """MindSpeed smart_swap defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    warmup_step: PositiveInt = Field(
        default=2,
        description="Consecutive similar steps in WARMUP before "
        "SEARCHING (MindSpeed smart_swap default 2).",
    )
    stable_step: PositiveInt = Field(
        default=3,
        description="Steps of plan search in SEARCHING before STABLE (MindSpeed default 3).",
    )
    op_diff_thresh: float = Field(
        0.05,
        ge=0,
        description="Relative change of the op count beyond which the sequence "
        "counts as changed (MindSpeed default 0.05).",
    )
    tensor_size_filter_bytes: int = Field(
        20 << 20,
        ge=0,
        description="Smallest activation, in bytes, considered for "
        "swapping (MindSpeed default 20 MiB).",
    )
    redundant_memory_bytes: int = Field(
        2 << 30,
        ge=0,
        description="Initial headroom in bytes: ops above capacity minus this "
        "are points to relieve (MindSpeed default 2 GiB).",
    )
    size_coverage_weight: float = Field(
        2.0,
        ge=0,
        description="Weight w of the size term in a candidate's score: coverage + w x "
        "size^(1/3), both min-max normalised (MindSpeed default 2).",
    )
    adjust_memory_bytes: int = Field(
        300 << 20,
        ge=0,
        description="Bytes added to the headroom after forced swaps in "
        "STABLE (MindSpeed default 300 MiB).",
    )
    profile_every_step: bool = Field(
        default=False,
        description="Keep the profiler on in STABLE (the paper's profile-every-step comparison).",
    )
    tolerate_measured_forced: bool = Field(
        default=True,
        description="In STABLE restart only on more forced swaps than the kept plan showed "
        "when measured; false: on any forced swap (MindSpeed's rule).",
    )
    match_threshold: float = Field(
        0.75, ge=0, le=1, description="signature features that must agree (reconstruction)"
    )


@policies.register("training.swap", "chameleon")
class Chameleon:
    """Profile after a sequence change, search a swap plan, then run it unprofiled."""

    Params = ChameleonParams

    def __init__(self, params: ChameleonParams, rng: np.random.Generator) -> None:
        self.params = params
        self.state = WARMUP
        self.ref_ops: int | None = None
        self.similar_steps = 0
        self.searched = 0
        self.redundant = params.redundant_memory_bytes
        self.best: tuple[float, SwapPlan, int] | None = None  # step s, plan, forced swaps
        self.last = SwapPlan(forced_swap_on_oom=True)
        self.reprofiles = 0  # returns to WARMUP after the first

    def similar(self, op_count: int) -> bool:
        """Op count within ``op_diff_thresh`` of the reference (the only feature compared)."""
        ref = self.ref_ops
        return ref is not None and abs(op_count - ref) / ref < self.params.op_diff_thresh

    def decide(self, report: StepReport | None) -> StepDecision:
        """Advance the state machine on the last step's report; plan the next step."""
        if report is None:
            return self._warmup_step()
        if self.ref_ops is None:  # first report: it sets the reference
            return self._restart(report.op_count, count=False)
        if self.state == STABLE:
            if report.forced_swaps > self._tolerated() or not self.similar(report.op_count):
                if report.forced_swaps:
                    self.redundant += self.params.adjust_memory_bytes
                return self._restart(report.op_count)
            return self._run(self._best_plan(), self.params.profile_every_step)
        if not self.similar(report.op_count):
            return self._restart(report.op_count)
        if self.state == WARMUP:
            self.similar_steps += 1
            if self.similar_steps < self.params.warmup_step:
                return self._warmup_step()
            self.state, self.searched = SEARCHING, 0
            self.best = (report.step_s, self.last, report.forced_swaps)  # the warm-up plan
        elif self.best is None or report.step_s < self.best[0]:
            self.best = (report.step_s, self.last, report.forced_swaps)  # the plan that ran
        if self.searched >= self.params.stable_step:
            self.state = STABLE
            return self._run(self._best_plan(), self.params.profile_every_step)
        self.searched += 1
        if report.profile is None:
            return self._run(self.last, True)
        p = self.params
        orders = generate(report.profile, self.redundant, p.tensor_size_filter_bytes,
                          p.size_coverage_weight)  # fmt: skip
        plan = SwapPlan(orders, forced_swap_on_oom=True, match_threshold=p.match_threshold)
        return self._run(plan, True)

    def _best_plan(self) -> SwapPlan:
        return self.best[1] if self.best is not None else self.last

    def _tolerated(self) -> int:
        """Forced swaps STABLE accepts from the kept plan (class doc)."""
        if not self.params.tolerate_measured_forced or self.best is None:
            return 0
        return self.best[2]

    def _restart(self, op_count: int, count: bool = True) -> StepDecision:
        self.state, self.ref_ops, self.similar_steps = WARMUP, op_count, 1
        self.reprofiles += int(count)
        if self.similar_steps >= self.params.warmup_step:
            self.state, self.searched, self.best = SEARCHING, 0, None
        return self._warmup_step()

    def _warmup_step(self) -> StepDecision:
        return self._run(SwapPlan(forced_swap_on_oom=True), True)

    def _run(self, plan: SwapPlan, profile: bool) -> StepDecision:
        self.last = plan
        return StepDecision(plan, profile)
