"""The Vidur workload end to end (``scenarios/vidur-workload.yaml``): CPU time and peak
memory of ``hetsim run`` at 10,000 and 100,000 requests.

Each size runs ``hetsim run scenarios/vidur-workload.yaml --out TMP -q`` in a fresh
process (``--set workload.requests.num_requests=N``), ``--repeat`` times; prints the best
and median CPU seconds (user + system of that process, ``os.wait4``), its peak resident
memory, and CPU microseconds per request (flat from 10k to 100k means no super-linear
cost). Targets (issue 21): 10k <= 2.5 s CPU; 100k <= 15 s CPU and < 500 MiB peak RSS.
Run: ``.venv/bin/python benchmarks/serving_vidur.py [--requests 10000 100000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "vidur-workload.yaml"


def run_once(n: int, scenario: Path) -> tuple[float, float]:
    """(CPU seconds, peak RSS MiB) of one ``hetsim run`` of ``n`` requests."""
    cli = str(Path(sys.executable).with_name("hetsim"))
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [cli, "run", str(scenario), "--out", str(Path(tmp) / "out"), "-q",
               "--set", f"workload.requests.num_requests={n}"]  # fmt: skip
        proc = subprocess.Popen(cmd)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0  # Linux: KiB


def main() -> None:
    """Run each size and print a table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    args = parser.parse_args()
    print(f"{args.scenario.name}: hetsim run end to end, {args.repeat} runs per size")
    print(f"{'requests':>9} {'CPU best s':>11} {'CPU med s':>10} {'us/request':>11} {'RSS MiB':>8}")
    best: dict[int, float] = {}
    for n in args.requests:
        runs = [run_once(n, args.scenario) for _ in range(args.repeat)]
        cpus = [r[0] for r in runs]
        best[n] = min(cpus)
        rss = max(r[1] for r in runs)
        print(
            f"{n:>9,} {min(cpus):>11.2f} {statistics.median(cpus):>10.2f} "
            f"{1e6 * min(cpus) / n:>11.1f} {rss:>8.0f}"
        )
    sizes = sorted(best)
    for a, b in itertools.pairwise(sizes):
        marginal = 1e6 * (best[b] - best[a]) / (b - a)
        print(f"marginal CPU per request from {a:,} to {b:,}: {marginal:.1f} us")
    print("targets: 10k <= 2.5 s CPU; 100k <= 15 s CPU, < 500 MiB peak RSS")


if __name__ == "__main__":
    main()
