"""Speed of the serving workload: Azure-conv requests on 16 mixed-GPU instances.

Prints requests/s and iterations/s of simulation for a 100,000-request and a
10,000-request run (the size other serving simulators report), per second of CPU time
of this process (``time.process_time``: other jobs sharing the cores do not inflate it)
and, for reference, of wall-clock time (prefix cache off). Then a Mooncake run with
the prefix cache off and on (``--mooncake N``, default 20,000 requests at 10 req/s):
lengths and hash_ids drawn with replacement from the 1,000-request sample, so whole
conversations repeat and the hit rate is not the trace's (a timing run only).
Run: ``.venv/bin/python benchmarks/serving.py [--requests 100000 10000] [--mooncake N]``.
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path
from typing import Any

import hetsim
from hetsim.simulator.scenario import from_dict

SCENARIO: dict[str, Any] = {
    "name": "serving-bench",
    "seed": 0,
    "cluster": {
        "nodes": [
            {"name": t, "devices": {"gpu": {"type": t, "count": 4}}}
            for t in ("h100-sxm", "a100-80gb", "l40s", "l4")
        ],
        "network": {"type": "ib-ndr", "attach": "gpu"},
    },
    "workload": {
        "kind": "serving",
        "model": "llama-3-8b",
        "requests": {
            "num_requests": 100_000,
            "rate_per_s": 30.0,
            "lengths": "trace",
            "trace": {
                "format": "azure",
                "path": "../workloads/data/serving/azure_conv_2023_sample.csv",
            },
        },
        "slo": {"ttft_s": 1.0, "tpot_s": 0.1},
        "tp_options": [1],
    },
    "policies": {
        "deployment": {
            "name": "fixed",
            "instances": [
                {"gpu_type": t, "count": 4} for t in ("h100-sxm", "a100-80gb", "l40s", "l4")
            ],
        },
        "routing": "least-outstanding",
        "batching": "vllm",
    },
    "outputs": {"spans": False},
}


MOONCAKE = {
    "format": "mooncake",
    "path": "../workloads/data/serving/mooncake_conversation_sample.jsonl",
}


def run(n: int, cache: bool | None = None) -> None:
    """Simulate ``n`` requests on the 16 GPUs (4 of each type), one colocated instance
    each; Azure lengths, or (``cache`` not None) Mooncake lengths at 10 req/s with the
    prefix cache off or on."""
    raw = copy.deepcopy(SCENARIO)
    raw["workload"]["requests"]["num_requests"] = n
    label = ""
    if cache is not None:
        raw["workload"]["requests"].update(trace=MOONCAKE, rate_per_s=10.0)
        raw["workload"]["prefix_cache"] = cache
        label = f"Mooncake, prefix cache {'on' if cache else 'off'}: "
    sc = from_dict(raw, file="benchmarks/serving.py", base_dir=Path(__file__).resolve().parent)
    t0, c0 = time.perf_counter(), time.process_time()
    res = hetsim.run(sc)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = res.summary.iloc[0]
    hit = f", prefix hit rate {s.prefix_hit_rate:.3f}" if cache is not None else ""
    print(
        f"{label}{n:>7} requests on {int(s.instances)} instances ({s.deployment}): "
        f"{cpu:6.1f} s CPU "
        f"({wall:.1f} s wall), {n / cpu:8.0f} requests/s, {s.iterations / cpu:8.0f} "
        f"iterations/s (CPU), "
        f"simulated {s.throughput_rps:.1f} req/s, TTFT p90 {s.ttft_p90_s:.3f} s, "
        f"TPOT p90 {s.tpot_p90_s * 1e3:.1f} ms{hit}"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, nargs="+", default=[100_000, 10_000])
    ap.add_argument("--mooncake", type=int, default=20_000)
    args = ap.parse_args()
    for n in args.requests:
        run(n)
    if args.mooncake:
        run(args.mooncake, cache=False)
        run(args.mooncake, cache=True)
