"""Long validation runs of the queueing engine against closed forms (minutes, not a test).

The unit tests check M/M/c against Erlang C at sizes a 2-core machine runs in about a
minute per case. This script runs each case for longer, on worker processes, and
prints the estimate, the exact value, the relative error and the standard error over
replications, so the tolerance of every case can be judged with its precision.
Usage: ``python benchmarks/validate_queueing.py [--scale 1.0] [--workers 2]``
(``--scale 0.1`` for a quick look).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hetsim
from hetsim.simulator.scenario import from_dict
from tests.queueing_theory import erlang_c, queue_scenario

PER_REP = 1_000_000
# (c, rho, replications of PER_REP customers at scale 1)
CASES = [(1, 0.5, 4), (4, 0.5, 8), (16, 0.5, 60), (1, 0.9, 24), (4, 0.9, 24), (16, 0.9, 30)]


def one(args: tuple[int, float, int, int]) -> tuple[float, float]:
    """(P(wait), mean wait) of one replication."""
    c, rho, n, seed = args
    result = hetsim.run(from_dict(queue_scenario(c, rho * c, n)), seed=seed)
    return float(result["p_wait"]), float(result["mean_wait_s"])


def main() -> None:
    """Run every case and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", help="run one case, e.g. 16,0.5")
    args = parser.parse_args()
    cases = CASES
    if args.only:
        c_text, rho_text = args.only.split(",")
        cases = [k for k in CASES if (k[0], k[1]) == (int(c_text), float(rho_text))]
    print(f"{'case':>12} {'customers':>11} {'metric':>7} {'sim':>10} {'exact':>10} "
          f"{'rel err':>8} {'rel se':>7}")  # fmt: skip
    with ProcessPoolExecutor(args.workers) as pool:
        for c, rho, reps in cases:
            reps = max(2, round(reps * args.scale))
            t0 = time.perf_counter()
            jobs = [(c, rho, PER_REP, seed) for seed in range(reps)]
            values = np.array(list(pool.map(one, jobs)))
            p_exact, w_exact = erlang_c(c, rho * c, 1.0)
            for k, (name, exact) in enumerate((("P(wait)", p_exact), ("Wq", w_exact))):
                mean = values[:, k].mean()
                se = values[:, k].std(ddof=1) / np.sqrt(reps)
                print(f"{f'M/M/{c} {rho}':>12} {reps * PER_REP:>11,} {name:>7} {mean:10.6f} "
                      f"{exact:10.6f} {mean / exact - 1:+8.2%} {se / exact:7.2%}")  # fmt: skip
            print(f"{'':>12} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
