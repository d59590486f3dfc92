"""The scenario reference: every field of a scenario file with its type, default, unit
and doc, read from the pydantic models that validate it.

``python -m hetsim.simulator.reference`` writes ``docs/scenario-reference.md`` and
``docs/scenario.schema.json`` (a JSON Schema editors can use for completion);
``--check`` exits 1 when either is out of date (a test runs it). ``hetsim list
workloads`` and ``hetsim list policies`` print the same rows.

A field's doc is its ``Field(description=...)``, else the string literal right below it
in the class body, else its trailing ``#`` comment, else the first line of its nested
model's docstring. Defaults are shown as JSON (never a Python repr, a function address
or a path of this machine).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
import textwrap
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from hetsim.simulator import registry
from hetsim.simulator.registry import first_line, type_name
from hetsim.simulator.units import metric_info

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGE = DOCS / "scenario-reference.md"
SCHEMA = DOCS / "scenario.schema.json"
MAX_DEPTH = 4


@dataclass(frozen=True)
class FieldRow:
    """One field of a parameter model: dotted path, type, default, unit, doc."""

    path: str
    type: str
    default: str
    unit: str
    doc: str


@cache
def _source_notes(cls: type) -> dict[str, str]:
    """Field name -> the string literal below it or its trailing comment, from source."""
    try:
        lines, _ = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return {}
    source = textwrap.dedent("".join(lines))
    try:
        body = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return {}
    text_lines = source.splitlines()
    out: dict[str, str] = {}
    stmts = getattr(body, "body", [])
    for i, node in enumerate(stmts):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        nxt = stmts[i + 1] if i + 1 < len(stmts) else None
        value = getattr(nxt, "value", None) if isinstance(nxt, ast.Expr) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            out[node.target.id] = " ".join(value.value.split())
            continue
        line = text_lines[(node.end_lineno or node.lineno) - 1]
        if "#" in line and "fmt:" not in line.split("#", 1)[1]:
            out[node.target.id] = line.split("#", 1)[1].strip()
    return out


def _plain(value: Any) -> Any:
    """A default as plain JSON data."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return value.name
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if callable(value):
        return getattr(value, "__name__", type(value).__name__)
    return str(value)


BOUNDS = {"Gt": ">", "Ge": ">=", "Lt": "<", "Le": "<="}


def _type_text(annotation: Any) -> str:
    """A readable type: ``float > 0`` for ``Annotated[float, Gt(gt=0)]``, validators by
    name (no function addresses)."""
    text = type_name(annotation)
    text = re.sub(r"<function ([\w.]+) at 0x[0-9a-f]+>", r"\1", text)
    text = re.sub(r"AfterValidator\(func=([\w.]+)\)", r"checked by \1", text)
    text = re.sub(r", FieldInfo\([^()]*\)\]", "]", text)  # a discriminator's FieldInfo
    text = re.sub(r"Annotated\[(\w+), ((?:(?:Gt|Ge|Lt|Le)\(\w+=[^)]*\)(?:, )?){2,})\]",
                  _bounded, text)  # fmt: skip
    for name, op in BOUNDS.items():
        text = re.sub(rf"Annotated\[(\w+), {name}\(\w+=([^)]*)\)\]", rf"\1 {op} \2", text)
    text = re.sub(r"Annotated\[([^\[\]]*), checked by (\w+)\]", r"\1 (checked by \2)", text)
    text = re.sub(r"Annotated\[([^\[\]]*)\]", r"\1", text)
    text = re.sub(r"Optional\[(.*)\]$", r"\1 | None", text)
    return text


def _bounded(m: re.Match[str]) -> str:
    """``float >= 0, <= 1e+09`` for ``Annotated[float, Ge(ge=0), Le(le=1e9)]``."""
    parts = re.findall(r"(Gt|Ge|Lt|Le)\(\w+=([^)]*)\)", m.group(2))
    return m.group(1) + " " + ", ".join(f"{BOUNDS[k]} {_number(v)}" for k, v in parts)


def _number(text: str) -> str:
    """``1e+09`` for ``1000000000.0`` (a maximum of :mod:`simulator.limits`); other
    text as it is."""
    try:
        value = float(text)
    except ValueError:
        return text
    return f"{value:g}" if abs(value) >= 1e6 else text


def _bounds(metadata: list[Any]) -> str:
    """`` >= 0`` etc. for the numeric bounds pydantic keeps beside the type."""
    out = []
    for item in metadata:
        for attr, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            value = getattr(item, attr, None)
            if value is not None and type(item).__name__ in ("Gt", "Ge", "Lt", "Le", "Interval"):
                out.append(f"{op} {_number(str(value))}")
    return (" " + ", ".join(out)) if out else ""


def _default(info: Any) -> str:
    if info.is_required():
        return "required"
    value = info.default_factory() if info.default_factory is not None else info.default
    text = json.dumps(_plain(value), sort_keys=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The one BaseModel in an annotation (``X``, ``X | None``), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation)
                  if isinstance(a, type) and issubclass(a, BaseModel)]  # fmt: skip
        others = [a for a in typing.get_args(annotation) if a is not type(None)]
        return models[0] if len(models) == 1 and len(others) == 1 else None
    return None


def field_rows(model: Any, prefix: str = "", depth: int = 0) -> list[FieldRow]:
    """Every field of ``model`` (a pydantic model class, or a class with ``Params``),
    nested models expanded with dotted paths."""
    params = getattr(model, "Params", None) or model
    fields = getattr(params, "model_fields", None)
    if not fields:
        return []
    notes = _source_notes(params)
    rows: list[FieldRow] = []
    for name, info in fields.items():
        path = f"{prefix}{name}"
        nested = _nested_model(info.annotation)
        doc = info.description or notes.get(name, "")
        if not doc and nested is not None:
            doc = first_line(nested.__doc__)
        unit = metric_info(name).unit
        unit = "" if unit == "fraction" else unit
        text = " ".join(doc.split())
        kind = _type_text(info.annotation) + _bounds(info.metadata)
        rows.append(FieldRow(path, kind, _default(info), unit, text))
        if nested is not None and depth < MAX_DEPTH:
            rows += field_rows(nested, f"{path}.", depth + 1)
    return rows


def format_rows(rows: list[FieldRow], indent: str = "    ") -> list[str]:
    """Rows as text lines: ``path: type = default [unit]`` and the doc below."""
    out = []
    for r in rows:
        unit = f" [{r.unit}]" if r.unit else ""
        out.append(f"{indent}{r.path}: {r.type} = {r.default}{unit}")
        out += textwrap.wrap(r.doc, 96, initial_indent=indent + "    ",
                             subsequent_indent=indent + "    ")  # fmt: skip
    return out


def _md_table(rows: list[FieldRow]) -> list[str]:
    if not rows:
        return ["No parameters.", ""]
    out = ["| field | type | default | unit | description |", "|---|---|---|---|---|"]
    for r in rows:
        cells = [f"`{r.path}`", f"`{r.type}`", f"`{r.default}`", r.unit, r.doc]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return [*out, ""]


def _shipped(entries: Iterable[registry.Entry[Any]]) -> list[registry.Entry[Any]]:
    """Entries hetsim itself defines (a plugin loaded in this process is left out, so
    the generated files do not depend on what ran before)."""
    return [e for e in entries if getattr(e.obj, "__module__", "").startswith("hetsim.")]


def reference_models() -> list[tuple[str, Any]]:
    """Every model the reference tables, as (section, model): the top level, the
    cluster, each shipped workload kind and each shipped policy per decision point (the
    same list :func:`reference_page` writes; a test checks every row has a doc)."""
    from hetsim.devices.cluster import ClusterConfig
    from hetsim.simulator.plugins import load_plugins
    from hetsim.simulator.scenario import ScenarioModel
    from hetsim.workloads.colocate.faults import FaultsConfig

    load_plugins()
    out: list[tuple[str, Any]] = [("top level", ScenarioModel), ("cluster", ClusterConfig),
                                  ("faults", FaultsConfig)]  # fmt: skip
    out += [(f"workload kind {e.name}", e.obj) for e in _shipped(registry.workloads)]
    for point in registry.policies.decision_points():
        out += [(f"policy {point}: {e.name}", e.obj)
                for e in _shipped(registry.policies.point(point))]  # fmt: skip
    return out


def reference_page() -> str:
    """The scenario reference as Markdown."""
    from hetsim.devices.cluster import ClusterConfig
    from hetsim.simulator.plugins import load_plugins
    from hetsim.simulator.scenario import ScenarioModel
    from hetsim.workloads.colocate.faults import FaultsConfig

    load_plugins()
    lines = [
        "# Scenario reference",
        "",
        "Every field of a scenario file, with its type, default, unit and description.",
        "Generated by `python -m hetsim.simulator.reference` from the models that",
        "validate scenarios (a test keeps it current); do not edit by hand. The same rows:",
        "`hetsim list workloads`, `hetsim list policies`. JSON Schema for editors:",
        "[scenario.schema.json](scenario.schema.json).",
        "",
        "## Top level",
        "",
        *_md_table(field_rows(ScenarioModel)),
        "## `cluster`",
        "",
        *_md_table(field_rows(ClusterConfig)),
        "## `faults` (with `workloads:`)",
        "",
        *_md_table(field_rows(FaultsConfig)),
        "## `workload` (by `kind`)",
        "",
    ]
    for entry in _shipped(registry.workloads):
        lines += [f"### `kind: {entry.name}`", "", entry.doc, ""]
        lines += _md_table(field_rows(entry.obj))
        points = getattr(entry.obj, "decision_points", {})
        if points:
            listed = ", ".join(f"`{p}` (default `{d}`)" for p, d in points.items())
            lines += [f"Decision points (`policies:`): {listed}.", ""]
    lines += ["## `policies` (by decision point)", "",
              "A policy is named (`dispatch: fifo`) or given with parameters "
              "(`dispatch: {name: fifo, ...}`; an optional `label` names it in tables and "
              "plots).", ""]  # fmt: skip
    for point in registry.policies.decision_points():
        lines += [f"### `{point}`", ""]
        for e in _shipped(registry.policies.point(point)):
            lines += [f"#### `{e.name}`", "", e.doc, "", *_md_table(field_rows(e.obj))]
    return "\n".join(lines).rstrip("\n") + "\n"


def scenario_schema() -> dict[str, Any]:
    """A JSON Schema of scenario files: the top level, the cluster, and the workload as
    one of the registered kinds (policies stay free-form: they depend on the kind)."""
    from hetsim.devices.cluster import ClusterConfig
    from hetsim.simulator.plugins import load_plugins
    from hetsim.simulator.scenario import ScenarioModel

    load_plugins()
    schema = ScenarioModel.model_json_schema()
    defs = schema.setdefault("$defs", {})
    cluster = ClusterConfig.model_json_schema(ref_template="#/$defs/{model}")
    defs.update(cluster.pop("$defs", {}))
    defs["ClusterConfig"] = cluster
    schema["properties"]["cluster"] = {"$ref": "#/$defs/ClusterConfig"}
    kinds = []
    for entry in _shipped(registry.workloads):
        params = getattr(entry.obj, "Params", None)
        if params is None:
            continue
        try:
            sub = params.model_json_schema(ref_template="#/$defs/{model}")
        except Exception:  # a type JSON Schema cannot express: leave the kind out
            continue
        defs.update(sub.pop("$defs", {}))
        sub.setdefault("properties", {})["kind"] = {"const": entry.name}
        sub["required"] = sorted({*sub.get("required", []), "kind"})
        name = f"workload_{entry.name}"
        defs[name] = sub
        kinds.append({"$ref": f"#/$defs/{name}"})
    schema["properties"]["workload"] = {"oneOf": kinds}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "hetsim scenario"
    return schema


def schema_text() -> str:
    """The schema as the committed file's text."""
    return json.dumps(scenario_schema(), indent=1, sort_keys=True, default=str) + "\n"


def write_pages(wanted: dict[Path, str], module: str) -> int:
    """Write generated pages (path -> text); with ``--check`` on the command line write
    nothing and exit 1 naming each page that differs (``module`` regenerates them)."""
    if "--check" in sys.argv[1:]:
        stale = [p.name for p, text in wanted.items()
                 if not p.exists() or p.read_text(encoding="utf-8") != text]  # fmt: skip
        for name in stale:
            print(f"{name} is out of date: run python -m {module}", file=sys.stderr)
        return 1 if stale else 0
    for path, text in wanted.items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.name}")
    return 0


def main() -> int:
    """Write the page and the schema (``--check``: exit 1 if either is out of date)."""
    return write_pages(
        {PAGE: reference_page(), SCHEMA: schema_text()}, "hetsim.simulator.reference"
    )


if __name__ == "__main__":
    sys.exit(main())
