"""Is a run overloaded? The trend of sojourn times while requests arrive.

Latency percentiles, SLO attainment and cost per token of an overloaded run describe
its queue's growth over the simulated horizon, not a steady state: run it longer and
they get worse without limit. In a stable system the sojourn time (completion -
arrival) of a request does not depend on when it arrives, once start-up is over; in an
overloaded one it grows linearly with the arrival time, at ``offered / capacity - 1``
seconds per second for a FIFO queue. The check fits a line to the sojourn times of the
requests arriving in the second half of the arrival window (start-up transients such as
weight loading fall in the first half) and flags the run when the slope exceeds
``GROWTH`` and ``SIGNIFICANCE`` standard errors (so a short noisy run is not flagged
by chance). A policy that serves newer requests first keeps sojourn times flat while
old requests starve, so the run is also flagged when the requests in the system grow
over the second half by more than ``BACKLOG_GROWTH`` of that half's arrivals (a stable
system's backlog is bounded, Little's law); this is judged only when half the window
is at least ``LAG_FACTOR`` median sojourn times of the first half's requests (the
backlog's start-up ramp is over) and ``MIN_LATE_REQUESTS`` arrive in it. A request
that never completed counts with the run's last completion time (a lower bound). Runs
with fewer than ``MIN_REQUESTS`` requests are not judged. The thresholds are judgement,
not measurement: the columns carry the figures, so a reader can apply stricter ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GROWTH = 0.10
"""Flag when sojourn grows faster than this (s per s of arrival time): offered load
about 10% above capacity for a FIFO queue."""
SIGNIFICANCE = 3.0
"""... and the slope exceeds this many of its standard errors."""
BACKLOG_GROWTH = 0.15
"""Flag when the backlog grows by more than this fraction of the second half's arrivals."""
LAG_FACTOR = 1.0
"""Judge the backlog only when half the window spans this many median sojourn times..."""
MIN_LATE_REQUESTS = 100
"""... and at least this many requests arrive in the second half."""
MIN_REQUESTS = 200
"""Runs with fewer arrivals are not judged (too few to tell a queue from noise)."""

METRICS: dict[str, str] = {
    "overloaded": "true when sojourn_growth > 0.1 s/s and more than 3 standard errors "
    "above 0, or backlog_growth > 0.15 (simulator/overload.py): the queue grows while "
    "requests arrive, so latency, attainment and cost figures of the run are not "
    "steady-state figures",
    "backlog_growth": "(requests in the system at the last arrival - at the middle of the "
    "arrival window) / arrivals in the second half; 0 when half the window is shorter than "
    "the median sojourn time of the first half's requests (start-up not over) or fewer "
    "than 100 requests arrive in it",
    "sojourn_growth": "least-squares slope of sojourn time (completion - arrival) against "
    "arrival time over the second half of the arrival window (s per s; about offered / "
    "capacity - 1 for an overloaded FIFO queue, 0 for a stable one)",
    "offered_per_s": "(requests - 1) / (last arrival - first arrival)",
    "served_per_s": "completed requests / (last completion - first arrival)",
}
"""Summary columns added to every run whose workload reports per-request times (absent
under 200 requests)."""


@dataclass(frozen=True)
class LoadCheck:
    """Offered and served rates and the growth of sojourn times over arrival time."""

    offered_per_s: float
    served_per_s: float
    sojourn_growth: float
    growth_stderr: float
    backlog_growth: float

    @property
    def overloaded(self) -> bool:
        """Sojourn times that grow significantly and faster than :data:`GROWTH`."""
        growing = self.sojourn_growth > max(GROWTH, SIGNIFICANCE * self.growth_stderr)
        return growing or self.backlog_growth > BACKLOG_GROWTH

    def message(self) -> str:
        """One line for stderr: the figures behind the flag."""
        return (
            f"overloaded: sojourn time grows {self.sojourn_growth:.3g} s per s of arrival "
            f"time (+- {self.growth_stderr:.2g}), the backlog by "
            f"{100 * self.backlog_growth:.0f}% of the arrivals (second half of the arrival "
            f"window); served {self.served_per_s:.4g} req/s of "
            f"{self.offered_per_s:.4g} offered. Latency, attainment and cost figures "
            "describe a growing queue, not a steady state: lower the load or add capacity"
        )

    def summary(self) -> dict[str, float | int | str]:
        """The summary columns of :data:`METRICS`."""
        return {
            "overloaded": self.overloaded,
            "sojourn_growth": self.sojourn_growth,
            "backlog_growth": self.backlog_growth,
            "offered_per_s": self.offered_per_s,
            "served_per_s": self.served_per_s,
        }


def load_check(arrival_s: np.ndarray, end_s: np.ndarray) -> LoadCheck | None:
    """The check for requests arriving at ``arrival_s`` and completing at ``end_s``
    (NaN: never completed); None with fewer than :data:`MIN_REQUESTS` arrivals, no
    completion, or an arrival window of zero length."""
    arrival = np.asarray(arrival_s, dtype=float)
    end = np.asarray(end_s, dtype=float)
    finite = np.isfinite(end)
    if len(arrival) < MIN_REQUESTS or not finite.any():
        return None
    first, last = float(arrival.min()), float(arrival.max())
    if last <= first:
        return None
    last_done = float(end[finite].max())
    sojourn = np.where(finite, end, max(last_done, last)) - arrival
    half = (last - first) / 2
    late = arrival > first + half
    t, y = arrival[late], sojourn[late]
    slope, stderr = _slope(t, y)
    span_done = last_done - first
    done = np.where(finite, end, np.inf)

    def backlog(at: float) -> int:
        return int(np.count_nonzero(arrival <= at) - np.count_nonzero(done <= at))

    early = ~late & finite
    lag = float(np.median(sojourn[early])) if early.any() else np.inf
    judged = half >= LAG_FACTOR * lag and late.sum() >= MIN_LATE_REQUESTS
    growth = (backlog(last) - backlog(first + half)) / late.sum() if judged else 0.0
    return LoadCheck(
        offered_per_s=(len(arrival) - 1) / (last - first),
        served_per_s=float(finite.sum()) / span_done if span_done > 0 else 0.0,
        sojourn_growth=slope,
        growth_stderr=stderr,
        backlog_growth=float(growth),
    )


def _slope(t: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope of ``y`` on ``t`` and its standard error."""
    n = len(t)
    if n < 3:
        return 0.0, float("inf")
    dt = t - t.mean()
    sxx = float(dt @ dt)
    if sxx <= 0:
        return 0.0, float("inf")
    slope = float(dt @ (y - y.mean())) / sxx
    resid = y - y.mean() - slope * dt
    return slope, float(np.sqrt(float(resid @ resid) / (n - 2) / sxx))
