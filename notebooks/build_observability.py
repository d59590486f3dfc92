"""Build notebooks/observability.ipynb (run: .venv/bin/python notebooks/build_observability.py).

The notebook uses only the public API (hetsim.run, hetsim.sweep,
hetsim.load_scenario) plus pandas and matplotlib; HETSIM_NOTEBOOK_SMALL=1 shrinks it.
"""

from __future__ import annotations

from nbwrite import range_cells, write_notebook

CELLS: list[tuple[str, str]] = [
    (
        "md",
        """# Observability: stragglers, faults and recovery

Per-rank telemetry of a 2,048-rank data-parallel job with injected stragglers, analysed by
Kair (KS per rank, operator z-scores, causal tracing) and baselines; then a 10,000-GPU job
under the Llama 3 fault rates, where the checkpoint interval and the detector's quality set
the effective training time ratio (ETTR). `HETSIM_NOTEBOOK_SMALL=1` shrinks every run.""",
    ),
    (
        "code",
        """import os
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

import hetsim
ROOT = Path.cwd() if (Path.cwd() / "scenarios").exists() else Path.cwd().parent
SMALL = os.environ.get("HETSIM_NOTEBOOK_SMALL") == "1"
KAIR = ROOT / "scenarios" / "kair.yaml"
FAULTS = ROOT / "scenarios" / "faults.yaml"
SIZE = {"workload.ranks": 128, "workload.iterations": 300} if SMALL else {}
DAYS = 30 if SMALL else 180""",
    ),
    ("md", "## Per-rank telemetry: mean self time per window, relative to the median rank"),
    (
        "code",
        """res = hetsim.run(KAIR, overrides={**SIZE, "workload.record_rank_windows": True})
rw = res.tables["rank_windows"]
faults = res.tables["faults"]
heat = rw.pivot(index="rank", columns="window", values="self_s")
heat = heat / heat.median()
fig, ax = plt.subplots(figsize=(8, 4))
im = ax.imshow(heat.to_numpy(), aspect="auto", cmap="magma", vmin=0.95, vmax=1.5,
               interpolation="nearest")
per_window = res.tables["windows"]
for _, f in faults.iterrows():
    w = (per_window["first_iteration"] <= f["start_iteration"]).sum() - 1
    ax.plot(w, f["rank"], "c>" if f["cause"] == "compute" else "g^", markersize=5)
ax.set_xlabel("window")
ax.set_ylabel("rank")
ax.set_title("self time / median rank (arrows: injected faults; cyan compute, green network)")
fig.colorbar(im, ax=ax)
res.summary.T""",
    ),
    ("md", "## Detection timeline: when each fault started and when Kair named it"),
    (
        "code",
        """fig, ax = plt.subplots(figsize=(8, 3.5))
for i, f in faults.sort_values("start_s").reset_index(drop=True).iterrows():
    end = f["detected_s"] if pd.notna(f["detected_s"]) else res.summary["makespan_s"].iloc[0]
    colour = "tab:blue" if f["cause"] == "compute" else "tab:green"
    ax.plot([f["start_s"], end], [i, i], color=colour, lw=3)
    if pd.notna(f["detected_s"]):
        ax.plot(end, i, "k|", markersize=10)
ax.set_xlabel("time (s)")
ax.set_ylabel("fault")
ax.set_title("fault start to first true finding (blue compute, green network)")
faults[["kind", "rank", "factor", "start_s", "detected_s", "detected_cause", "delay_s"]]""",
    ),
    ("md", "## Kair against the threshold and z-score baselines and a KAIOPS-style model"),
    (
        "code",
        """sweep = hetsim.sweep(hetsim.load_scenario(KAIR, SIZE))
cols = ["policies.detector", "rank_precision", "rank_recall", "rank_f1", "compute_f1",
        "comm_f1", "false_findings", "mean_delay_s"]
sweep[cols].round(3)""",
    ),
    ("md", "## ETTR against the checkpoint interval (Llama 3 fault rates, 10,000 GPUs)"),
    (
        "code",
        """sc = hetsim.load_scenario(FAULTS, {"workload.duration_days": DAYS})
table = hetsim.sweep(sc)
table["detector"] = table["policies.detector"].map(lambda s: "poor" if "0.5" in s else "good")
fig, ax = plt.subplots(figsize=(6, 3.5))
for det, group in table.sort_values("interval_s").groupby("detector"):
    ax.plot(group["interval_s"], group["ettr"], "o-", label=f"simulated, {det} detector")
good = table[table["detector"] == "good"].sort_values("interval_s")
ax.plot(good["interval_s"], good["ettr_exact"], "k--", label="exact closed form (fail-stop)")
ax.axvline(table["daly_s"].iloc[0], color="grey", ls=":", label="Daly optimum")
ax.set_xscale("log")
ax.set_xlabel("checkpoint interval (s of work)")
ax.set_ylabel("ETTR")
ax.legend(fontsize=8)
row = table.iloc[0]
print(f"job MTBF {row['job_mtbf_h']:.2f} h vs 1/(N r) {row['expected_mtbf_h']:.2f} h")
table[["detector", "interval_s", "ettr", "ettr_exact", "goodput_tokens_per_s"]].round(4)""",
    ),
]


def main() -> None:
    """Write the notebook next to this script."""
    cells = [*CELLS, *range_cells(["kair"])]
    print(f"wrote {write_notebook(cells, 'observability.ipynb')}")


if __name__ == "__main__":
    main()
