"""Sweep throughput and memory.

1. 200 quickstart-size runs (the quickstart scenario with 200 requests, 200 seeds) on
   one worker and on two: prints the speedup (target >= 1.8x on a 2-core machine).
2. The same on a 2-worker Dask LocalCluster: per-run overhead against the local pool
   (target <= 10%).
3. A 10,000-point sweep of a tiny scenario: the parent process's peak RSS
   (target < 300 MB).
Usage: ``python benchmarks/sweep.py [--runs 200] [--points 10000]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

import hetsim
from hetsim.simulator.scenario import Scenario, from_dict, read_yaml

ROOT = Path(__file__).resolve().parent.parent


def scenario(runs: int, requests: int, name: str = "quickstart.yaml") -> Scenario:
    raw = read_yaml(ROOT / "scenarios" / name)
    raw["workload"]["num_requests"] = requests
    raw["workload"].pop("warmup_requests", None)
    raw["outputs"] = {"spans": False}
    raw["sweep"] = {"seed": list(range(runs))}
    return from_dict(raw, file=name, base_dir=ROOT / "scenarios")


REPEATS = 3  # each timing is the best of three runs: the least disturbed by other load


def timed(sc: object, repeats: int = REPEATS, **kwargs: object) -> float:
    """Best wall time of ``repeats`` complete sweeps (each into a fresh directory)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            table = hetsim.sweep(sc, out=tmp, **kwargs)  # type: ignore[arg-type]
        assert table["error"].isna().all()
        best = min(best, time.perf_counter() - t0)
    return best


def peak_rss_during(fn: object) -> tuple[float, float]:
    """(wall s, peak RSS of this process in MB) while ``fn()`` runs."""
    proc = psutil.Process()
    peak = [proc.memory_info().rss]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    wall = time.perf_counter() - t0
    stop.set()
    thread.join()
    return wall, peak[0] / 2**20


def dask_timed(sc: Scenario, workers: int) -> tuple[float, float]:
    """(cluster start-up s, sweep s) on a Dask LocalCluster started beforehand."""
    from distributed import LocalCluster

    t0 = time.perf_counter()
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           host="127.0.0.1", dashboard_address=None)  # fmt: skip
    timed(scenario(2 * workers, 20), 1, executor="dask", address=cluster.scheduler_address)
    startup = time.perf_counter() - t0  # cluster start and a warm-up sweep (imports)
    try:
        return startup, timed(sc, executor="dask", address=cluster.scheduler_address)
    finally:
        cluster.close()


def memory_run(points: int) -> None:
    """Child process: a sweep of ``points`` tiny runs; print this process's RSS figures."""
    tiny = scenario(points, 5, "mmc.yaml")
    rss0 = psutil.Process().memory_info().rss / 2**20

    def big() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            hetsim.sweep(tiny, out=tmp, workers=2)

    wall, peak = peak_rss_during(big)
    print(f"{points:,}-point tiny sweep on 2 workers: {wall:.0f} s; parent RSS {rss0:.0f} MB "
          f"after imports, peak {peak:.0f} MB (target < 300 MB)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_run(args.points)
        return
    sc = scenario(args.runs, 2000)  # the quickstart as shipped: 2000 requests
    one = timed(sc, workers=1)
    two = timed(sc, workers=2)
    print(f"{args.runs} quickstart runs: 1 worker {one:.1f} s, 2 workers {two:.1f} s, "
          f"speedup {one / two:.2f}x (target >= 1.8x)")  # fmt: skip
    startup, dask = dask_timed(sc, 2)
    overhead = dask / two - 1
    print(f"dask LocalCluster (2 workers, started and warmed in {startup:.1f} s): {dask:.1f} s, "
          f"{dask / args.runs * 1e3:.1f} ms per run vs local pool {two / args.runs * 1e3:.1f} ms: "
          f"overhead {overhead:+.1%} (target <= 10%)")  # fmt: skip
    # memory in a fresh process, so the figure is the sweep's, not this script's
    subprocess.run([sys.executable, __file__, "--memory-child", "--points", str(args.points)],
                   check=True)  # fmt: skip


if __name__ == "__main__":
    main()
