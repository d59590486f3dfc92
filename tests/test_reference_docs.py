"""Every field of the scenario reference has a description, read from the same models
the generator tables (so a new field without one fails here)."""

from __future__ import annotations

import re

from hetsim.simulator.reference import field_rows, reference_models, reference_page


def test_every_reference_field_has_a_description() -> None:
    missing = [f"{section}: {row.path}"
               for section, model in reference_models()
               for row in field_rows(model) if not row.doc.strip()]  # fmt: skip
    assert not missing, (f"{len(missing)} scenario fields have no description "
                         "(give each a Field(description=...)):\n" + "\n".join(missing))  # fmt: skip


def test_generated_page_has_no_empty_description_cell() -> None:
    rows = [line for line in reference_page().splitlines() if line.startswith("| `")]
    assert rows
    cells = [re.split(r"(?<!\\)\|", line.strip())[1:-1] for line in rows]
    empty = [c[0].strip() for c in cells if len(c) == 5 and not c[4].strip()]
    assert all(len(c) == 5 for c in cells)
    assert not empty, f"fields without a description: {empty}"
