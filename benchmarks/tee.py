"""TEE domain: speed and headline figures.

Runs 1,000 steps of GPT-3 6.7B collaborative training under each protection scheme
(steps per second of simulation), then prints TensorTEE's speedup over the cacheline
TEE and overhead over non-secure per GPT-3 size (scenarios/tensortee.yaml) and the
TEE+NNA speedups and hidden share (scenarios/tee_nna.yaml).
Usage: ``python benchmarks/tee.py [--steps N]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import hetsim

ROOT = Path(__file__).resolve().parent.parent
SCHEMES = ("none", "cacheline", "tensortee", "h100-cc")


def speed(steps: int) -> None:
    """Wall time of ``steps`` steps of a 7B-class run under each scheme."""
    sc = ROOT / "scenarios" / "tensortee.yaml"
    total = 0.0
    for scheme in SCHEMES:
        t0 = time.perf_counter()
        res = hetsim.run(sc, workload__steps=steps, workload__model="gpt3-6.7b",
                            policies__protection=scheme)  # fmt: skip
        wall = time.perf_counter() - t0
        total += wall
        step_s = res.summary["step_s"].iloc[0]
        print(f"{scheme:10s} {steps} steps in {wall:6.3f} s wall = {steps / wall:9.0f} steps/s"
              f"  (simulated step {step_s:.3f} s)")  # fmt: skip
    print(f"all schemes: {total:.3f} s wall (target < 10 s)")


def tensortee() -> None:
    """Speedup over cacheline and overhead over non-secure, per model size."""
    t = hetsim.sweep(ROOT / "scenarios" / "tensortee.yaml", overrides={"workload.steps": 2})
    p = t.pivot(index="workload.model", columns="policies.protection", values="step_s")
    p = p.loc[sorted(p.index, key=lambda m: float(m.split("-")[1][:-1]))]
    p["speedup_vs_cacheline"] = p["cacheline"] / p["tensortee"]
    p["overhead_vs_plain_%"] = 100 * (p["tensortee"] / p["none"] - 1)
    p["h100cc_overhead_%"] = 100 * (p["h100-cc"] / p["none"] - 1)
    print(p.round(4).to_string())
    print(f"mean speedup over cacheline {p['speedup_vs_cacheline'].mean():.2f}x (paper 4.0x); "
          f"mean overhead {p['overhead_vs_plain_%'].mean():.4f}% (paper 2.1%)")  # fmt: skip


def tee_nna() -> None:
    """Speedup over TEE-only and hidden share per model and execution policy."""
    t = hetsim.sweep(ROOT / "scenarios" / "tee_nna.yaml", overrides={"workload.steps": 2})
    cols = ["workload.model", "policies.execution", "step_s", "speedup_vs_tee_only",
            "hidden_share", "offloaded_ops"]  # fmt: skip
    print(t[cols].round(4).to_string(index=False))
    print("paper: pipelined 8-19x over TEE-only; prefetch hides 87.1% of conversion/interaction")


def main() -> None:
    """Print speed and the headline figures."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    args = ap.parse_args()
    speed(args.steps)
    tensortee()
    tee_nna()


if __name__ == "__main__":
    main()
