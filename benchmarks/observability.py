"""Observability domain: speed of the per-rank telemetry and the scenarios' figures.

1. Speed: ``scenarios/kair.yaml`` (2,048 ranks x 1,000 iterations, numpy per window,
   one SimPy event per window) simulated and analysed by each detector; prints wall time
   and rank-iterations per second. Target: under 60 s per run.
2. Kair scenario: rank and cause precision / recall / F1, false findings and detection
   delay per detector (seeds given by ``--seeds``).
3. Faults scenario: simulated job MTBF against 1 / (N x rate), and ETTR and goodput per
   checkpoint interval and detector quality, with the best interval against Young/Daly.

Usage: ``python benchmarks/observability.py [--seeds 7 8 9] [--workers 2]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

import hetsim

ROOT = Path(__file__).resolve().parent.parent
KAIR = ROOT / "scenarios" / "kair.yaml"
FAULTS = ROOT / "scenarios" / "faults.yaml"
DETECTORS = ("kair", "kaiops-telemetry", "zscore", "threshold", "kaiops")


def speed() -> None:
    """Wall time and rank-iterations per second of the 2,048 x 1,000 run per detector."""
    sc = hetsim.load_scenario(KAIR)
    n = sc.workload.ranks * sc.workload.iterations
    print(f"== speed: {sc.workload.ranks} ranks x {sc.workload.iterations} iterations ==")
    for det in DETECTORS:
        t0 = time.perf_counter()
        hetsim.run(KAIR, overrides={"policies.detector": det})
        wall = time.perf_counter() - t0
        print(f"  {det:10s} {wall:6.2f} s   {n / wall:12,.0f} rank-iterations/s")


def kair_figures(seeds: list[int]) -> None:
    """Detection quality per detector, mean over seeds."""
    cols = ["rank_precision", "rank_recall", "rank_f1", "compute_f1", "comm_f1",
            "false_findings", "mean_delay_s", "faults_detected", "faults_injected"]  # fmt: skip
    rows = []
    for seed in seeds:
        for det in DETECTORS:
            res = hetsim.run(KAIR, seed=seed, overrides={"policies.detector": det})
            rows.append({"detector": det, "seed": seed, **res.summary.iloc[0][cols].to_dict()})
    table = pd.DataFrame(rows).groupby("detector", sort=False)[cols].mean()
    print(f"\n== kair.yaml: mean over seeds {seeds} ==")
    print(table.round(3).to_string())


def fault_figures(workers: int) -> None:
    """The faults scenario's sweep: MTBF, ETTR per interval and detector quality."""
    table = hetsim.sweep(FAULTS, workers=workers)
    table["detector"] = table["policies.detector"].map(lambda s: "poor" if "0.5" in s else "good")
    row = table.iloc[0]
    print("\n== faults.yaml ==")
    print(f"  fail-stops {row['fail_stops']}, job MTBF {row['job_mtbf_h']:.2f} h vs "
          f"1/(N r) = {row['expected_mtbf_h']:.2f} h "
          f"({row['job_mtbf_h'] / row['expected_mtbf_h'] - 1:+.1%})")  # fmt: skip
    print(f"  Young {row['young_s']:.0f} s, Daly {row['daly_s']:.0f} s")
    cols = ["detector", "interval_s", "ettr", "ettr_exact", "ettr_first_order",
            "goodput_tokens_per_s", "lost_work_h", "slow_loss_h"]  # fmt: skip
    print(table.sort_values(["detector", "interval_s"])[cols].round(4).to_string(index=False))
    for det, group in table.groupby("detector"):
        best = group.sort_values("ettr").iloc[-1]
        print(f"  {det} detector: best interval {best['interval_s']:.0f} s "
              f"(ETTR {best['ettr']:.4f}); Daly {row['daly_s']:.0f} s")  # fmt: skip


def main() -> None:
    """Run the three parts."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[7, 8, 9])
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    speed()
    kair_figures(args.seeds)
    fault_figures(args.workers)


if __name__ == "__main__":
    main()
