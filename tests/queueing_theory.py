"""Closed forms of queueing theory used as test oracles (independent of hetsim)."""

from __future__ import annotations

from math import factorial
from typing import Any

import numpy as np

import hetsim


def erlang_c(c: int, lam: float, mu: float) -> tuple[float, float]:
    """(P(wait), mean wait in queue) of M/M/c FCFS: Erlang C and C / (c mu - lambda)."""
    a = lam / mu
    rho = a / c
    assert rho < 1
    top = a**c / factorial(c) / (1 - rho)
    p_wait = top / (sum(a**k / factorial(k) for k in range(c)) + top)
    return p_wait, p_wait / (c * mu - lam)


def queue_scenario(
    c: int, lam: float, n: int, *, discipline: str = "fcfs", dispatch: str = "fifo"
) -> dict[str, Any]:
    """M/M/c (or M/M/1-PS) on ideal servers: 1e12 FLOP/s, so Exp(1) x 1e12 FLOPs is
    an Exp(mu = 1 /s) service time."""
    return {
        "name": f"mm{c}-{discipline}",
        "cluster": {
            "nodes": [{"name": "farm", "devices": {"s": {"type": "ideal-server", "count": c}}}]
        },
        "workload": {
            "kind": "queueing",
            "arrivals": {"kind": "poisson", "rate_per_s": lam},
            "demand": {"kind": "exponential", "mean_flops": 1.0e12},
            "num_requests": n,
            "warmup_requests": n // 20,
            "discipline": discipline,
        },
        "policies": {"dispatch": dispatch},
        "outputs": {"spans": False},
    }


def replicate(
    raw: dict[str, Any], seeds: range, metrics: tuple[str, ...]
) -> dict[str, tuple[float, float]]:
    """Run one replication per seed; per metric, (mean over replications, standard error)."""
    from hetsim.simulator.scenario import from_dict

    sc = from_dict(raw)
    values: dict[str, list[float]] = {m: [] for m in metrics}
    for seed in seeds:
        result = hetsim.run(sc, seed=seed)
        for m in metrics:
            values[m].append(float(result[m]))
    out = {}
    for m, xs in values.items():
        arr = np.array(xs)
        out[m] = (float(arr.mean()), float(arr.std(ddof=1) / np.sqrt(len(arr))))
    return out
