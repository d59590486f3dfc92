"""Training domain: speed and headline figures.

1. Speed: 100 iterations of a 32-layer model (eager attention, MoE-like routing ops, about
   2,000 operators per iteration) under Chameleon on one Ascend 910B; prints operators
   simulated per second (target: under 10 s on one core).
2. ``scenarios/chameleon.yaml`` sweep: iteration time, OOM, stall per policy and model size;
   Chameleon's speed-up over full recompute; profiling overhead against profiling every step.
3. ``scenarios/slimpipe.yaml`` sweep: per-stage peak activations, bubble, OOM and MFU per
   schedule and context; SlimPipe's MFU ratio over the best baseline that fits.
4. Scale: one step of a 16,384-GPU Llama-3-405B-like 3D-parallel run (TP 8, PP 16,
   DP 128, interleaved 1F1B) in ``training-parallel``; prints the wall time (target:
   under 10 s) and the step's breakdown, tokens/s/GPU and MFU.
Usage: ``python benchmarks/training.py [--iterations N] [--skip-sweeps]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

import hetsim

ROOT = Path(__file__).resolve().parent.parent
CH = ROOT / "scenarios" / "chameleon.yaml"
SP = ROOT / "scenarios" / "slimpipe.yaml"
LLAMA = ROOT / "scenarios" / "llama3-train.yaml"
L405 = {
    "name": "llama-3.1-405b",
    "layers": 128,
    "hidden": 16384,
    "heads": 128,
    "kv_heads": 8,
    "ffn": 53248,
    "vocab": 128256,
}  # 126 layers in the release; 128 divide into 16 x 2


def speed(iterations: int) -> None:
    """Operators per second of a 32-layer Chameleon run."""
    over = {
        "workload.model": {"layers": 32, "hidden": 2048, "heads": 16, "ffn": 8192,
                           "seq_len": 4096, "micro_batch": 4, "flash_attention": False},
        "workload.size_x_hbm": None, "workload.iterations": iterations,
        "workload.variability": {"every_iters": 25, "moe_ops_max": 16, "branch_ops": 2},
    }  # fmt: skip
    t0 = time.perf_counter()
    res = hetsim.run(CH, overrides=over)
    wall = time.perf_counter() - t0
    it = res.tables["iterations"]
    ops = int(it["op_count"].sum())
    s = res.summary.iloc[0]
    print(f"speed: {len(it)} iterations, {ops} ops ({ops / len(it):.0f}/iteration), "
          f"{wall:.2f} s wall, {ops / wall:,.0f} ops/s; footprint "
          f"{s.footprint_x_hbm:.2f}x HBM, forced swaps {s.forced_swaps}, "
          f"profiled iterations {s.profiled_iterations}")  # fmt: skip


def chameleon() -> None:
    """The model-size sweep and the profiling-overhead comparison."""
    t = hetsim.sweep(CH, workers=1)
    cols = ["workload.size_x_hbm", "policies.swap", "layers", "footprint_x_hbm", "oom",
            "iteration_s", "last_iteration_s", "stall_s", "forced_swaps", "mfu"]  # fmt: skip
    print(t[cols].round(3).to_string(index=False))
    ok = t[t.oom == 0].pivot(index="workload.size_x_hbm", columns="policies.swap",
                             values="last_iteration_s")  # fmt: skip
    if {"chameleon", "recompute"} <= set(ok.columns):
        gain = (1 - ok["chameleon"] / ok["recompute"]).dropna()
        print("Chameleon faster than full recompute (steady state):",
              {k: f"{100 * v:.1f}%" for k, v in gain.items()})  # fmt: skip
    largest = t[t.oom == 0].groupby("policies.swap")["footprint_x_hbm"].max()
    print("largest trainable footprint (x HBM):", largest.round(2).to_dict())
    base = {"workload.size_x_hbm": 2.0}
    a = hetsim.run(CH, overrides=base).summary.iloc[0]
    b = hetsim.run(
        CH, overrides={**base, "policies.swap": {"name": "chameleon", "profile_every_step": True}}
    )
    bp = b.summary.iloc[0].profile_s
    print(f"profiling overhead at 2x: state machine {a.profile_s:.4f} s vs every step "
          f"{bp:.4f} s: {100 * (a.profile_s / bp - 1):.1f}% (paper: -84.25%)")  # fmt: skip


def slimpipe() -> None:
    """The context sweep of the pipeline schedules."""
    t = hetsim.sweep(SP, workers=1)
    t["peak_act_GB"] = t.peak_act_stage0_bytes / 1e9
    t["peak_GB"] = t.peak_bytes / 1e9
    cols = ["workload.model.seq_len", "workload.recompute", "policies.schedule",
            "iteration_s", "bubble", "peak_act_GB", "peak_GB", "oom", "mfu"]  # fmt: skip
    print(t[cols].round(3).to_string(index=False))
    fit = t[t.oom == 0]
    rows = []
    for seq, g in fit.groupby("workload.model.seq_len"):
        slim = g[g["policies.schedule"] == "slimpipe"].mfu.max()
        base = g[g["policies.schedule"] != "slimpipe"].mfu.max()
        rows.append({"seq_len": seq, "slimpipe_mfu": slim, "best_baseline_mfu": base,
                     "ratio": slim / base if base == base else float("nan")})  # fmt: skip
    print(pd.DataFrame(rows).round(3).to_string(index=False))


def scale() -> None:
    """Wall time of one 16,384-GPU 3D-parallel step (scale by symmetry)."""
    over = {
        "workload.model": L405, "workload.tp": 8, "workload.pp": 16, "workload.dp": 128,
        "workload.seq_len": 8192, "workload.micro_batch": 1, "workload.global_batch": 2048,
        "workload.zero": 1, "workload.recompute": "full", "workload.tp_comm_overlap": True,
        "workload.precision": "bf16", "policies.schedule": {"name": "interleaved", "chunks": 2},
    }  # fmt: skip
    t0 = time.perf_counter()
    res = hetsim.run(LLAMA, overrides=over)
    wall = time.perf_counter() - t0
    s = res.summary.iloc[0]
    print(f"scale: {int(s.world):,} GPUs (TP 8 x PP 16 x DP 128, {int(s.micro_batches)} "
          f"micro-batches, interleaved x2) simulated in {wall:.2f} s wall")  # fmt: skip
    keys = ["iteration_s", "compute_s", "tp_exposed_s", "pp_bubble_s", "dp_exposed_s",
            "optimizer_s", "param_gather_exposed_s", "tokens_per_s_per_gpu", "mfu",
            "peak_bytes", "oom"]  # fmt: skip
    print("  " + ", ".join(f"{k} {s[k]:.4g}" for k in keys))


def main() -> None:
    """Parse arguments and print every figure."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--skip-sweeps", action="store_true")
    args = ap.parse_args()
    speed(args.iterations)
    scale()
    if not args.skip_sweeps:
        chameleon()
        slimpipe()


if __name__ == "__main__":
    main()
