"""Build notebooks/cluster.ipynb with nbformat (run: python notebooks/build_cluster.py)."""

from __future__ import annotations

from nbwrite import range_cells, write_notebook

CELLS = [
    (
        "md",
        """# Cluster scheduling: Cuckoo (reconstruction), Muri and the baselines

JCT CDFs per policy, deadline satisfaction rate vs deadline tightness (with Cuckoo on
Muri's coarse interference estimate as an ablation), the DSR ratio against the arrival
rate at the tightest deadlines (`scenarios/cuckoo_load.yaml`'s sweep), and GPU
utilisation over time per GPU type, on `scenarios/cuckoo.yaml` (V100/P100/K80); then
Muri's interleaving against SRTF and Tiresias on `scenarios/muri.yaml`. Public API only.
`HETSIM_NOTEBOOK_SMALL=1` (set by the test suite) shrinks the runs to 60 jobs.""",
    ),
    (
        "code",
        """import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import hetsim
ROOT = Path.cwd() if (Path.cwd() / "scenarios").exists() else Path.cwd().parent
SMALL = os.environ.get("HETSIM_NOTEBOOK_SMALL") == "1"
JOBS = 60 if SMALL else 300
SCENARIO = hetsim.load_scenario(ROOT / "scenarios" / "cuckoo.yaml",
                                   {"workload.jobs.num_jobs": JOBS})
POLICIES = {
    "cuckoo": ("cuckoo", "cuckoo", "cuckoo"),
    "edf": ("edf", "none", "first-fit"),
    "tiresias": ("tiresias", "none", "first-fit"),
    "muri": ("srtf", "muri", "first-fit"),
    "gavel-like": ("tiresias", "none", "gavel-like"),
    "gavel LP": ("fifo", "none", "gavel"),  # time-shares only with preemptive rounds
}


def over(o, p, a, **extra):
    pre = {"workload.execution.preemption": a == "gavel"}
    return {"policies.ordering": o, "policies.packing": p, "policies.allocation": a, **pre,
            **extra}""",
    ),
    (
        "code",
        """results = {n: hetsim.run(SCENARIO, overrides=over(*p)) for n, p in POLICIES.items()}
summary = pd.concat({n: r.summary.iloc[0] for n, r in results.items()}, axis=1).T
summary[["dsr", "mean_jct_s", "p99_jct_s", "makespan_s", "utilisation", "packed_share"]]""",
    ),
    (
        "code",
        """fig, ax = plt.subplots(figsize=(7, 4))
for name, r in results.items():
    jct = np.sort(r.tables["jobs"]["jct_s"].to_numpy()) / 3600
    ax.plot(jct, np.arange(1, len(jct) + 1) / len(jct), label=name)
ax.set_xscale("log")
ax.set_xlabel("JCT (h)")
ax.set_ylabel("CDF")
ax.legend()""",
    ),
    (
        "code",
        """TIGHTNESS = [(0.5, 1.5), (1.0, 2.0), (2.0, 3.0)]
rows = []
for lo, hi in TIGHTNESS:
    for n, p in POLICIES.items():
        s = hetsim.run(SCENARIO, overrides=over(*p, **{
            "workload.deadlines.factor_low": lo, "workload.deadlines.factor_high": hi}))
        row = s.summary.iloc[0]
        rows.append({"policy": n, "lambda": f"U[{lo}, {hi}]", "dsr": row["dsr"]})
    coarse = hetsim.run(SCENARIO, overrides=over(*POLICIES["cuckoo"], **{
        "workload.deadlines.factor_low": lo, "workload.deadlines.factor_high": hi,
        "policies.packing.estimate": "group", "policies.allocation.estimate": "group"}))
    rows.append({"policy": "cuckoo (coarse estimate)", "lambda": f"U[{lo}, {hi}]",
                 "dsr": coarse.summary.iloc[0]["dsr"]})
dsr = pd.DataFrame(rows).pivot(index="lambda", columns="policy", values="dsr")
dsr.plot(marker="o", ylabel="deadline satisfaction rate", figsize=(7, 4))
dsr""",
    ),
    (
        "code",
        """RATES = [0.002, 0.004] if SMALL else [0.002, 0.003, 0.004, 0.006, 0.008]
rows = []
for rate in RATES:
    for n, p in POLICIES.items():
        s = hetsim.run(SCENARIO, overrides=over(*p, **{
            "workload.deadlines.factor_low": 0.5, "workload.deadlines.factor_high": 1.5,
            "workload.jobs.arrival_rate_per_s": rate}))
        rows.append({"policy": n, "arrivals per s": rate, "dsr": s.summary.iloc[0]["dsr"]})
load = pd.DataFrame(rows).pivot(index="arrivals per s", columns="policy", values="dsr")
base = load.drop(columns="cuckoo")
ratio = pd.DataFrame({"cuckoo / best baseline": load["cuckoo"] / base.max(axis=1),
                      "cuckoo / gavel LP": load["cuckoo"] / load["gavel LP"]})
ratio.plot(marker="o", ylabel="DSR ratio at lambda ~ U[0.5, 1.5]", figsize=(7, 4))
load.join(ratio)""",
    ),
    (
        "code",
        """util = results["cuckoo"].tables["utilisation"]
fig, ax = plt.subplots(figsize=(8, 3.5))
for gpu_type, t in util.groupby("gpu_type", sort=False):
    ax.plot(t["start_s"] / 3600, t["utilisation"], label=gpu_type)
ax.set_xlabel("time (h)")
ax.set_ylabel("GPU utilisation (Cuckoo)")
ax.legend()""",
    ),
    (
        "code",
        """MURI = hetsim.load_scenario(ROOT / "scenarios" / "muri.yaml",
                               {"workload.jobs.max_jobs": 60 if SMALL else 400})
pairs = {"Muri-S": ("srtf", "muri"), "SRTF": ("srtf", "none"),
         "Muri-L": ("tiresias", "muri"), "Tiresias": ("tiresias", "none")}
muri = {n: hetsim.run(MURI, overrides={"policies.ordering": o, "policies.packing": p})
        for n, (o, p) in pairs.items()}
cols = ["mean_jct_s", "makespan_s", "packed_share", "utilisation", "work_per_gpu_s"]
pd.concat({n: r.summary.iloc[0][cols] for n, r in muri.items()}, axis=1).T""",
    ),
]


def main() -> None:
    """Write the notebook next to this script."""
    cells = [*CELLS, *range_cells(["cuckoo", "muri-s", "muri-l"])]
    print(f"wrote {write_notebook(cells, 'cluster.ipynb')}")


if __name__ == "__main__":
    main()
