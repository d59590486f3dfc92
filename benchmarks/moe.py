"""MoE workload speed: DeepSeek-V3 (58 MoE layers, 256 experts, top-8) decoding 1,000
tokens with HybriMoE (HSS placement, impact prefetch, MRS cache), spans off.

Prints the CPU seconds (``time.process_time``) of building the run and of simulating
it, and simulated layer-steps per CPU second. Also the SimPy events the run scheduled
(counted from SimPy's event ids after the run, no instrumentation): few, because the
decode loop moves the clock with ``Simulation.advance`` wherever no other event is due
(exactly what step-by-step timeouts give), so events are no measure of its work here;
layer-steps are. Target (issue 21): build + simulate under 5 s CPU.
Usage: ``python benchmarks/moe.py [--tokens N]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.engine import events_scheduled
from hetsim.simulator.engine import Simulation
from hetsim.simulator.runner import build
from hetsim.simulator.scenario import from_dict

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
    """(build CPU s, simulate CPU s, layer-steps, events, summary) of the benchmark run."""
    raw: dict[str, Any] = dict(SCENARIO)
    raw["workload"] = {**raw["workload"], "output_tokens": tokens}
    sc = from_dict(raw, file="<bench>")
    t0 = time.process_time()
    sim = Simulation(sc.seed, record_spans=False)
    workload = build(sc, sim)
    workload.start()
    t1 = time.process_time()
    sim.run(until=workload.done)
    t2 = time.process_time()
    events = events_scheduled(sim.env)
    workload.check()
    layer_steps = tokens * workload.model.layers
    return t1 - t0, t2 - t1, layer_steps, events, workload.summary(sim.now)


def main() -> None:
    """Run and print the speed figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=1000)
    args = parser.parse_args()
    build_s, run_s, layer_steps, events, summary = moe_run(args.tokens)
    print(f"DeepSeek-V3 decode, {args.tokens} tokens, HybriMoE ({summary['system']})")
    print(f"  build (trace, profile, allocation): {build_s:.2f} s CPU")
    print(f"  simulate: {run_s:.2f} s CPU; build + simulate {build_s + run_s:.2f} s CPU "
          "(target < 5 s)")  # fmt: skip
    print(f"  layer-steps: {layer_steps}  ->  {layer_steps / run_s:,.0f} layer-steps per CPU s")
    print(f"  SimPy events: {events} (the decode loop advances the clock without events "
          "where nothing else is due)")  # fmt: skip
    print(f"  simulated TBT {summary['tbt_mean_s'] * 1e3:.2f} ms, hit rate "
          f"{summary['cache_hit_rate']:.3f}, prefetches {summary['prefetches']}")  # fmt: skip


if __name__ == "__main__":
    main()
