"""Last-value forecaster: the next rates equal the last observed one (naive baseline)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.elastic.view import ForecastView


class LastValueParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("elastic.forecaster", "last-value")
class LastValueForecaster:
    """Persistence forecast: ``lambda_hat(t + h) = lambda(t)`` for every h (0 if no history).

    What a reactive autoscaler implicitly assumes; the floor every forecaster must beat.
    """

    Params = LastValueParams
    needs_future = False

    def __init__(self, params: LastValueParams, rng: np.random.Generator) -> None:
        self.params = params

    def forecast(self, view: ForecastView) -> np.ndarray:
        """A flat path at the last observed rate."""
        last = float(view.history_per_s[-1]) if len(view.history_per_s) else 0.0
        return np.full(view.horizon_steps, last)
