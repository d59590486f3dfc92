"""EWMA forecaster: a flat path at the exponentially weighted mean of past rates."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.elastic.view import ForecastView


class EwmaParams(BaseModel):
    """``alpha``: weight of the newest step (per control step)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    alpha: float = Field(
        default=0.1,
        gt=0.0,
        le=1.0,
        description="Weight of the newest control step's rate: s_t "
        "= alpha x_t + (1 - alpha) s_{t-1}.",
    )


@policies.register("elastic.forecaster", "ewma")
class EwmaForecaster:
    """Exponentially weighted moving average, ``s_t = alpha x_t + (1 - alpha) s_{t-1}``,
    started at the first observation; the forecast is flat at ``s_t``.

    Classic smoothing baseline (no trend, no season). State is updated incrementally
    with the steps observed since the previous call, so a call costs O(new steps).
    """

    Params = EwmaParams
    needs_future = False

    def __init__(self, params: EwmaParams, rng: np.random.Generator) -> None:
        self.params = params
        self._seen = 0
        self._level = 0.0

    def forecast(self, view: ForecastView) -> np.ndarray:
        """A flat path at the current smoothed level."""
        a = self.params.alpha
        for x in view.history_per_s[self._seen :].tolist():
            self._level = x if self._seen == 0 else a * x + (1.0 - a) * self._level
            self._seen += 1
        return np.full(view.horizon_steps, self._level)
