"""Build notebooks/quickstart.ipynb: run, read, and sweep the quickstart scenario.

Run ``python notebooks/build_quickstart.py``; the test suite executes the notebook.
"""

from __future__ import annotations

from nbformat.v4 import new_code_cell, new_markdown_cell
from nbwrite import write_notebook

CELLS = [
    new_markdown_cell(
        "# hetsim quickstart\n\n"
        "Run the quickstart scenario (Llama-2-7B prefill on an A100 and an L4), read its "
        "summary and per-request table, then sweep load and dispatch policy over seeds and "
        "plot the tail latency with confidence bands. Public API only: `hetsim.run`, "
        "`hetsim.sweep`, `hetsim.load_scenario`, `hetsim.plotting`. "
        "`HETSIM_NOTEBOOK_SMALL=1` (set by the test suite) shrinks the runs."
    ),
    new_code_cell(
        "import os\n"
        "from pathlib import Path\n\n"
        "import hetsim\n"
        "from hetsim.plotting import plot_sweep, sweep_summary\n\n"
        'ROOT = Path.cwd() if (Path.cwd() / "scenarios").exists() else Path.cwd().parent\n'
        'SMALL = os.environ.get("HETSIM_NOTEBOOK_SMALL") == "1"\n'
        "N = 200 if SMALL else 2000"
    ),
    new_code_cell(
        'result = hetsim.run(ROOT / "scenarios" / "quickstart.yaml", workload__num_requests=N)\n'
        "result.summary.T"
    ),
    new_code_cell(
        'requests = result.tables["requests"]\n'
        'requests["sojourn_s"] = requests["end_s"] - requests["arrival_s"]\n'
        'requests.groupby("server")["sojourn_s"].describe()'
    ),
    new_code_cell(
        "design = {\n"
        '    "design": "grid",\n'
        '    "replications": 2 if SMALL else 5,\n'
        '    "parameters": {\n'
        '        "policies.dispatch": ["least-loaded", "round-robin"],\n'
        '        "workload.arrivals.rate_per_s": [6.0, 12.0, 18.0],\n'
        "    },\n"
        "}\n"
        "sc = hetsim.load_scenario(\n"
        '    ROOT / "scenarios" / "quickstart.yaml",\n'
        '    {"workload.num_requests": N, "sweep": design},\n'
        ")\n"
        "table = hetsim.sweep(sc, workers=1 if SMALL else 2)\n"
        'x, y, hue = "workload.arrivals.rate_per_s", "p99_sojourn_s", "policies.dispatch"\n'
        "ax = plot_sweep(table, x, y, hue=hue)\n"
        'ax.set_title("p99 sojourn, mean and 95% CI over seeds")\n'
        "sweep_summary(table, x, y, hue=hue)"
    ),
]


def main() -> None:
    """Write the notebook next to this script."""
    print(f"wrote {write_notebook(CELLS, 'quickstart.ipynb')}")


if __name__ == "__main__":
    main()
