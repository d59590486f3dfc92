"""A small HybriMoE decode scenario on one H100 + Xeon server, built and ready to start,
shared by the MoE loop tests that compare two ways of running the same workload."""

from __future__ import annotations

from typing import Any

from hetsim.simulator.engine import Simulation
from hetsim.simulator.runner import build
from hetsim.simulator.scenario import from_dict


def hybrimoe_mixtral(name: str, seed: int, tokens: int) -> tuple[Simulation, Any]:
    """(simulation, built workload): Mixtral-8x7B, ``tokens`` prompt (and warm-up) tokens
    and ``tokens`` x 3 / 4 output tokens, a quarter of the experts cached, HybriMoE's
    policies (top-k gating, HSS placement, impact prefetch, MRS cache)."""
    raw: dict[str, Any] = {
        "name": name,
        "seed": seed,
        "cluster": {
            "nodes": [
                {
                    "name": "s",
                    "devices": {"gpu": {"type": "h100-sxm"}, "cpu": {"type": "xeon-8480"}},
                    "links": [{"type": "pcie5-x16", "between": ["gpu", "cpu"]}],
                }
            ]
        },
        "workload": {
            "kind": "moe",
            "model": "mixtral-8x7b",
            "prompt_tokens": tokens,
            "output_tokens": tokens * 3 // 4,
            "warmup_tokens": tokens,
            "cache_fraction": 0.25,
        },
        "policies": {
            "gating": "topk",
            "placement": "hybrimoe",
            "prefetch": "impact",
            "cache": "mrs",
        },
    }
    sc = from_dict(raw, file="<test>")
    sim = Simulation(sc.seed)
    return sim, build(sc, sim)
