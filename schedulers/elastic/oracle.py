"""Oracle forecaster: the true future rates (the upper bound of forecasting)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.elastic.view import OracleForecastView


class OracleParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("elastic.forecaster", "oracle")
class OracleForecaster:
    """Returns the mechanism's true next rates (``needs_future``); past the run's end it
    repeats the last known rate. Not a real policy: it bounds what forecasting can buy."""

    Params = OracleParams
    needs_future = True

    def __init__(self, params: OracleParams, rng: np.random.Generator) -> None:
        self.params = params

    def forecast(self, view: OracleForecastView) -> np.ndarray:
        """The true path, padded to the horizon."""
        if not isinstance(view, OracleForecastView):
            raise ValueError("the oracle forecaster needs the future in its view")
        future, h = view.future_per_s, view.view.horizon_steps
        if len(future) >= h:
            return np.array(future[:h], dtype=float)
        last = float(future[-1]) if len(future) else float(view.view.history_per_s[-1])
        return np.concatenate([future, np.full(h - len(future), last)])
