"""The boundary for untrusted input: scenario text, overrides, trace files.

Everything a user hands hetsim is read here, with limits, before any model sees it:

* files: only regular files are read (never a FIFO, which would block, or a device
  such as ``/dev/zero``, which never ends): scenario text of at most
  :data:`MAX_FILE_BYTES`, data files a scenario names of at most
  :data:`MAX_DATA_FILE_BYTES` (:func:`data_file_problem`);
* text: strict UTF-8 (the offending byte is named);
* YAML: duplicate keys refused, nesting at most :data:`MAX_DEPTH` deep, integers of at
  most :data:`MAX_INT_DIGITS` digits, lists and mappings of at most
  :data:`MAX_LIST_ITEMS` entries and :data:`MAX_NODES` values in all, each refused
  while the text is parsed, before it is all read (a position names each problem);
* parsed values (:func:`check_tree`): at most :data:`MAX_NODES` values (YAML aliases
  count every time they expand), strings of at most :data:`MAX_STRING_CHARS`, no NaN or
  infinity, integers within 64 bits -- each problem as ``field.path: message``;
* trace rows: JSON with the same limits (:func:`json_value`), CSV fields of at most
  :data:`MAX_FIELD_CHARS` (:func:`csv_field_limit`), errors as :class:`TraceError`.
"""

from __future__ import annotations

import csv
import json
import math
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from hetsim.simulator.errors import ScenarioError, TraceError

MAX_FILE_BYTES = 64 << 20
MAX_DATA_FILE_BYTES = 2 << 30
"""A trace or table a scenario names: at most 2 GiB (the largest public trace hetsim
reads, Alibaba's cluster-trace-gpu-v2023, is well under this)."""
MAX_DEPTH = 64
MAX_NODES = 1_000_000
MAX_LIST_ITEMS = 10_000
"""Entries of one YAML list or mapping in a scenario (the default sweep size): a longer
list belongs in a data file, a sweep of more points in a sampled design."""
MAX_STRING_CHARS = 1 << 20
MAX_INT_DIGITS = 30
MAX_FIELD_CHARS = 64 << 10
INT64_MAX = 2**63 - 1


class InputRefused(yaml.MarkedYAMLError):
    """A YAML document hetsim refuses (duplicate key, too deep, too long a number)."""


class SafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate keys, deep nesting and huge integers."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        self._nodes += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise InputRefused(problem=f"nested more than {MAX_DEPTH} levels deep",
                                   problem_mark=mark)  # fmt: skip
            if self._nodes > MAX_NODES:
                raise InputRefused(problem=f"more than {MAX_NODES} values",
                                   problem_mark=self.peek_event().start_mark)  # fmt: skip
            if isinstance(parent, SequenceNode | MappingNode) and (
                len(parent.value) >= MAX_LIST_ITEMS
            ):
                what = "list" if isinstance(parent, SequenceNode) else "mapping"
                raise InputRefused(
                    problem=f"a {what} of more than {MAX_LIST_ITEMS} entries (a longer one "
                    "belongs in a data file; a larger sweep in a sampled design)",
                    problem_mark=parent.start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # an unhashable key: the base class reports it
            if duplicate:
                raise InputRefused(problem=f"duplicate key {key!r}",
                                   problem_mark=key_node.start_mark)  # fmt: skip
        return super().construct_mapping(node, deep=deep)


def _construct_int(loader: SafeLoader, node: Node) -> Any:
    digits = sum(c.isalnum() for c in str(node.value))
    if digits > MAX_INT_DIGITS:
        raise InputRefused(problem=f"an integer of {digits} digits is out of range",
                           problem_mark=node.start_mark)  # fmt: skip
    return yaml.SafeLoader.construct_yaml_int(loader, node)  # type: ignore[arg-type]


SafeLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def data_file_problem(path: Path, limit: int = MAX_DATA_FILE_BYTES) -> str | None:
    """Why ``path`` cannot be read as a data file (None: it can): it must be a regular
    file (a link to one is fine) of at most ``limit`` bytes."""
    try:
        st = os.stat(path)
    except OSError as e:
        return f"cannot read: {e.strerror}"
    except ValueError:
        return "not a usable path (a NUL byte)"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a FIFO, a device or a folder); hetsim reads only files"
    if st.st_size > limit:
        return f"larger than {limit >> 20} MiB"
    return None


def read_limited(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (OSError otherwise, ValueError for a NUL
    byte), at most ``limit + 1`` of them; a FIFO or device is never read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IsADirectoryError(0, "not a regular file (a FIFO, a device or a folder)")
        return f.read(limit + 1)


def read_text(path: Path, file: str | None = None) -> str:
    """A file's text: a regular file of at most :data:`MAX_FILE_BYTES`, strict UTF-8
    (ScenarioError)."""
    name = file or str(path)
    try:
        data = read_limited(path, MAX_FILE_BYTES)
    except OSError as e:
        raise ScenarioError(name, "", f"cannot read file: {e.strerror}") from None
    except ValueError as e:  # a NUL byte in the path
        raise ScenarioError(repr(name), "", f"cannot read file: {e}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ScenarioError(name, "", f"file larger than {MAX_FILE_BYTES >> 20} MiB")
    return decode(data, name)


def decode(data: bytes, name: str) -> str:
    """``data`` as UTF-8 text; a bad byte is named with its line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ScenarioError(
            name, "", f"line {line}, column {column}: not UTF-8 text (byte 0x{data[e.start]:02x})"
        ) from None


def yaml_value(text: str, name: str) -> Any:
    """Parse YAML text with :class:`SafeLoader`; problems become one ScenarioError."""
    try:
        return yaml.load(text, Loader=SafeLoader)
    except InputRefused as e:
        mark = e.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ScenarioError(name, "", f"{where}{e.problem}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ScenarioError(name, "", f"{where}YAML syntax error: {problem}") from None
    except (RecursionError, MemoryError):
        raise ScenarioError(name, "", "nested too deeply or too large to read") from None


def _path(parts: list[Any]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else ("." if out else "") + str(p)
    return out


def value_problem(value: Any) -> str | None:
    """Why a single parsed value is refused (None if it is fine)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX:
        return "integer out of range (more than 64 bits)"
    if isinstance(value, str):
        if len(value) > MAX_STRING_CHARS:
            return f"string longer than {MAX_STRING_CHARS} characters"
        if len(value) <= 64 and value.strip()[:1] in NUMBER_STARTS:
            return _numeric_text_problem(value)
    return None


NUMBER_STARTS = frozenset("+-.0123456789iInN")


def _numeric_text_problem(text: str) -> str | None:
    """A string a schema would read as a number (``"1e999"``, ``"inf"``): refuse it when
    that number is not finite or past 64 bits, as if it had been written as one."""
    try:
        number = float(text)
    except ValueError:
        return None
    if not math.isfinite(number):
        return f"must be a finite number, got {text!r}"
    try:
        whole = int(text.strip().replace("_", ""))
    except ValueError:
        return None
    return value_problem(whole)


def check_tree(data: Any, file: str, prefix: str = "") -> None:
    """Refuse a parsed document that is too deep or large, or holds a non-finite number,
    an integer beyond 64 bits or a huge string (ScenarioError naming the field)."""
    stack: list[tuple[Any, list[Any]]] = [(data, [prefix] if prefix else [])]
    count = 0
    while stack:
        node, where = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise ScenarioError(file, "", f"more than {MAX_NODES} values (YAML aliases count "
                                          "each time they are used)")  # fmt: skip
        if len(where) > MAX_DEPTH + 1:
            raise ScenarioError(file, _path(where[:MAX_DEPTH]), f"nested more than {MAX_DEPTH} "
                                "levels deep")  # fmt: skip
        if isinstance(node, dict | list | tuple) and len(node) > MAX_LIST_ITEMS:
            raise ScenarioError(file, _path(where), f"more than {MAX_LIST_ITEMS} entries (a "
                                "longer list belongs in a data file; a larger sweep in a "
                                "sampled design)")  # fmt: skip
        if isinstance(node, dict):
            for key, value in node.items():
                problem = value_problem(key)
                if problem:
                    raise ScenarioError(file, _path(where), f"a key: {problem}")
                stack.append((value, [*where, key]))
        elif isinstance(node, list | tuple):
            for i, value in enumerate(node):
                stack.append((value, [*where, i]))
        else:
            problem = value_problem(node)
            if problem:
                raise ScenarioError(file, _path(where), problem)


# ---- traces -----------------------------------------------------------------------------
def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number here")


def json_value(text: str, path: Path, line: int) -> Any:
    """One JSON document (a trace line): NaN/Infinity, 1e999, integers past 64 bits and
    nesting deeper than :data:`MAX_DEPTH` become a :class:`TraceError`."""

    def big_float(s: str) -> float:
        v = float(s)
        if not math.isfinite(v):
            raise ValueError(f"{s} is out of range")
        return v

    def int_ok(s: str) -> int:
        if len(s) > MAX_INT_DIGITS:
            raise ValueError(f"an integer of {len(s)} digits is out of range")
        return int(s)

    depth = opened = 0
    for ch in text:  # the nesting is bounded before json's recursive parser sees it
        if ch in "[{":
            opened += 1
            depth = max(depth, opened)
        elif ch in "]}":
            opened -= 1
    if depth > MAX_DEPTH:
        raise TraceError(path, line, "-", f"nested more than {MAX_DEPTH} levels deep")
    try:
        return json.loads(text, parse_float=big_float, parse_int=int_ok,
                          parse_constant=_refuse_constant)  # fmt: skip
    except (ValueError, RecursionError) as e:
        raise TraceError(path, line, "-", f"not valid JSON: {e}") from None


@contextmanager
def csv_field_limit() -> Iterator[None]:
    """Within: the csv module refuses fields over :data:`MAX_FIELD_CHARS` (csv.Error)."""
    old = csv.field_size_limit(MAX_FIELD_CHARS)
    try:
        yield
    finally:
        csv.field_size_limit(old)
