"""Read-only snapshots the elastic mechanism hands to its three decision points.

Arrays in views are numpy arrays with ``writeable = False`` (the mechanism's own
buffers, viewed, never copied per step); everything else is a plain immutable value.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np


class ForecastView(NamedTuple):
    """What a forecaster sees at a decision time (decision point ``elastic.forecaster``)."""

    now_s: float
    step_s: float
    history_per_s: np.ndarray  # observed mean arrival rate of every past step, oldest first
    horizon_steps: int  # length of the forecast path to return


class OracleForecastView(NamedTuple):
    """Ground truth: a forecast view plus the run's true next rates. Handed only to a
    forecaster declaring ``needs_future`` (an oracle upper bound, labelled as such)."""

    view: ForecastView
    future_per_s: np.ndarray  # the true next rates (up to ``horizon_steps``)


class Forecaster(Protocol):
    """Predicts the arrival rate of the next ``horizon_steps`` control steps (an oracle,
    ``needs_future``, gets an :class:`OracleForecastView` instead)."""

    needs_future: bool

    def forecast(self, view: ForecastView) -> np.ndarray:
        """Forecast path: one mean rate (samples/s) per future step."""
        ...


class ScaleView(NamedTuple):
    """The job at an autoscaler's sync time (decision point ``elastic.autoscaler``).

    Window quantities cover the steps since the previous sync.
    """

    now_s: float
    step_s: float
    replicas: int  # workers the job runs with now
    target: int  # replicas last asked for (may be pending: downtime or no free GPUs)
    ready: bool  # the job is up (not in a rescale downtime)
    ready_for_s: float  # seconds since the job last came up (0 while down)
    lag_samples: float  # backlog now
    arrival_rate_per_s: float  # mean arrival rate over the window
    consumed_rate_per_s: float  # mean consumption rate over the window
    utilisation: float  # consumed / capacity over the window's up time (nan: never up)
    observed_throughput_per_s: float  # consumed / up time if backlogged all window, else nan
    throughput_est_per_s: np.ndarray  # cost-model estimate of mu_eff(n), index n = 0..max
    min_replicas: int
    max_replicas: int
    free_gpus: int  # pool GPUs neither held by the job nor by other tenants now
    downtime_up_s: float  # pause a scale-up costs (checkpoint, start, rebalance, shuffle)
    downtime_down_s: float  # pause a scale-down costs
    forecast_per_s: np.ndarray | None  # forecaster's path from the next step on (or None)


class Autoscaler(Protocol):
    """Decides the job's replica count; called every ``sync_period_s``."""

    sync_period_s: float
    horizon_s: float  # forecast horizon wanted (0: no forecast)

    def decide(self, view: ScaleView) -> int:
        """Desired replica count (the mechanism clamps it to [min, max])."""
        ...


class BalanceView(NamedTuple):
    """Stream partitions to place on workers at a rescale (decision point ``elastic.balance``)."""

    replicas: int
    partition_share: np.ndarray  # share of the stream carried by each partition (sum 1)


class Balancer(Protocol):
    """Spreads the stream over workers; ``extra_downtime_s`` is what reshuffling costs."""

    extra_downtime_s: float

    def assign(self, view: BalanceView) -> np.ndarray:
        """Share of the stream each worker reads (length ``replicas``, sum 1)."""
        ...


def frozen(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array`` (no copy)."""
    out = array.view()
    out.flags.writeable = False
    return out
