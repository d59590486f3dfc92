"""Errors a user can cause, reported as one line naming the file and the field."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pydantic loads with the scenario schema, not with the error types
    from pydantic import ValidationError


class ScenarioError(Exception):
    """Bad input in a scenario file: ``FILE: field.path: message``."""

    def __init__(self, file: str, field: str, message: str) -> None:
        self.file = file
        self.field = _short(field)
        self.message = _short(message)
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.field}: " if self.field else ""
        return f"{self.file}: {where}{self.message}"


def dotted(loc: Sequence[int | str]) -> str:
    """A pydantic error location as a dotted path (list indices as ``[i]``)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def user_loc(loc: Sequence[int | str], data: Any, missing: bool = False) -> list[int | str]:
    """The error location as the user wrote it.

    pydantic inserts union-member labels into locations (a discriminator value such as
    ``poisson``, a type such as ``int``); walking the input drops every part that is not
    a key or index of it. With ``missing``, the last part (the missing key) is kept.
    """
    out: list[int | str] = []
    node = data
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, dict):
            if part in node:
                out.append(part)
                node = node[part]
            elif missing and last:
                out.append(part)  # a missing key
            continue
        if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
    return out


def _models_in(annotation: Any) -> list[Any]:
    """The pydantic model classes an annotation holds (through Optional, unions,
    Annotated, lists and dict values)."""
    from typing import get_args

    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return [annotation]
    out: list[Any] = []
    for arg in get_args(annotation):
        out += _models_in(arg)
    return out


def valid_keys(model: Any, loc: Sequence[int | str]) -> list[str]:
    """The field names valid where pydantic's error location ``loc`` ends (the keys of
    the mapping that holds the last part); [] when the walk loses the model."""
    models = _models_in(model)
    for part in loc[:-1]:
        if isinstance(part, int) or not models:
            continue  # a list index: the same item models
        nxt = [m2 for m in models if part in m.model_fields
               for m2 in _models_in(m.model_fields[part].annotation)]  # fmt: skip
        if nxt:
            models = nxt
        elif not any(part in m.model_fields for m in models):
            named = [m for m in models if m.__name__ == part]
            models = named or models  # a union label: stay on the union's members
        else:
            return []  # a plain field (a dict of scalars): no model to list
    return sorted({f for m in models for f in m.model_fields})


def from_validation(
    file: str, prefix: str, err: ValidationError, data: Any = None, model: Any = None
) -> ScenarioError:
    """The first error of a pydantic ValidationError as a ScenarioError.

    ``data`` is the validated input, used to drop pydantic's union labels from the path;
    ``model``: the model validated, so that an unknown key gets the closest valid one.
    """
    first = err.errors()[0]
    missing = first["type"] == "missing"
    loc = user_loc(first["loc"], data, missing) if data is not None else list(first["loc"])
    field = ".".join(p for p in (prefix, dotted(loc)) if p).replace(".[", "[")
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
        valid = valid_keys(model, first["loc"]) if model is not None else []
        if valid:
            from hetsim.simulator.registry import did_you_mean

            msg += f";{did_you_mean(str(first['loc'][-1]), valid)} valid: {', '.join(valid)}"
    elif first["type"] == "missing":
        msg = "required field is missing"
    elif first["type"] == "union_tag_invalid":
        ctx = first.get("ctx", {})
        msg = f"unknown kind {ctx.get('tag')!r}; valid: {ctx.get('expected_tags')}"
    msg = msg.replace("Value error, ", "")
    more = len(err.errors()) - 1
    if more:
        msg += f" (and {more} more error{'s' if more > 1 else ''})"
    return ScenarioError(file, field, msg)


class TraceError(ValueError):
    """One bad place in a trace file: ``FILE:LINE: column C: message``."""

    def __init__(self, path: object, line: int, column: str, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.column = _short(column)
        self.message = _short(message)
        super().__init__(f"{self.path}:{line}: column {self.column}: {self.message}")


MAX_MESSAGE_CHARS = 500


def _short(text: str) -> str:
    """``text`` on one line, cut to :data:`MAX_MESSAGE_CHARS` (a hostile value can be
    megabytes long)."""
    flat = " ".join(str(text).split("\n"))
    return flat if len(flat) <= MAX_MESSAGE_CHARS else flat[: MAX_MESSAGE_CHARS - 3] + "..."


class FieldError(ValueError):
    """A scenario field whose value only building the scenario can check (a policy
    parameter against the model it is given): the dotted field and the message; the
    run reports it as ``FILE: field: message`` (exit 2)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class InvariantViolation(RuntimeError):
    """A run broke one of its own invariants (lost work, memory over capacity, ...).
    Defined here (no heavy imports) so the command line can name it without loading the
    engine; :mod:`hetsim.simulator.engine` re-exports it."""
