"""Seasonal-naive forecaster: the rate one season ago, averaged over recent seasons."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from hetsim.simulator.limits import PositiveSeconds
from hetsim.simulator.registry import policies
from hetsim.workloads.elastic.view import ForecastView


class SeasonalNaiveParams(BaseModel):
    """``season_s``: the period (a day); ``seasons``: how many past periods to average."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    season_s: PositiveSeconds = Field(
        default=86400.0, description="Length of the season, in seconds (a day)."
    )
    seasons: PositiveInt = Field(default=1, description="Past seasons averaged for the forecast.")


@policies.register("elastic.forecaster", "seasonal-naive")
class SeasonalNaiveForecaster:
    """``lambda_hat(t + h) = mean_j lambda(t + h - j * season)``, j = 1..seasons.

    Standard seasonal baseline (Hyndman & Athanasopoulos, FPP3 section 5.2); seasons
    not yet observed are left out of the mean, and before one full season of history
    it falls back to the last value. Steps of the path that would need the future
    (horizon longer than a season) repeat the last observed one.
    """

    Params = SeasonalNaiveParams
    needs_future = False

    def __init__(self, params: SeasonalNaiveParams, rng: np.random.Generator) -> None:
        self.params = params

    def forecast(self, view: ForecastView) -> np.ndarray:
        """The path copied from one (or several averaged) past seasons."""
        hist = view.history_per_s
        h = view.horizon_steps
        m = max(1, round(self.params.season_s / view.step_s))
        t = len(hist)
        starts = [t - j * m for j in range(1, self.params.seasons + 1) if t - j * m >= 0]
        if not starts:
            return np.full(h, float(hist[-1]) if t else 0.0)
        offsets = np.arange(h)
        paths = [hist[np.minimum(lo + offsets, t - 1)] for lo in starts]
        return np.asarray(np.mean(paths, axis=0))
