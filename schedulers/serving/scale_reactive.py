"""Threshold autoscaling without hysteresis in time (a baseline for Cauchy's)."""

from __future__ import annotations

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from schedulers.serving.scale_units import unit_to_add, unit_to_drain, utilisation
from schedulers.serving.view import ScaleDecision, ScaleView
from simulator.registry import policies


class ReactiveParams(BaseModel):
    """``period_s``, ``window_s``, the thresholds and ``min_units`` as in
    ``hysteresis`` (same defaults); no hold times."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    period_s: PositiveFloat = 30.0
    window_s: PositiveFloat = 60.0
    upper: PositiveFloat = 0.9
    lower: NonNegativeFloat = 0.5
    min_units: PositiveInt = 1
    pd_ratios: list[tuple[PositiveInt, PositiveInt]] = Field(
        default_factory=lambda: [(1, 1), (1, 2), (2, 1), (1, 3), (1, 4)]
    )

    @model_validator(mode="after")
    def _band(self) -> ReactiveParams:
        if not self.lower < self.upper:
            raise ValueError(f"lower ({self.lower}) must be below upper ({self.upper})")
        return self


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
