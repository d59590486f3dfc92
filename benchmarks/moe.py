"""MoE workload speed: DeepSeek-V3 (58 MoE layers, 256 experts, top-8) decoding 1,000
tokens with HybriMoE (HSS placement, impact prefetch, MRS cache), spans off.

Prints simulated layer-steps per second of wall time, SimPy events per second, and the
ratio of the MoE event rate to a bare-SimPy M/M/c event rate measured in this process
(the engine benchmark's reference, benchmarks/engine.py). Target: the run simulates in
under 10 s on one core. Usage: ``python benchmarks/moe.py [--tokens N]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.engine import _count_events, bare_simpy
from hetsim.simulator.engine import Simulation
from hetsim.simulator.runner import build
from hetsim.simulator.scenario import from_dict

CPU_S: list[float] = []  # CPU seconds of the last simulate phase (wall time varies with load)
SCENARIO: dict[str, Any] = {
    "name": "bench-moe-deepseek-v3",
    "seed": 1,
    "cluster": {
        "nodes": [
            {
                "name": "server",
                "devices": {"gpu": {"type": "h200"}, "cpu": {"type": "xeon-8480"}},
                "links": [{"type": "pcie5-x16", "between": ["gpu", "cpu"]}],
            }
        ]
    },
    "workload": {
        "kind": "moe",
        "model": "deepseek-v3",
        "phase": "decode",
        "prompt_tokens": 32,
        "output_tokens": 1000,
        "cache_fraction": 0.25,
    },
    "policies": {"gating": "topk", "placement": "hybrimoe", "prefetch": "impact", "cache": "mrs"},
    "outputs": {"spans": False},
}


def moe_run(tokens: int) -> tuple[float, float, int, int, dict[str, Any]]:
    """(build seconds, run seconds, layer-steps, events, summary) of the benchmark run."""
    raw: dict[str, Any] = dict(SCENARIO)
    raw["workload"] = {**raw["workload"], "output_tokens": tokens}
    sc = from_dict(raw, file="<bench>")
    t0 = time.perf_counter()
    sim = Simulation(sc.seed, record_spans=False)
    workload = build(sc, sim)
    workload.start()
    t1 = time.perf_counter()
    count = _count_events(sim.env)
    cpu0 = time.process_time()
    sim.run(until=workload.done)
    t2 = time.perf_counter()
    CPU_S.append(time.process_time() - cpu0)
    workload.check()
    layer_steps = tokens * workload.model.layers
    return t1 - t0, t2 - t1, layer_steps, count[0], workload.summary(sim.now)


def main() -> None:
    """Run and print the speed figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=1000)
    args = parser.parse_args()
    build_s, run_s, layer_steps, events, summary = moe_run(args.tokens)
    bare_s, bare_events, _ = bare_simpy(200_000, 1)
    moe_rate = events / run_s
    bare_rate = bare_events / bare_s
    print(f"DeepSeek-V3 decode, {args.tokens} tokens, HybriMoE ({summary['system']})")
    print(f"  build (trace, profile, allocation): {build_s:.2f} s")
    print(f"  simulate: {run_s:.2f} s wall, {CPU_S[-1]:.2f} s CPU; total wall "
          f"{build_s + run_s:.2f} s (target < 10 s)")  # fmt: skip
    print(f"  layer-steps: {layer_steps}  ->  {layer_steps / run_s:,.0f} layer-steps/s")
    print(f"  SimPy events: {events}  ->  {moe_rate:,.0f} events/s")
    ratio = moe_rate / bare_rate
    print(f"  bare SimPy M/M/c: {bare_rate:,.0f} events/s;  ratio moe/bare = {ratio:.3f}")
    print(f"  simulated TBT {summary['tbt_mean_s'] * 1e3:.2f} ms, hit rate "
          f"{summary['cache_hit_rate']:.3f}, prefetches {summary['prefetches']}")  # fmt: skip


if __name__ == "__main__":
    main()
