"""Cauchy's autoscaling: utilisation thresholds with hold times (RECONSTRUCTION)."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from hetsim.schedulers.serving.scale_units import (
    ThresholdParams,
    unit_to_add,
    unit_to_drain,
    utilisation,
)
from hetsim.simulator.limits import Seconds
from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import ScaleDecision, ScaleView


class HysteresisParams(ThresholdParams):
    """Unknown constants of Cauchy's autoscaler, exposed (``../shared/papers/serving.md``
    §1.2 step 9 gives Δ = 30-60 s, u_hi ≈ 0.85-0.9, u_lo ≈ 0.5-0.6, a cooldown): those
    of :class:`ThresholdParams` (``period_s`` is Δ) plus ``hold_out_s``/``hold_in_s``
    (how long a threshold must be crossed at every check before acting) and
    ``drain_rule`` (which active unit a scale-in drains)."""

    hold_out_s: Seconds = Field(
        default=60.0,
        description="Seconds the utilisation must stay above upper at every "
        "check before a scale-out (reconstruction).",
    )
    hold_in_s: Seconds = Field(
        default=300.0,
        description="Seconds the utilisation must stay below lower at every "
        "check before a scale-in (reconstruction).",
    )
    drain_rule: Literal["least-efficient", "most-saving"] = Field(
        default="least-efficient",
        description="Unit a scale-in drains: least-efficient (lowest estimated "
        "goodput per dollar) or most-saving (highest $/h).",
    )


@policies.register("serving.scaling", "hysteresis")
class HysteresisScaling:
    """Cauchy (SoCC'25) "dynamic autoscaling keeps cost efficiency stable when requests
    surge", as reconstructed: every ``period_s`` the utilisation ``u`` = measured rate
    over the window / summed goodput estimates of warming and active units. When
    ``u > upper`` at every check for ``hold_out_s``, add the free combo (or colocated
    instance) with the best estimated Tokens/USD; when ``u < lower`` at every check for
    ``hold_in_s`` (longer), drain the active unit with the lowest estimated goodput per
    dollar, if the rest keeps ``u <= upper``. A held condition restarts after acting,
    so consecutive actions are at least one hold apart. Warming units count as capacity
    (no second scale-out while one warms up)."""

    Params = HysteresisParams

    def __init__(self, params: HysteresisParams, rng: np.random.Generator) -> None:
        self.params = params
        self.period_s: float | None = params.period_s
        self.window_s = params.window_s
        self._above: float | None = None  # since when u > upper at every check
        self._below: float | None = None

    def decide(self, view: ScaleView) -> ScaleDecision:
        """See the class docstring."""
        p, now = self.params, view.now_s
        u = utilisation(view)
        self._above = (self._above if self._above is not None else now) if u > p.upper else None
        self._below = (self._below if self._below is not None else now) if u < p.lower else None
        if self._above is not None and now - self._above >= p.hold_out_s - 1e-9:
            add = unit_to_add(view, p.pd_ratios)
            if add:
                self._above = None
                return ScaleDecision(add=add)
        if self._below is not None and now - self._below >= p.hold_in_s - 1e-9:
            group = unit_to_drain(view, p.min_units, p.upper, p.drain_rule)
            if group is not None:
                self._below = None
                return ScaleDecision(drain=(group,))
        return ScaleDecision()
