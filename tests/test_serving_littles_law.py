"""Little's law on a long seeded serving run: L = lambda x W."""

from __future__ import annotations

import numpy as np
import pytest

import hetsim


def time_average_in_system(arrival: np.ndarray, finish: np.ndarray, a: float, b: float) -> float:
    """(1 / (b - a)) x integral over [a, b] of N(t), N = requests arrived and not yet
    finished, as the step function of the sorted +1 (arrival) / -1 (finish) events."""
    times = np.concatenate([arrival, finish])
    steps = np.concatenate([np.ones_like(arrival), -np.ones_like(finish)])
    order = np.argsort(times, kind="stable")
    t, n = times[order], np.cumsum(steps[order])  # n[k]: N on [t[k], t[k+1])
    lo = np.clip(t[:-1], a, b)
    hi = np.clip(t[1:], a, b)
    return float((n[:-1] * (hi - lo)).sum() / (b - a))


def test_littles_law_on_a_long_colocated_run() -> None:
    # 4000 Poisson requests at 16 req/s on the best homogeneous colocated pool (stable:
    # sized for the rate, attainment ~1), ~250 s of simulated time. Over the middle
    # half of the arrival span (steady state, away from the empty start and the
    # drain), L (time average of N from the requests table) must equal lambda (arrivals
    # in the window / its length) x W (mean E2E of those arrivals). Edge effects are of
    # order W / window (~3 s / 125 s) plus Poisson noise: tolerance 5%.
    res = hetsim.run(
        "scenarios/cauchy.yaml",
        overrides={
            "policies.deployment": "colocated",
            "workload.requests.rate_per_s": 16,
            "workload.requests.num_requests": 4000,
        },
    )
    req = res.tables["requests"]
    arrival, finish = req.arrival_s.to_numpy(), req.finish_s.to_numpy()
    assert np.all(finish >= arrival)
    span = arrival.max() - arrival.min()
    a, b = arrival.min() + span / 4, arrival.min() + 3 * span / 4
    inside = (arrival >= a) & (arrival < b)
    lam = inside.sum() / (b - a)
    w = float((finish - arrival)[inside].mean())
    ell = time_average_in_system(arrival, finish, a, b)
    assert lam == pytest.approx(16.0, rel=0.1)  # the offered rate (Poisson noise)
    assert ell == pytest.approx(lam * w, rel=0.05)
    # over the whole run [first arrival, last finish] the law is an identity:
    # integral of N = sum of sojourn times
    t0, t1 = arrival.min(), finish.max()
    whole = time_average_in_system(arrival, finish, t0, t1)
    assert whole == pytest.approx(len(req) / (t1 - t0) * (finish - arrival).mean(), rel=1e-9)


def test_instance_occupancy_integrates_to_the_requests_sojourn_times() -> None:
    # Independent of the requests table: each instance integrates the number of
    # requests it holds (queued, pending, running) over time from its own state changes
    # (``request_seconds``). Conservation: colocated, a request is held by one instance
    # from arrival to finish, so the instances' integrals sum to the sum of E2E latencies
    # (Little's L x T = lambda T x W). Disaggregated, the gap between the two is the
    # KV-transfer time of every request (in flight between a prefill and a decode
    # instance, held by neither).
    # (DistServe on its predictor: conservation does not depend on its simulated search)
    for dep, gap in (("colocated", False), ({"name": "distserve", "search": "estimate"}, True)):
        res = hetsim.run(
            "scenarios/cauchy.yaml",
            overrides={
                "policies.deployment": dep,
                "workload.requests.rate_per_s": 16,
                "workload.requests.num_requests": 600,
            },
        )
        req, inst = res.tables["requests"], res.tables["instances"]
        sojourn = float((req.finish_s - req.arrival_s).sum())
        held = float(inst.request_seconds.sum())
        # one KV transfer per request under disaggregation (mean x count = their sum)
        in_flight = float(res.summary.iloc[0].kv_transfer_mean_s) * len(req) if gap else 0.0
        assert held + in_flight == pytest.approx(sojourn, rel=1e-9)
        if gap:
            assert in_flight > 0
