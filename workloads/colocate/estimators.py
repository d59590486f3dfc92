"""Serving-load estimators an arbiter sees: from past arrivals only, never the trace."""

from __future__ import annotations

import bisect

from hetsim.workloads.colocate.view import Estimator


class LoadEstimate:
    """Arrival-rate estimate of a serving workload, updated at each arbiter period.

    ``last-window``: arrivals in the last ``window_s`` over ``window_s``; ``ewma``: the
    exponentially weighted mean of the per-period rates (weight ``alpha`` on the newest).
    ``forecast_error`` scales the estimate by ``1 + forecast_error`` (a biased
    forecaster; swept in ``scenarios/colocate-robustness.yaml``)."""

    def __init__(
        self, kind: Estimator, window_s: float, alpha: float, forecast_error: float
    ) -> None:
        self.kind, self.window_s, self.alpha = kind, window_s, alpha
        self.error = forecast_error
        self.value: float | None = None
        self._last_s = 0.0

    def update(self, arrivals: list[float], now_s: float) -> float:
        """The estimate at ``now_s`` from ``arrivals`` (sorted; only those <= now are read)."""
        upto = bisect.bisect_right(arrivals, now_s)
        if self.kind == "last-window":
            win = min(self.window_s, now_s) if now_s > 0 else self.window_s
            first = bisect.bisect_right(arrivals, now_s - win)
            rate = (upto - first) / win
        else:
            span = now_s - self._last_s
            first = bisect.bisect_right(arrivals, self._last_s)
            rate = (upto - first) / span if span > 0 else 0.0
            rate = (
                rate
                if self.value is None
                else self.alpha * rate + (1 - self.alpha) * (self.value / (1 + self.error))
            )
            self._last_s = now_s
        self.value = rate * (1 + self.error)
        return self.value
