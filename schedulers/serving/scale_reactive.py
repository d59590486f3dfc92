"""Threshold autoscaling without hysteresis in time (a baseline for Cauchy's)."""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.serving.scale_units import (
    ThresholdParams,
    unit_to_add,
    unit_to_drain,
    utilisation,
)
from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import ScaleDecision, ScaleView


class ReactiveParams(ThresholdParams):
    """``period_s``, ``window_s``, the thresholds and ``min_units`` as in
    ``hysteresis`` (same defaults); no hold times."""


@policies.register("serving.scaling", "reactive")
class ReactiveScaling:
    """A plain threshold rule (the simplest autoscaler, e.g. a utilisation-target
    HPA without stabilisation): at each check, add the best free unit when
    ``u > upper`` and drain the least efficient active unit when ``u < lower``, with no
    hold time and no check that the rest can carry the load. Same load signal and unit
    choices as ``hysteresis`` (:mod:`schedulers.serving.scale_units`)."""

    Params = ReactiveParams

    def __init__(self, params: ReactiveParams, rng: np.random.Generator) -> None:
        self.params = params
        self.period_s: float | None = params.period_s
        self.window_s = params.window_s

    def decide(self, view: ScaleView) -> ScaleDecision:
        """See the class docstring."""
        u = utilisation(view)
        if u > self.params.upper:
            return ScaleDecision(add=unit_to_add(view, self.params.pd_ratios))
        if u < self.params.lower:
            group = unit_to_drain(view, self.params.min_units, None)
            return ScaleDecision(drain=() if group is None else (group,))
        return ScaleDecision()
