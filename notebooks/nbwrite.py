"""Shared by the ``notebooks/build_*.py`` scripts: write a notebook from its cells.

Cells are nbformat cells or ``(kind, source)`` pairs with kind ``md`` or ``code``.
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


def write_notebook(cells: Sequence[Cell], name: str) -> Path:
    """Write ``notebooks/<name>`` and return its path."""
    path = Path(__file__).resolve().parent / name
    nbformat.write(notebook(cells), path)
    return path
