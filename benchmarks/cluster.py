"""Cluster-scheduling speed: Cuckoo on a heterogeneous V100/P100/K80 cluster.

Prints jobs simulated per CPU second (time.process_time; wall time alongside, which
counts other processes sharing the cores) at 1,000 GPUs (10,000 jobs) and 10,000 GPUs
(100,000 jobs), with the same per-GPU load, and the ratio of per-job costs (flat = 1);
``--contention`` adds a 1,000-GPU run with node contention on (default capacities).
Run: .venv/bin/python benchmarks/cluster.py [--small] [--contention]
"""

from __future__ import annotations

import sys
import time
from typing import Any

import hetsim
from hetsim.simulator.scenario import from_dict


def scenario(gpus: int, jobs: int, contention: bool = False) -> dict[str, Any]:
    """Equal thirds of V100/P100/K80 8-GPU nodes; arrivals scaled with the cluster."""
    nodes = max(1, gpus // 24)
    raw: dict[str, Any] = {
        "name": f"bench-{gpus}", "seed": 1,
        "cluster": {"nodes": [{"name": "n", "devices": {"gpu": {"type": "v100"}}}]},
        "workload": {
            "kind": "cluster",
            "inventory": [{"gpu_type": t, "nodes": nodes, "gpus_per_node": 8}
                          for t in ("v100", "p100", "k80")],
            "jobs": {"kind": "synthetic", "num_jobs": jobs,
                     "arrival_rate_per_s": 0.0025 * gpus / 96,
                     "gpu_counts": [[1, 536], [2, 5], [4, 423], [8, 465]]},
            "deadlines": {"fraction": 0.5, "factor_low": 1.0, "factor_high": 2.0},
            "execution": {"round_s": 600, "restart_s": 10, "interference_model": "stage"},
        },
        "policies": {"ordering": "cuckoo", "packing": "cuckoo", "allocation": "cuckoo"},
        "outputs": {"spans": False},
    }  # fmt: skip
    if contention:
        raw["workload"]["contention"] = {"enabled": True}
    return raw


def measure(gpus: int, jobs: int, contention: bool = False) -> float:
    """Jobs per CPU second of this process (build + run); wall time printed too."""
    sc = from_dict(scenario(gpus, jobs, contention))
    t0, c0 = time.perf_counter(), time.process_time()
    res = hetsim.run(sc)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    row = res.summary.iloc[0]
    label = "contention on " if contention else ""
    print(f"{label}{gpus:>6} GPUs {jobs:>7} jobs: {cpu:7.2f} s CPU ({wall:7.2f} s wall), "
          f"{jobs / cpu:9.0f} jobs/CPU-s, utilisation {row['utilisation']:.2f}, "
          f"DSR {row['dsr']:.3f}, mean JCT {row['mean_jct_s']:.0f} s")  # fmt: skip
    return jobs / cpu


def main() -> None:
    """Both sizes (``--small``: 10x fewer jobs at each)."""
    div = 10 if "--small" in sys.argv else 1
    small = measure(1000, 10000 // div)
    large = measure(10000, 100000 // div)
    print(f"per-job cost ratio (10,000 / 1,000 GPUs): {small / large:.2f} (flat = 1.0)")
    if "--contention" in sys.argv:
        on = measure(1000, 10000 // div, contention=True)
        print(f"node contention on, per-job cost vs off at 1,000 GPUs: {small / on:.2f}x")


if __name__ == "__main__":
    main()
