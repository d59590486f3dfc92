"""Is a run overloaded? Served rate against offered rate over the arrival window.

Latency percentiles, SLO attainment and cost per token of an overloaded run describe
its queue's growth over the simulated horizon, not a steady state: run it longer and
they get worse without limit. A run is flagged when, over the window from its first
to its last arrival, it completes fewer than ``1 - SHORTFALL`` of the requests that
arrived, or when the requests in the system at the end of the window outnumber those
at its middle by more than ``GROWTH`` of the second half's arrivals (a queue that
keeps growing). For a stable queue the completions in the window fall short of the
arrivals only by the requests in the system at its end (Little's law: a bounded
number), so both fractions go to 0 as the run gets longer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SHORTFALL = 0.10
"""Flag when completions in the arrival window fall short of arrivals by more than this."""
GROWTH = 0.10
"""Flag when the system grows by more than this fraction of the second half's arrivals."""
MIN_REQUESTS = 50
"""Runs with fewer arrivals are not judged (too few to tell a queue from noise)."""

METRICS: dict[str, str] = {
    "overloaded": "true when the served rate stays more than 10% below the offered rate "
    "over the arrival window, or the requests in the system grow by more than 10% of the "
    "second half's arrivals (simulator/overload.py); latency, attainment and cost figures "
    "of such a run are not steady-state figures",
    "offered_per_s": "arrivals / (last arrival_s - first arrival_s)",
    "served_per_s": "requests completed between the first and the last arrival / that window",
}
"""Summary columns added to every run whose workload reports per-request times."""


@dataclass(frozen=True)
class LoadCheck:
    """Offered and served rates over the arrival window, and the backlog's growth."""

    offered_per_s: float
    served_per_s: float
    backlog_mid: int
    backlog_end: int
    arrivals_second_half: int

    @property
    def shortfall(self) -> float:
        """1 - served / offered (0 for an empty window)."""
        return 1.0 - self.served_per_s / self.offered_per_s if self.offered_per_s > 0 else 0.0

    @property
    def growth(self) -> float:
        """Backlog growth over the second half, as a fraction of its arrivals."""
        n = self.arrivals_second_half
        return (self.backlog_end - self.backlog_mid) / n if n else 0.0

    @property
    def overloaded(self) -> bool:
        """Served rate well below offered, or a backlog that keeps growing."""
        return self.shortfall > SHORTFALL or self.growth > GROWTH

    def message(self) -> str:
        """One line for stderr: the figures behind the flag."""
        return (
            f"overloaded: served {self.served_per_s:.4g} req/s of {self.offered_per_s:.4g} "
            f"offered over the arrival window ({100 * self.shortfall:.0f}% short); "
            f"{self.backlog_end} requests in the system when arrivals stopped "
            f"({self.backlog_mid} at mid-window). Latency, attainment and cost figures "
            "describe a growing queue, not a steady state: lower the load or add capacity"
        )

    def summary(self) -> dict[str, float | int | str]:
        """The summary columns of :data:`METRICS`."""
        return {
            "overloaded": self.overloaded,
            "offered_per_s": self.offered_per_s,
            "served_per_s": self.served_per_s,
        }


def load_check(arrival_s: np.ndarray, end_s: np.ndarray) -> LoadCheck | None:
    """The check for requests arriving at ``arrival_s`` and completing at ``end_s``
    (NaN: never completed); None with fewer than :data:`MIN_REQUESTS` arrivals or a
    window of zero length."""
    arrival = np.asarray(arrival_s, dtype=float)
    end = np.asarray(end_s, dtype=float)
    if len(arrival) < MIN_REQUESTS:
        return None
    first, last = float(arrival.min()), float(arrival.max())
    span = last - first
    if span <= 0:
        return None
    mid = first + span / 2
    done = np.where(np.isfinite(end), end, np.inf)

    def backlog(t: float) -> int:
        return int(np.count_nonzero(arrival <= t) - np.count_nonzero(done <= t))

    return LoadCheck(
        offered_per_s=(len(arrival) - 1) / span,
        served_per_s=float(np.count_nonzero(done <= last)) / span,
        backlog_mid=backlog(mid),
        backlog_end=backlog(last),
        arrivals_second_half=int(np.count_nonzero(arrival > mid)),
    )
