"""Shared rules of the serving scaling policies: the load signal, which unit to add
and which unit to drain (RECONSTRUCTION of Cauchy's autoscaler,
``../shared/papers/serving.md`` §1.2 step 9)."""

from __future__ import annotations

import math
from typing import Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from hetsim.schedulers.serving.deploy_cauchy import CauchyParams, combos, gpus, unit
from hetsim.simulator.limits import PositiveSeconds
from hetsim.workloads.serving.view import InstanceSpec, ScaleView, UnitView


class ThresholdParams(BaseModel):
    """Constants every utilisation-threshold scaler shares: ``period_s`` (how often it
    decides), ``window_s`` (rate window), ``upper``/``lower`` utilisation thresholds,
    ``min_units`` (units never drained below), ``pd_ratios`` (prefill:decode ratios of
    the combos it may add)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    period_s: PositiveSeconds = Field(
        default=30.0, description="Seconds between scaling decisions (Cauchy's delta: 30-60 s)."
    )
    window_s: PositiveSeconds = Field(
        default=60.0, description="Seconds of arrivals over which the measured rate is taken."
    )
    upper: PositiveFloat = Field(
        default=0.9,
        description="Utilisation (measured rate / summed goodput "
        "estimates) above which a unit is added.",
    )
    lower: NonNegativeFloat = Field(
        default=0.5,
        description="Utilisation below which a unit is drained (if "
        "the rest keeps it at or below upper).",
    )
    min_units: PositiveInt = Field(default=1, description="Active units never drained below.")
    pd_ratios: list[tuple[PositiveInt, PositiveInt]] = Field(
        default_factory=lambda: [(1, 1), (1, 2), (2, 1), (1, 3), (1, 4)],
        description="Prefill:decode instance ratios of the combos a "
        "disaggregated scale-out may add.",
    )

    @model_validator(mode="after")
    def _band(self) -> Self:
        if not self.lower < self.upper:
            raise ValueError(f"lower ({self.lower}) must be below upper ({self.upper})")
        return self


def utilisation(view: ScaleView) -> float:
    """``u = rate / capacity``: measured arrivals over the window divided by the summed
    goodput estimates of the warming and active units (inf with no capacity)."""
    if view.capacity_rps <= 0:
        return math.inf
    return view.rate_per_s / view.capacity_rps


def unit_to_add(view: ScaleView, pd_ratios: list[tuple[int, int]]) -> tuple[InstanceSpec, ...]:
    """The best unit that fits the free GPUs: under disaggregation the combo with the
    highest estimated Tokens/USD (Cauchy's ranking, :func:`combos`), otherwise one
    colocated instance of the config with the most estimated goodput per dollar;
    () when nothing fits."""
    free = dict(view.deployment.available)
    if view.disaggregated:
        for k in combos(view.deployment, CauchyParams(pd_ratios=pd_ratios)):
            types = {k.prefill.gpu_type, k.decode.gpu_type}
            if all(gpus(k, t) <= free.get(t, 0) for t in types):
                return unit(k)
        return ()
    fits = [
        c
        for c in view.deployment.configs
        if c.colocated_rps > 0 and c.gpus <= free.get(c.gpu_type, 0)
    ]
    if not fits:
        return ()
    best = max(fits, key=lambda c: (c.colocated_rps / c.usd_per_hour, -c.gpus))
    return (InstanceSpec("mixed", best.gpu_type, best.tp, power_cap_w=best.power_cap_w),)


def unit_to_drain(
    view: ScaleView, min_units: int, upper: float | None, rule: str = "least-efficient"
) -> int | None:
    """The active unit to drain, if more than ``min_units`` are active: with ``upper``
    given, only among units whose removal keeps the utilisation at or below ``upper``.
    ``rule``: ``least-efficient`` (the notes' reading: lowest estimated goodput per
    dollar, the newest on ties) or ``most-saving`` (highest $/h, the newest on ties).
    None when no unit qualifies."""
    active = [u for u in view.units if u.state == "active"]
    if len(active) <= min_units:
        return None
    if upper is not None:
        active = [u for u in active if _fits_without(view, u, upper)]
    if not active:
        return None
    if rule == "most-saving":
        return max(active, key=lambda u: (u.usd_per_hour, u.added_s)).group
    return min(active, key=_efficiency).group


def _fits_without(view: ScaleView, u: UnitView, upper: float) -> bool:
    left = view.capacity_rps - u.goodput_rps
    return left > 0 and view.rate_per_s / left <= upper


def _efficiency(u: UnitView) -> tuple[float, float]:
    return (u.goodput_rps / max(u.usd_per_hour, 1e-12), -u.added_s)
