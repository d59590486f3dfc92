"""The generated references: every field of the scenario reference has a description
(read from the same models the generator tables, so a new field without one fails here),
and the CLI and API references match their generator (hetsim.simulator.apidoc)."""

from __future__ import annotations

import re
import typing

import pytest
from pydantic import BaseModel

from hetsim.simulator.reference import _source_notes, field_rows, reference_models, reference_page
from hetsim.simulator.registry import first_line


def test_every_reference_field_has_a_description() -> None:
    missing = [f"{section}: {row.path}"
               for section, model in reference_models()
               for row in field_rows(model) if not row.doc.strip()]  # fmt: skip
    assert not missing, (f"{len(missing)} scenario fields have no description "
                         "(give each a Field(description=...)):\n" + "\n".join(missing))  # fmt: skip


def _models_in(annotation: object) -> list[type[BaseModel]]:
    """Every pydantic model inside an annotation (lists, dicts, unions, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def test_every_nested_scenario_model_field_has_a_description() -> None:
    """Models the reference does not expand (items of lists and dicts, members of
    unions: node devices, length laws, job sources...) are validated scenario input too."""
    seen: set[type[BaseModel]] = set()
    missing: list[str] = []

    def walk(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        notes = _source_notes(model)
        for name, info in model.model_fields.items():
            nested = _models_in(info.annotation)
            doc = info.description or notes.get(name, "")
            if not doc and len(nested) == 1:
                doc = first_line(nested[0].__doc__)
            if not doc.strip():
                missing.append(f"{model.__module__}.{model.__qualname__}.{name}")
            for m in nested:
                walk(m)

    for _, obj in reference_models():
        params = getattr(obj, "Params", None) or obj
        if isinstance(params, type) and issubclass(params, BaseModel):
            walk(params)
    assert len(seen) > 100
    assert not missing, f"{len(missing)} fields without a description:\n" + "\n".join(missing)


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
