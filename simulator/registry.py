"""Registries: one per kind of thing a scenario names by string.

A registry maps a name to an entry (a class or a data record) with a one-line doc
and a parameter description. Modules fill registries with the ``register`` decorator
at import time; scenarios and the CLI look entries up by name. An unknown name raises
:class:`UnknownName`, which lists the valid names.

Registries hold only definitions (classes, frozen specs), never simulation state, so
two simulations in one process never see each other through them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownName(KeyError):
    """A name that is not in a registry; the message lists the valid names."""

    def __init__(self, kind: str, name: str, valid: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.valid = valid
        super().__init__(name)

    def __str__(self) -> str:
        return f"unknown {self.kind} {self.name!r}; valid: {', '.join(self.valid) or '(none)'}"


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered thing: its name, the object, a one-line doc, and its parameters."""

    name: str
    obj: T
    doc: str
    params: dict[str, str] = field(default_factory=dict)


def first_line(doc: str | None) -> str:
    """The first non-empty line of a docstring (or '')."""
    for line in (doc or "").strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def type_name(annotation: Any) -> str:
    """A short readable name of a type annotation (module prefixes dropped)."""
    text = str(annotation)
    if isinstance(annotation, type) and not getattr(annotation, "__args__", None):
        text = annotation.__name__
    text = re.sub(r"<class '([\w.]+)'>", r"\1", text)
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", text)


def describe_params(obj: Any) -> dict[str, str]:
    """Parameter name -> 'type = default' for a class with a pydantic/dataclass ``Params``,
    or a pydantic model or dataclass itself (anything else: no parameters)."""
    params = getattr(obj, "Params", None) or obj
    fields = getattr(params, "model_fields", None)
    if fields is not None:
        out = {}
        for name, f in fields.items():
            ann = type_name(f.annotation)
            if f.is_required():
                default = "required"
            elif f.default_factory is not None:
                default = repr(f.default_factory())
            else:
                default = repr(f.default)
            out[name] = f"{ann} = {default}"
        return out
    if dataclasses.is_dataclass(params) and isinstance(params, type):
        out = {}
        for f in dataclasses.fields(params):
            ann = type_name(f.type)
            if f.default is not dataclasses.MISSING:
                out[f.name] = f"{ann} = {f.default!r}"
            else:
                out[f.name] = f"{ann}"
        return out
    return {}


class Registry(Generic[T]):
    """A named table of entries of one kind (device types, models, workloads, ...)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def add(
        self, name: str, obj: T, doc: str | None = None, params: dict[str, str] | None = None
    ) -> T:
        """Register ``obj`` under ``name``; a second registration of one name is an error."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = Entry(
            name=name,
            obj=obj,
            doc=first_line(doc if doc is not None else getattr(obj, "__doc__", None)),
            params=params if params is not None else describe_params(obj),
        )
        return obj

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of :meth:`add`."""

        def deco(obj: T) -> T:
            return self.add(name, obj)

        return deco

    def get(self, name: str) -> T:
        """The object registered under ``name``; :class:`UnknownName` if none."""
        return self.entry(name).obj

    def entry(self, name: str) -> Entry[T]:
        """The entry registered under ``name``; :class:`UnknownName` if none."""
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownName(self.kind, name, self.names()) from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries[n] for n in self.names())

    def __len__(self) -> int:
        return len(self._entries)


class PolicyRegistry:
    """Policies, one :class:`Registry` per decision point (e.g. ``queueing.dispatch``)."""

    def __init__(self) -> None:
        self._points: dict[str, Registry[Any]] = {}

    def point(self, decision_point: str) -> Registry[Any]:
        """The registry of one decision point (created on first use)."""
        if decision_point not in self._points:
            self._points[decision_point] = Registry(f"policy for {decision_point}")
        return self._points[decision_point]

    def register(self, decision_point: str, name: str) -> Callable[[T], T]:
        """Decorator: register a policy class for a decision point under a name."""
        return self.point(decision_point).register(name)

    def get(self, decision_point: str, name: str) -> Any:
        """The policy class named ``name`` at ``decision_point``."""
        return self.point(decision_point).get(name)

    def decision_points(self) -> list[str]:
        """Every decision point that has at least one policy, sorted."""
        return sorted(p for p, r in self._points.items() if len(r))


device_types: Registry[Any] = Registry("device type")
link_types: Registry[Any] = Registry("link type")
fabrics: Registry[Any] = Registry("collective fabric")
models: Registry[Any] = Registry("model")
workloads: Registry[Any] = Registry("workload kind")
policies = PolicyRegistry()
