"""The generated references: every field of the scenario reference has a description
(read from the same models the generator tables, so a new field without one fails here),
and the CLI and API references match their generator (hetsim.simulator.apidoc)."""

from __future__ import annotations

import re

import pytest

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


# ---- CLI and API references (hetsim.simulator.apidoc) -------------------------------------


def test_cli_and_api_references_are_current() -> None:
    from hetsim.simulator import apidoc

    for path, make in apidoc.pages().items():
        assert path.read_text(encoding="utf-8") == make(), (
            f"{path.name} is out of date: run python -m hetsim.simulator.apidoc")  # fmt: skip


def test_cli_reference_shows_no_value_of_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    from hetsim.simulator import apidoc, cli

    here = apidoc.cli_page()
    monkeypatch.setattr(cli, "_default_run_memory_gib", lambda: 12345.0)
    assert apidoc.cli_page() == here
    assert apidoc.MACHINE_DEFAULT in here


def test_cli_reference_has_every_subcommand_and_option() -> None:
    import argparse

    from hetsim.simulator import apidoc
    from hetsim.simulator.cli import build_parser

    page = apidoc.cli_page()
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        assert f"## `hetsim {name}`" in page
        for action in p._actions:
            for option in action.option_strings:
                assert f"`{option}`" in page, (name, option)


def test_api_reference_has_every_decision_point_and_entry_point() -> None:
    from hetsim.simulator import apidoc, registry

    page = apidoc.api_page()
    for point in registry.policies.decision_points():
        assert f"| `{point}` |" in page, point
    for name in ("hetsim.run", "hetsim.sweep", "hetsim.load_scenario", "Result", "Registry"):
        assert f"`{name}`" in page
    assert not re.search(r"0x[0-9a-f]{6,}", page)
