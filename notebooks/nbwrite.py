"""Shared by the ``notebooks/build_*.py`` scripts: write a notebook from its cells,
executed, so it is committed with its outputs (figures as small PNGs) and reads on
GitHub.

Cells are nbformat cells or ``(kind, source)`` pairs with kind ``md`` or ``code``.
``HETSIM_NOTEBOOK_NO_EXECUTE=1`` writes the cells without running them;
``HETSIM_NOTEBOOK_SMALL=1`` (what the test suite sets) runs the small settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}

Cell = nbformat.NotebookNode | tuple[str, str]


def notebook(cells: Sequence[Cell]) -> nbformat.NotebookNode:
    """A notebook of ``cells`` with the python3 kernel."""
    nb = new_notebook()
    nb.cells = [
        c if isinstance(c, nbformat.NotebookNode)
        else new_markdown_cell(c[1]) if c[0] == "md" else new_code_cell(c[1])
        for c in cells
    ]  # fmt: skip
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    return nb


FIGURE_DPI = 72
"""Inline figures at 72 dpi keep the committed PNGs small."""
TIMEOUT_S = 1800


def execute(nb: nbformat.NotebookNode, folder: Path) -> nbformat.NotebookNode:
    """Run every cell in ``folder`` (inline figures, PNG at :data:`FIGURE_DPI`); an error
    in a cell stops the build (nothing is written)."""
    from nbclient import NotebookClient

    setup = new_code_cell(f"%config InlineBackend.figure_formats = ['png']\n"
                          f"%config InlineBackend.rc = {{'figure.dpi': {FIGURE_DPI}}}")  # fmt: skip
    nb.cells.insert(0, setup)  # run first, then removed: the reader's kernel has its own
    client = NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}})  # fmt: skip
    client.execute()
    nb.cells.pop(0)
    for cell in nb.cells:  # timings change every run: drop them; count from 1
        cell.get("metadata", {}).pop("execution", None)
        if cell.get("execution_count"):
            cell.execution_count -= 1
            for out in cell.get("outputs", []):
                if out.get("execution_count"):
                    out.execution_count -= 1
    return nb


def write_notebook(cells: Sequence[Cell], name: str) -> Path:
    """Execute the notebook (unless ``HETSIM_NOTEBOOK_NO_EXECUTE=1``), then write
    ``notebooks/<name>`` and return its path."""
    import os

    folder = Path(__file__).resolve().parent
    path = folder / name
    nb = notebook(cells)
    if os.environ.get("HETSIM_NOTEBOOK_NO_EXECUTE") != "1":
        nb = execute(nb, folder)
    nbformat.write(nb, path)
    return path


def range_cells(headlines: Sequence[str]) -> list[tuple[str, str]]:
    """Cells that plot each headline's robustness range (``notebooks/robustness.py``
    writes ``docs/figures/robustness/<name>.csv`` when it reruns a sweep): per metric,
    the paper's system against the best baseline at every point of the sweep, with the
    paper's value marked. Needs ``ROOT``, ``pd`` and ``plt`` from the notebook's first
    code cell."""
    names = ", ".join(f'"{h}"' for h in headlines)
    return [
        (
            "md",
            "## Headlines as ranges\n\nEach headline over its robustness sweep "
            "(`scenarios/<name>-robustness.yaml`, rerun by `notebooks/robustness.py`): "
            "the ratio of the paper's system to the best baseline at every point (> 1: "
            "the paper's direction holds), the median as a bar, the paper's value as a "
            "red diamond; a ratio of 0 sits on the bottom edge (down triangles), inf on "
            "the top edge.",
        ),
        (
            "code",
            f"""import sys

sys.path.insert(0, str(ROOT / "notebooks"))
from robustness import plot_ranges  # the figure the docs show

RANGES = ROOT / "docs" / "figures" / "robustness"
rows = []
for name in [{names}]:
    frame = pd.read_csv(RANGES / f"{{name}}.csv")
    plot_ranges(frame)
    for metric, v in frame.groupby("metric", sort=False)["best baseline"]:
        v = v.dropna()
        rows.append({{"headline": name, "metric": metric, "points": len(v),
                     "min": v.min(), "median": v.median(), "max": v.max(),
                     "share > 1": (v > 1).mean()}})
plt.show()
pd.DataFrame(rows).round(3)""",
        ),
    ]
