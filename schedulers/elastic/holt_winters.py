"""Holt-Winters forecaster: additive level, trend and daily season on bucketed rates.

Written here from the textbook recursions (Holt 1957, Winters 1960; Hyndman &
Athanasopoulos, FPP3 section 8.3), no statsmodels. Kale (SoCC'24) forecasts with
FEDformer, whose model and training are not public; Holt-Winters is the classical
seasonal forecaster standing in for it (reconstruction, elastic-observability.md 1.3).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.limits import PositiveSeconds
from hetsim.simulator.registry import policies
from hetsim.workloads.elastic.view import ForecastView


class HoltWintersParams(BaseModel):
    """Smoothing weights per bucket; ``bucket_s`` aggregates control steps first."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    season_s: PositiveSeconds = Field(
        default=86400.0, description="Length of the season, in seconds (a day)."
    )
    bucket_s: PositiveSeconds = Field(
        default=300.0,
        description="Seconds of control steps averaged into one bucket before smoothing.",
    )
    alpha: float = Field(default=0.3, gt=0.0, le=1.0, description="level weight")
    beta: float = Field(default=0.01, ge=0.0, le=1.0, description="trend weight")
    gamma: float = Field(default=0.2, ge=0.0, le=1.0, description="season weight")


@policies.register("elastic.forecaster", "holt-winters")
class HoltWintersForecaster:
    """Additive Holt-Winters on ``bucket_s`` means of the observed rate.

    Recursions per complete bucket x_i (season slot s = i mod m)::

        l_i = alpha (x_i - S_s) + (1 - alpha)(l_{i-1} + b_{i-1})
        b_i = beta (l_i - l_{i-1}) + (1 - beta) b_{i-1}
        S_s = gamma (x_i - l_i) + (1 - gamma) S_s

    initialised from the first season (level = its mean, trend 0, season = deviations).
    Forecast for bucket i + h: ``l_i + h b_i + S_{(i+h) mod m}``, each step taking its
    bucket's value. Before one season of history: the last bucket's mean.
    """

    Params = HoltWintersParams
    needs_future = False

    def __init__(self, params: HoltWintersParams, rng: np.random.Generator) -> None:
        self.params = params
        self._buckets: list[float] = []  # bucket means seen so far
        self._level = 0.0
        self._trend = 0.0
        self._season: np.ndarray | None = None

    def _update(self, i: int, x: float) -> None:
        p, season = self.params, self._season
        assert season is not None
        s = i % len(season)
        prev = self._level
        self._level = p.alpha * (x - season[s]) + (1 - p.alpha) * (prev + self._trend)
        self._trend = p.beta * (self._level - prev) + (1 - p.beta) * self._trend
        season[s] = p.gamma * (x - self._level) + (1 - p.gamma) * season[s]

    def _observe(self, hist: np.ndarray, b: int, m: int) -> None:
        for i in range(len(self._buckets), len(hist) // b):
            x = float(hist[i * b : (i + 1) * b].mean())
            self._buckets.append(x)
            if self._season is not None:
                self._update(i, x)
            elif i + 1 == m:
                first = np.array(self._buckets)
                self._level = float(first.mean())
                self._season = first - self._level

    def forecast(self, view: ForecastView) -> np.ndarray:
        """Path of ``horizon_steps`` rates from the next step on."""
        b = max(1, round(self.params.bucket_s / view.step_s))
        m = max(2, round(self.params.season_s / (b * view.step_s)))
        hist = view.history_per_s
        self._observe(hist, b, m)
        h = view.horizon_steps
        if self._season is None:
            last = self._buckets[-1] if self._buckets else (float(hist[-1]) if len(hist) else 0.0)
            return np.full(h, last)
        done = len(self._buckets)  # buckets 0..done-1 are in the state
        q = (len(hist) + np.arange(h)) // b  # bucket of each future step
        ahead = q - (done - 1)
        return np.asarray(self._level + ahead * self._trend + self._season[q % m])
