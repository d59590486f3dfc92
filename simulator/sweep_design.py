"""Sweep designs: which points of a scenario's parameter space to run.

A scenario's ``sweep:`` block is either the short form, a grid of dotted paths to
value lists::

    sweep:
      policies.dispatch: [fifo, least-loaded]
      workload.arrivals.rate_per_s: [2.0, 3.0]

or the long form, with a design, numeric ranges and seeds as replications::

    sweep:
      design: lhs            # grid | zip | random | lhs
      samples: 20            # points drawn by random / lhs
      sample_seed: 0         # seed of the design's own sampling
      seeds: [1, 2, 3]       # every point runs once per seed (or: replications: 3)
      parameters:
        policies.dispatch: [fifo, least-loaded]        # a list: categorical values
        workload.arrivals.rate_per_s: {low: 1.0, high: 3.6}
        workload.num_requests: {low: 100, high: 1000, integer: true, log: true}

Grid and zip take lists only; random and Latin-hypercube samples draw every range
(uniform, or log-uniform) and pick list values uniformly (LHS: stratified).
"""

from __future__ import annotations

import itertools
import math
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    NonNegativeInt,
    PositiveInt,
    Tag,
    model_validator,
)


class Range(BaseModel):
    """A numeric range ``[low, high]`` sampled by random and LHS designs."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    low: float
    high: float
    integer: bool = False
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if not self.high >= self.low:
            raise ValueError("high must be >= low")
        if self.log and self.low <= 0:
            raise ValueError("a log range needs low > 0")
        return self

    def at(self, u: float) -> float | int:
        """The value at quantile ``u`` in [0, 1)."""
        if self.log:
            value = math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        else:
            value = self.low + u * (self.high - self.low)
        return math.floor(value + 0.5) if self.integer else float(value)


def _values_kind(value: Any) -> str:
    return "list" if isinstance(value, list) else "range"


Values = Annotated[
    Annotated[list[Any], Tag("list")] | Annotated[Range, Tag("range")],
    Discriminator(_values_kind),
]


class SweepSpec(BaseModel):
    """The long form of a ``sweep:`` block (the short form converts to a grid)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    design: Literal["grid", "zip", "random", "lhs"] = "grid"
    parameters: dict[str, Values] = Field(default_factory=dict)
    samples: PositiveInt | None = None
    sample_seed: NonNegativeInt = 0
    seeds: list[NonNegativeInt] | None = None
    replications: PositiveInt | None = None

    @model_validator(mode="after")
    def _consistent(self) -> SweepSpec:
        for path, values in self.parameters.items():
            if isinstance(values, list) and not values:
                raise ValueError(f"parameter {path} needs at least one value")
            if isinstance(values, Range) and self.design in ("grid", "zip"):
                raise ValueError(f"parameter {path}: a range needs design random or lhs")
        if self.design in ("random", "lhs") and self.samples is None:
            raise ValueError(f"design {self.design} needs samples")
        if self.design == "zip":
            lengths = {len(v) for v in self.parameters.values() if isinstance(v, list)}
            if len(lengths) > 1:
                raise ValueError(f"design zip needs lists of one length, got {sorted(lengths)}")
        if self.seeds is not None and self.replications is not None:
            raise ValueError("give seeds or replications, not both")
        return self


def parse_sweep(raw: dict[str, Any]) -> SweepSpec:
    """A SweepSpec from either form of the ``sweep:`` block (ValidationError if bad)."""
    long_keys = set(SweepSpec.model_fields)
    if raw and set(raw) & long_keys:
        return SweepSpec.model_validate(raw)
    return SweepSpec.model_validate({"design": "grid", "parameters": raw})


def design_size(spec: SweepSpec) -> int:
    """How many points :func:`points` would return, without building them."""
    lists = [len(v) for v in spec.parameters.values() if isinstance(v, list)]
    if spec.design == "grid":
        base = math.prod(lists) if spec.parameters else 0
    elif spec.design == "zip":
        base = lists[0] if lists else 0
    else:
        base = spec.samples or 0
    seeds = len(spec.seeds) if spec.seeds is not None else spec.replications
    return base if seeds is None else max(base, 1) * seeds


def points(spec: SweepSpec, base_seed: int) -> list[dict[str, Any]]:
    """Every point as dotted-path overrides (``seed`` included when replicated)."""
    designs = {"grid": _grid, "zip": _zip, "random": _random, "lhs": _lhs}
    base = designs[spec.design](spec)
    seeds = _seeds(spec, base_seed)
    if seeds is None:
        return base
    return [{**p, "seed": s} for p in (base or [{}]) for s in seeds]


def _seeds(spec: SweepSpec, base_seed: int) -> list[int] | None:
    if spec.seeds is not None:
        return list(spec.seeds)
    if spec.replications is not None:
        return [base_seed + r for r in range(spec.replications)]
    return None


def _grid(spec: SweepSpec) -> list[dict[str, Any]]:
    if not spec.parameters:
        return []
    keys = list(spec.parameters)
    lists = [spec.parameters[k] for k in keys]
    return [dict(zip(keys, c, strict=True)) for c in itertools.product(*lists)]


def _zip(spec: SweepSpec) -> list[dict[str, Any]]:
    keys = list(spec.parameters)
    lists = [spec.parameters[k] for k in keys]
    return [dict(zip(keys, c, strict=True)) for c in zip(*lists, strict=True)]


def _pick(values: Values, u: float) -> Any:
    if isinstance(values, Range):
        return values.at(u)
    return values[min(int(u * len(values)), len(values) - 1)]


def _sampled(spec: SweepSpec, u: np.ndarray) -> list[dict[str, Any]]:
    """One point per row of quantiles ``u`` (samples x parameters)."""
    keys = list(spec.parameters)
    return [{k: _pick(spec.parameters[k], float(row[j])) for j, k in enumerate(keys)} for row in u]


def _random(spec: SweepSpec) -> list[dict[str, Any]]:
    assert spec.samples is not None
    rng = np.random.default_rng(spec.sample_seed)
    return _sampled(spec, rng.random((spec.samples, len(spec.parameters))))


def _lhs(spec: SweepSpec) -> list[dict[str, Any]]:
    from scipy.stats import qmc

    assert spec.samples is not None
    if not spec.parameters:
        return [{} for _ in range(spec.samples)]
    u = qmc.LatinHypercube(d=len(spec.parameters), seed=spec.sample_seed).random(spec.samples)
    return _sampled(spec, u)
