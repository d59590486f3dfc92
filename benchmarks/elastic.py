"""Elastic speed and headline figures: 30 simulated days at 15 s control steps for
static, HPA and Kale (target: all three in under 20 s), then the kale.yaml week's
headline comparison against the paper's numbers.

Usage: ``python benchmarks/elastic.py [--days 30]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import hetsim

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "kale.yaml"
POLICIES = {"static": {"name": "static", "replicas": 12}, "hpa": "hpa", "kale": "kale"}
PAPER = {"lag": -69.2, "downtime": -33.1, "hpa_slo": 19.57, "kale_slo": 2.6}


def speed(days: float) -> None:
    """Wall time and simulated days per wall second of each policy."""
    total = 0.0
    for name, policy in POLICIES.items():
        over = {"workload.duration_s": days * 86400, "policies.autoscaler": policy}
        t0 = time.perf_counter()
        result = hetsim.run(SCENARIO, overrides=over)
        wall = time.perf_counter() - t0
        total += wall
        steps = len(result.tables["timeline"])
        print(f"{name:7s} {days:.0f} days, {steps} steps: {wall:6.2f} s wall, "
              f"{days / wall:7.1f} sim-days/s")  # fmt: skip
    print(f"all three: {total:.2f} s (target < 20 s)")


def headline() -> None:
    """The kale.yaml week: lag, downtime, SLO violations per policy vs the paper."""
    rows = {}
    for name, policy in POLICIES.items():
        over = {"policies.autoscaler": policy, "workload.record_timeline": False}
        rows[name] = hetsim.run(SCENARIO, overrides=over).summary.iloc[0]
    print(f"{'policy':7s} {'acc. lag (sample-s)':>20s} {'downtime s':>11s} {'SLO viol.':>10s} "
          f"{'(samples)':>10s} {'actions':>8s} {'GPU-h':>8s}")  # fmt: skip
    for name, r in rows.items():
        print(f"{name:7s} {r.accumulated_lag_sample_s:20.4g} {r.downtime_s:11.0f} "
              f"{100 * r.slo_violation_rate:9.2f}% {100 * r.slo_violation_samples:9.2f}% "
              f"{r.scaling_actions:8d} {r.gpu_hours:8.0f}")  # fmt: skip
    k, h = rows["kale"], rows["hpa"]
    lag = 100 * (k.accumulated_lag_sample_s / h.accumulated_lag_sample_s - 1)
    down = 100 * (k.downtime_s / h.downtime_s - 1)
    print(f"Kale vs HPA: accumulated lag {lag:+.1f}% (paper {PAPER['lag']:+.1f}%), "
          f"downtime {down:+.1f}% (paper {PAPER['downtime']:+.1f}%), SLO violations "
          f"{100 * h.slo_violation_rate:.2f}% -> {100 * k.slo_violation_rate:.2f}% "
          f"(paper {PAPER['hpa_slo']}% -> {PAPER['kale_slo']}%)")  # fmt: skip


def main() -> None:
    """Parse arguments, run the speed and headline checks."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=float, default=30.0)
    args = parser.parse_args()
    speed(args.days)
    headline()


if __name__ == "__main__":
    main()
