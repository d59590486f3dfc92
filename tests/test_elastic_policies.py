"""Elastic policies on hand-built views, no simulation running.

HPA's replica sequence is worked out by hand from the Kubernetes algorithm; forecasters
are checked on pure sinusoids and ramps against closed forms; Kale and the balancers on
small tables computed in the comments.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from hetsim.schedulers.elastic.ewma import EwmaForecaster, EwmaParams
from hetsim.schedulers.elastic.holt_winters import HoltWintersForecaster, HoltWintersParams
from hetsim.schedulers.elastic.hpa import HpaAutoscaler, HpaParams
from hetsim.schedulers.elastic.kale import KaleAutoscaler, KaleParams
from hetsim.schedulers.elastic.last_value import LastValueForecaster, LastValueParams
from hetsim.schedulers.elastic.no_balance import NoBalance, NoBalanceParams
from hetsim.schedulers.elastic.oracle import OracleForecaster, OracleParams
from hetsim.schedulers.elastic.rebalance import Rebalance, RebalanceParams
from hetsim.schedulers.elastic.seasonal_naive import SeasonalNaiveForecaster, SeasonalNaiveParams
from hetsim.workloads.elastic.view import (
    BalanceView,
    ForecastView,
    OracleForecastView,
    ScaleView,
    frozen,
)

RNG = np.random.default_rng(0)
EST = frozen(np.arange(65) * 1000.0)  # mu_est(n) = 1000 n samples/s


def view(now: float, n: int, **kw: object) -> ScaleView:
    """A ready job of ``n`` replicas (target n) with the given overrides."""
    base = dict(
        now_s=now, step_s=15.0, replicas=n, target=n, ready=True, ready_for_s=1e9,
        lag_samples=0.0, arrival_rate_per_s=0.0, consumed_rate_per_s=0.0, utilisation=0.5,
        observed_throughput_per_s=math.nan, throughput_est_per_s=EST, min_replicas=1,
        max_replicas=64, free_gpus=64, downtime_up_s=110.0, downtime_down_s=50.0,
        forecast_per_s=None,
    )  # fmt: skip
    base.update(kw)
    return ScaleView(**base)  # type: ignore[arg-type]


# ---- HPA ------------------------------------------------------------------------------
def test_hpa_sequence_tolerance_and_scale_down_window() -> None:
    # target utilisation 0.8, tolerance 0.1, down window 300 s, sync 15 s. By hand:
    # t=0   util .85: ratio 1.0625, |r-1| <= .1          -> 10 (no change)
    # t=15  util 1.0: ceil(1.25 * 10) = 13; +4/+100% cap 20 -> 13
    # t=30  util 1.0: ceil(1.25 * 13) = 17; the t=15 event is not inside (15, 30] -> 17
    # t=45.. util .4: ceil(.5 * 17) = 9, but the max recommendation in (now-300, now]
    #        includes 17 (t=30) until now - 300 >= 30, i.e. now = 330 -> 9 at t=330.
    hpa = HpaAutoscaler(HpaParams(), RNG)
    utils = [0.85, 1.0, 1.0] + [0.4] * 20
    got, n = [], 10
    for i, u in enumerate(utils):
        n = hpa.decide(view(15.0 * i, n, utilisation=u))
        got.append(n)
    assert got == [10, 13, 17] + [17] * 19 + [9]


def test_hpa_tolerance_band_edges() -> None:
    hpa = HpaAutoscaler(HpaParams(), RNG)
    assert hpa.decide(view(0.0, 10, utilisation=0.87)) == 10  # ratio 1.0875: inside
    assert hpa.decide(view(15.0, 10, utilisation=0.9)) == 12  # ceil(1.125 * 10) = 12


def test_hpa_scale_up_rate_limit() -> None:
    # util 5.0 on 2 replicas wants ceil(6.25 * 2) = 13; limit max(2 + 4, ceil(2 * 2)) = 6.
    # 15 s later the event is outside (now - 15, now]: limit max(6 + 4, 12) = 12.
    hpa = HpaAutoscaler(HpaParams(), RNG)
    assert hpa.decide(view(0.0, 2, utilisation=5.0)) == 6
    assert hpa.decide(view(15.0, 6, utilisation=5.0)) == 12


def test_hpa_holds_without_metrics() -> None:
    hpa = HpaAutoscaler(HpaParams(), RNG)
    assert hpa.decide(view(0.0, 10, target=14, ready=False, utilisation=1.0)) == 14
    assert hpa.decide(view(15.0, 10, utilisation=math.nan)) == 10
    slow = HpaAutoscaler(HpaParams(metric_window_s=30.0), RNG)
    assert slow.decide(view(15.0, 10, utilisation=1.0, ready_for_s=15.0)) == 10


def test_hpa_lag_metric() -> None:
    # AverageValue target 1e6 lag/replica; lag 3.2e7 on 10 replicas: ratio 3.2 -> 32,
    # rate-limited to max(10 + 4, 20) = 20.
    hpa = HpaAutoscaler(HpaParams(metric="lag", target=1e6), RNG)
    assert hpa.decide(view(0.0, 10, lag_samples=3.2e7)) == 20


# ---- Kale -----------------------------------------------------------------------------
def test_kale_scale_up_covers_forecast_peak_and_its_own_pause() -> None:
    # peak 9000 in the horizon, margin .1, lag 0: need 9900 -> 10 > 5 replicas, so add the
    # pause's backlog: 9900 + 9000 * 110 / 600 = 11550 -> n = 12 (1000 per replica).
    kale = KaleAutoscaler(KaleParams(), RNG)
    path = np.full(60, 5000.0)
    path[30] = 9000.0
    assert kale.decide(view(60.0, 5, forecast_per_s=frozen(path))) == 12


def test_kale_drain_term_and_no_action_when_enough() -> None:
    kale = KaleAutoscaler(KaleParams(), RNG)
    # forecast 4000: need 4400 + lag 6e5 / 600 = 5400 <= 6000 on 6 replicas: stay at 6
    v = view(60.0, 6, lag_samples=6e5, forecast_per_s=frozen(np.full(60, 4000.0)))
    assert kale.decide(v) == 6


def test_kale_scale_down_needs_persistence_and_cooldown() -> None:
    # t=0: forecast 11000 -> need 12100, > 1 replica, plus the pause 11000 * 110 / 600 =
    # 2016.7 -> 14116.7 -> 15 replicas. Then a flat 3000 wants ceil(3300 / 1000) = 4: down
    # only after 5 consecutive such decisions AND 1800 s since the last change -> t = 1800.
    kale = KaleAutoscaler(KaleParams(), RNG)
    n = kale.decide(view(0.0, 1, forecast_per_s=frozen(np.full(60, 11000.0))))
    assert n == 15
    cold = frozen(np.full(60, 3000.0))
    got = [kale.decide(view(t, n, forecast_per_s=cold)) for t in np.arange(60.0, 1801.0, 60.0)]
    assert got == [15] * 29 + [4]


def test_kale_fits_throughput_correction() -> None:
    # observed = 0.8 x estimate on 10 replicas: rho = 0.8, so 7200 needs 7200/800 = 9
    kale = KaleAutoscaler(KaleParams(margin=0.0, min_step=1), RNG)
    rho = kale.correction(view(0.0, 10, observed_throughput_per_s=8000.0))
    assert rho == pytest.approx(0.8)
    assert kale.size_for(view(0.0, 10), 7200.0, rho) == 9


# ---- forecasters ----------------------------------------------------------------------
def sinusoid(t_s: np.ndarray) -> np.ndarray:
    return 100.0 + 50.0 * np.sin(2 * np.pi * t_s / 86400.0)


def fview(hist: np.ndarray, h: int) -> ForecastView:
    return ForecastView(len(hist) * 15.0, 15.0, frozen(hist), h)


def test_seasonal_naive_exact_on_periodic_signal() -> None:
    steps = np.arange(2 * 5760 + 100)
    hist = sinusoid(steps * 15.0)
    path = SeasonalNaiveForecaster(SeasonalNaiveParams(seasons=2), RNG).forecast(fview(hist, 60))
    truth = sinusoid((len(hist) + np.arange(60)) * 15.0)
    assert np.allclose(path, truth, rtol=1e-12)


def test_holt_winters_on_sinusoid() -> None:
    # after a season of 5-min buckets the state reproduces the bucket means; a step's value
    # differs from its bucket mean by at most 50 * 2 pi / 86400 * 150 s ~ 0.55 (<1% of 100)
    hist = sinusoid(np.arange(2 * 5760 + 37) * 15.0)
    hw = HoltWintersForecaster(HoltWintersParams(), RNG)
    path = hw.forecast(fview(hist, 240))
    truth = sinusoid((len(hist) + np.arange(240)) * 15.0)
    assert np.max(np.abs(path - truth)) < 1.0


def test_ewma_ramp_lag_closed_form() -> None:
    # on x_k = c k, the EWMA settles at x_t - c (1 - alpha) / alpha
    c, a = 2.0, 0.25
    hist = c * np.arange(400.0)
    path = EwmaForecaster(EwmaParams(alpha=a), RNG).forecast(fview(hist, 5))
    assert path == pytest.approx(np.full(5, hist[-1] - c * (1 - a) / a), rel=1e-9)


def test_last_value_and_oracle() -> None:
    hist = np.array([1.0, 2.0, 3.0])
    assert LastValueForecaster(LastValueParams(), RNG).forecast(fview(hist, 3)).tolist() == [3] * 3
    fut = frozen(np.array([4.0, 5.0]))
    got = OracleForecaster(OracleParams(), RNG).forecast(OracleForecastView(fview(hist, 3), fut))
    assert got.tolist() == [4.0, 5.0, 5.0]


# ---- balance --------------------------------------------------------------------------
def test_balancers() -> None:
    shares = frozen(np.array([0.4, 0.3, 0.2, 0.1]))
    v = BalanceView(2, shares)
    # p mod 2: worker 0 holds .4 + .2, worker 1 .3 + .1
    assert NoBalance(NoBalanceParams(), RNG).assign(v) == pytest.approx([0.6, 0.4])
    # LPT: .4 -> w0, .3 -> w1, .2 -> w1 (.5), .1 -> w0 (.5)
    lpt = Rebalance(RebalanceParams(granularity="partition"), RNG).assign(v)
    assert lpt == pytest.approx([0.5, 0.5])
    assert Rebalance(RebalanceParams(), RNG).assign(BalanceView(3, shares)) == pytest.approx(
        [1 / 3] * 3
    )
