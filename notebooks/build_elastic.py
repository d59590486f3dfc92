"""Build notebooks/elastic.ipynb with nbformat (run: python notebooks/build_elastic.py)."""

from __future__ import annotations

from nbwrite import range_cells, write_notebook

CELLS = [
    (
        "md",
        """# Elastic online training: Kale vs Kubernetes HPA vs static

Traffic, forecast, replicas and lag over time for each autoscaler on the `kale.yaml`
scenario (bursty diurnal stream), then the headline table and the forecaster sweep.
Only the public API (`hetsim.run`, `hetsim.sweep`, `hetsim.load_scenario`) is
used. `HETSIM_NOTEBOOK_SMALL=1` (set by the test suite) shrinks the runs to one day.""",
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
DAYS = 1 if SMALL else 7
SCENARIO = hetsim.load_scenario(ROOT / "scenarios" / "kale.yaml",
                                   {"workload.duration_s": DAYS * 86400})
POLICIES = {"static": {"name": "static", "replicas": 12}, "hpa": "hpa", "kale": "kale"}""",
    ),
    (
        "code",
        """results = {name: hetsim.run(SCENARIO, overrides={"policies.autoscaler": p})
           for name, p in POLICIES.items()}
summary = pd.concat({n: r.summary.iloc[0] for n, r in results.items()}, axis=1).T
summary[["accumulated_lag_sample_s", "downtime_s", "slo_violation_rate",
         "slo_violation_samples", "scaling_actions", "gpu_hours"]]""",
    ),
    (
        "code",
        """fig, axes = plt.subplots(4, 1, figsize=(9, 9), sharex=True)
kale = results["kale"].tables["timeline"]
hours = kale["time_s"] / 3600
axes[0].plot(hours, kale["rate_per_s"], lw=0.5, label="arrivals")
axes[0].plot(hours, kale["forecast_per_s"].ffill(), lw=0.8, label="Kale's forecast (next step)")
axes[0].set_ylabel("samples/s")
axes[0].legend(loc="upper left")
for name, r in results.items():
    t = r.tables["timeline"]
    axes[1].step(hours, t["replicas"], where="post", lw=0.8, label=name)
    axes[2].plot(hours, t["lag_samples"], lw=0.8, label=name)
    axes[3].plot(hours, t["oldest_age_s"], lw=0.8, label=name)
axes[1].set_ylabel("replicas")
axes[2].set_ylabel("lag (samples)")
axes[3].set_ylabel("oldest sample age (s)")
axes[3].axhline(SCENARIO.workload.slo_freshness_s, color="k", ls="--", lw=0.8)
axes[3].set_xlabel("hours")
axes[1].legend(loc="upper left")
fig.tight_layout()""",
    ),
    (
        "code",
        """forecasters = ["last-value", "seasonal-naive", "holt-winters", "oracle"]
grid = {"workload.record_timeline": False, "sweep": {"policies.forecaster": forecasters}}
sweep = hetsim.sweep(SCENARIO.with_overrides(grid))
sweep[["policies.forecaster", "forecast_wape", "accumulated_lag_sample_s",
       "slo_violation_rate", "downtime_s", "gpu_hours"]]""",
    ),
]


def main() -> None:
    """Write the notebook next to this script."""
    cells = [*CELLS, *range_cells(["kale"])]
    print(f"wrote {write_notebook(cells, 'elastic.ipynb')}")


if __name__ == "__main__":
    main()
