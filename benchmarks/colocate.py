"""CPU cost of a multi-workload run against the same workloads run alone.

Runs ``scenarios/colocate.yaml`` (serving-first) three ways: serving alone (its
``workloads.serving`` block as a single ``workload:``), the training jobs alone, and both
on one cluster, and prints CPU seconds (``time.process_time``) per serving request and
per training step. Then it extrapolates, linearly in requests and steps, to the target
day of 1M requests and 100 jobs on 1000 GPUs (<= 300 s CPU): an extrapolation, not a
measurement (the arbiter's per-period cost grows with the GPUs it scans, which the
small run does not exercise).

Usage: ``python benchmarks/colocate.py [--requests N]`` (default: the scenario's).
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path
from typing import Any

import yaml

import hetsim
from hetsim.simulator.scenario import from_dict

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "colocate.yaml"
TARGET = {"requests": 1_000_000, "jobs": 100, "gpus": 1000, "cpu_s": 300.0}


def _single(raw: dict[str, Any], name: str) -> dict[str, Any]:
    out = {k: copy.deepcopy(v) for k, v in raw.items()
           if k not in ("workloads", "policies", "sweep", "sharing")}  # fmt: skip
    block = copy.deepcopy(raw["workloads"][name])
    block.pop("devices", None)
    out["policies"] = block.pop("policies", {})
    out["workload"] = block
    return out


def _cpu(raw: dict[str, Any]) -> tuple[float, Any]:
    sc = from_dict(raw, str(SCENARIO), SCENARIO.parent)
    t0 = time.process_time()
    res = hetsim.run(sc)
    return time.process_time() - t0, res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=None)
    args = ap.parse_args()
    raw = yaml.safe_load(SCENARIO.read_text())
    raw.pop("sweep", None)
    if args.requests is not None:
        raw["workloads"]["serving"]["requests"]["num_requests"] = args.requests
    _cpu(raw)  # warm-up: imports, catalogue, kernel fits (paid once per process)
    both_s, both = _cpu(raw)
    serve_s, serve = _cpu(_single(raw, "serving"))
    train_s, train = _cpu(_single(raw, "training"))
    rows = {r["workload"]: r for r in both.rows}
    n_req = int(rows["serving"]["requests"])
    n_steps = int(rows["training"]["steps_completed"])
    steps_alone = int(train.summary_row["steps_completed"])
    print(
        f"serving alone:  {serve_s:6.2f} s CPU, {serve.summary_row['requests']} requests, "
        f"{1e6 * serve_s / max(1, serve.summary_row['requests']):7.1f} us/request"
    )
    print(
        f"training alone: {train_s:6.2f} s CPU, {steps_alone} steps, "
        f"{1e6 * train_s / max(1, steps_alone):7.1f} us/step (after the warm-up run)"
    )
    print(f"colocated:      {both_s:6.2f} s CPU, {n_req} requests + {n_steps} steps")
    extra = both_s - serve_s - train_s
    print(f"  overhead of colocation (arbiter, ledger, rows): {extra:+.2f} s CPU")
    per_req = both_s / max(1, n_req)
    jobs = int(rows["training"]["jobs_total"])
    steps_per_job_day = n_steps / jobs * 86400 / float(rows["cluster"]["makespan_s"])
    per_step = max(train_s, 0.0) / max(1, n_steps)
    est = per_req * TARGET["requests"] + per_step * TARGET["jobs"] * steps_per_job_day
    print(
        f"EXTRAPOLATED (linear in requests and steps, not measured) to one day of "
        f"{TARGET['requests']:,} requests and {TARGET['jobs']} jobs on {TARGET['gpus']} GPUs: "
        f"~{est:.0f} s CPU (target <= {TARGET['cpu_s']:.0f} s)"
    )


if __name__ == "__main__":
    main()
