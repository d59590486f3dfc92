"""Threshold baseline: flag a rank whose mean iteration self time exceeds a multiple of
the median rank's.

What operators do without a dedicated tool (a dashboard alert on step time). The rank's
self time is its own work per iteration (dataload + forward + backward + its link time),
which excludes waiting at the collective. It says nothing about the cause.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.observability.view import Finding, WindowView


class ThresholdParams(BaseModel):
    """``factor``: flag when mean self time > factor x median over ranks."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    factor: float = Field(
        default=1.10,
        gt=1.0,
        description="Flag a rank whose mean self time exceeds factor x the median rank's.",
    )
    max_findings: int = Field(
        default=16, ge=1, description="Most ranks reported per window, slowest first."
    )


@policies.register("observability.detector", "threshold")
class ThresholdDetector:
    """Baseline: mean per-rank self time over the window above factor x the median rank's."""

    Params = ThresholdParams

    def __init__(self, params: ThresholdParams, rng: np.random.Generator) -> None:
        self.params = params

    def detect(self, view: WindowView) -> tuple[Finding, ...]:
        """Ranks over the threshold, slowest first; cause unknown."""
        mean_s = view.op_s.sum(axis=0).mean(axis=1)
        ratio = mean_s / np.median(mean_s)
        flagged = np.flatnonzero(ratio > self.params.factor)
        order = flagged[np.argsort(-ratio[flagged], kind="stable")][: self.params.max_findings]
        return tuple(Finding(int(r), "unknown", "iteration", float(ratio[r])) for r in order)
