"""CPU cost of a multi-workload run against the same workloads run alone.

Runs ``scenarios/colocate.yaml`` (serving-first) three ways: serving alone (its
``workloads.serving`` block as a single ``workload:``), the training jobs alone, and both
on one cluster, and prints CPU seconds (``time.process_time``) per serving request and
per training step. Then it extrapolates, linearly in requests and steps, to the target
day of 1M requests and 100 jobs on 1000 GPUs (<= 300 s CPU): an extrapolation, not a
measurement (the arbiter's per-period cost grows with the GPUs it scans, which the
small run does not exercise).

``--day`` measures the target itself instead: the same two workloads scaled to one day
(86,400 s, the ServeGen windows at their real 600 s) of 1M requests and 100 jobs on a
1,000-GPU cluster (50 H100 nodes of 8 for training, 50 A100 nodes of 8 and 50 L40S nodes
of 4 for serving), colocated and then each workload alone on its own GPUs, and prints
CPU seconds, requests and steps.

Usage: ``python benchmarks/colocate.py [--requests N] [--day [--day-requests N] [--no-alone]]``.
"""

from __future__ import annotations

import argparse
import copy
import time
from fnmatch import fnmatch
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
    patterns = [str(p).split("/")[0] for p in block.pop("devices", None) or []]
    if patterns:  # alone on the nodes it owns in the colocated run
        out["cluster"]["nodes"] = [n for n in out["cluster"]["nodes"]
                                   if any(fnmatch(n["name"], p) for p in patterns)]  # fmt: skip
    out["policies"] = block.pop("policies", {})
    out["workload"] = block
    return out


def _cpu(raw: dict[str, Any]) -> tuple[float, Any]:
    sc = from_dict(raw, str(SCENARIO), SCENARIO.parent)
    t0 = time.process_time()
    res = hetsim.run(sc)
    return time.process_time() - t0, res


def _day(raw: dict[str, Any], requests: int) -> dict[str, Any]:
    """The scenario scaled to the target day on 1,000 GPUs (see the module docstring)."""
    day = copy.deepcopy(raw)
    nodes = []
    for kind, gpu, count, link in (
        ("h100", "h100-sxm", 8, "pcie5-x16"),
        ("a100", "a100-80gb", 8, "pcie4-x16"),
        ("l40s", "l40s", 4, "pcie4-x16"),
    ):
        for i in range(50):
            nodes.append({
                "name": f"{kind}-{i}",
                "devices": {"gpu": {"type": gpu, "count": count}, "cpu": {"type": "xeon-8480"}},
                "links": [{"type": link, "between": ["gpu", "cpu"]}],
            })  # fmt: skip
    day["cluster"]["nodes"] = nodes
    day["until_s"] = 86_400 + 3_600
    serving = day["workloads"]["serving"]
    serving["devices"] = ["a100-*/*", "l40s-*/*"]
    serving["requests"]["num_requests"] = requests
    serving["requests"]["rate_per_s"] = requests / 86_400
    serving["requests"]["trace"]["window_s"] = 600
    serving["deployment_rate_per_s"] = requests / 86_400 / 5
    training = day["workloads"]["training"]
    training["devices"] = ["h100-*/*"]
    training["num_jobs"] = 100
    training["gpus_per_job"] = 8
    training["steps_per_job"] = 20_000
    training["submit_interval_s"] = 600
    return day


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--day", action="store_true", help="measure the one-day target run")
    ap.add_argument("--day-requests", type=int, default=TARGET["requests"])
    ap.add_argument("--no-alone", action="store_true", help="--day without the runs alone")
    args = ap.parse_args()
    raw = yaml.safe_load(SCENARIO.read_text())
    raw.pop("sweep", None)
    if args.day:
        _cpu(raw)  # warm-up, as below
        day_raw = _day(raw, int(args.day_requests))
        day_s, day = _cpu(day_raw)
        rows = {r["workload"]: r for r in day.rows}
        n_req = int(rows["serving"]["requests"])
        n_steps = int(rows["training"]["steps_completed"])
        print(
            f"MEASURED one day on 1000 GPUs: {day_s:.1f} s CPU for {n_req:,} requests and "
            f"{n_steps:,} training steps of {rows['training']['jobs_total']} jobs "
            f"({1e6 * day_s / max(1, n_req):.1f} us/request all in; target <= "
            f"{TARGET['cpu_s']:.0f} s)"
        )
        if not args.no_alone:
            serve_s, serve = _cpu(_single(day_raw, "serving"))
            train_s, train = _cpu(_single(day_raw, "training"))
            print(
                f"  the same serving alone on its 600 GPUs: {serve_s:.1f} s CPU "
                f"({1e6 * serve_s / max(1, serve.summary_row['requests']):.1f} us/request); "
                f"the training alone on its 400: {train_s:.1f} s CPU; colocation adds "
                f"{day_s - serve_s - train_s:+.1f} s"
            )
        return
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
