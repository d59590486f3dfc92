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
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")


class UnknownName(KeyError):
    """A name that is not in a registry; the message lists the valid names."""

    def __init__(self, kind: str, name: str, valid: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.valid = valid
        super().__init__(name)

    def __str__(self) -> str:
        hint = did_you_mean(self.name, self.valid)
        valid = ", ".join(self.valid) or "(none)"
        return f"unknown {self.kind} {self.name!r};{hint} valid: {valid}"


def did_you_mean(name: str, valid: list[str]) -> str:
    """`` did you mean 'x'?`` for the closest valid name (difflib ratio >= 0.6), else ''."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(v) for v in valid], n=1, cutoff=0.6)
    return f" did you mean {close[0]!r}?" if close else ""


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


class Loader(Protocol):
    """Fills a registry on demand (lazy discovery, :mod:`simulator.discovery`): ``load``
    imports what registers one name (then, if it is still missing, everything);
    ``load_all`` imports everything. Both are idempotent."""

    def load(self, name: str) -> None:
        """Make ``name`` registered if any discoverable module registers it."""

    def load_all(self) -> None:
        """Register everything discoverable."""


class Registry(Generic[T]):
    """A named table of entries of one kind (device types, models, workloads, ...)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}
        self.loader: Loader | None = None

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
        entry = self._entries.get(name)
        if entry is None and self.loader is not None:
            self.loader.load(name)
            entry = self._entries.get(name)
        if entry is None:
            raise UnknownName(self.kind, name, self.names())
        return entry

    def names(self) -> list[str]:
        """Registered names, sorted (every lazily discovered module is loaded first)."""
        if self.loader is not None:
            self.loader.load_all()
        return sorted(self._entries)

    def loaded(self) -> list[Entry[T]]:
        """Entries registered so far, sorted by name (no discovery: for reverse look-ups
        of objects whose module is already imported)."""
        return [self._entries[n] for n in sorted(self._entries)]

    def registered(self, name: str) -> bool:
        """Whether ``name`` is registered so far (no discovery: for idempotent
        registration code)."""
        return name in self._entries

    def __contains__(self, name: object) -> bool:
        if name not in self._entries and self.loader is not None and isinstance(name, str):
            self.loader.load(name)
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter([self._entries[n] for n in self.names()])

    def __len__(self) -> int:
        if self.loader is not None:
            self.loader.load_all()
        return len(self._entries)


class PolicyRegistry:
    """Policies, one :class:`Registry` per decision point (e.g. ``queueing.dispatch``)."""

    def __init__(self) -> None:
        self._points: dict[str, Registry[Any]] = {}
        self.loader_for: Callable[[str], Loader] | None = None

    def point(self, decision_point: str) -> Registry[Any]:
        """The registry of one decision point (created on first use)."""
        if decision_point not in self._points:
            reg: Registry[Any] = Registry(f"policy for {decision_point}")
            if self.loader_for is not None:
                reg.loader = self.loader_for(decision_point)
            self._points[decision_point] = reg
        return self._points[decision_point]

    def set_loader(self, loader_for: Callable[[str], Loader]) -> None:
        """Lazy discovery: ``loader_for(decision_point)`` fills that point's registry."""
        self.loader_for = loader_for
        for point, reg in self._points.items():
            reg.loader = loader_for(point)

    def register(self, decision_point: str, name: str) -> Callable[[T], T]:
        """Decorator: register a policy class for a decision point under a name."""
        return self.point(decision_point).register(name)

    def get(self, decision_point: str, name: str) -> Any:
        """The policy class named ``name`` at ``decision_point``."""
        return self.point(decision_point).get(name)

    def decision_points(self) -> list[str]:
        """Every decision point that has at least one policy, sorted."""
        if self.loader_for is not None:
            self.loader_for("").load_all()
        return sorted(p for p, r in self._points.items() if len(r))


device_types: Registry[Any] = Registry("device type")
link_types: Registry[Any] = Registry("link type")
fabrics: Registry[Any] = Registry("collective fabric")
models: Registry[Any] = Registry("model")
workloads: Registry[Any] = Registry("workload kind")
policies = PolicyRegistry()
