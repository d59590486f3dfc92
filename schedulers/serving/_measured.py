"""Configs re-scored by the run's simulate-and-bisect estimator (under
``workload.sizing_estimator: simulate``): colocated ones for the colocated and Melange
deployments, one phase's for Splitwise."""

from __future__ import annotations

import math

from hetsim.schedulers.serving._pools import Objective, unit_price
from hetsim.workloads.serving.view import (
    ConfigView,
    DeploymentView,
    InstanceSpec,
    Role,
    SearchBudget,
)


def per_cost(c: ConfigView, rps: float, objective: Objective = "usd") -> float:
    """Requests/s per unit of cost (:func:`~hetsim.schedulers.serving._pools.unit_price`:
    per $/h, per GPU when unpriced; or per W): what a shortlist ranks by."""
    price = unit_price(c, objective)
    return rps / (price if price > 0 else c.gpus)


def measured_colocated(
    view: DeploymentView,
    configs: list[ConfigView],
    shortlist: int | None,
    budget: SearchBudget,
    objective: Objective = "usd",
) -> list[ConfigView]:
    """With the run's simulator (``view.simulate``), the ``shortlist`` configs (None:
    all) with the best predicted colocated goodput per dollar, or per W under
    ``objective: energy`` (the draw kept at the predicted goodput's, as the energy
    deployment keeps it), each with one instance's goodput bisected on sub-simulations;
    the per-bucket rates (Melange's) are scaled by the same measured / predicted ratio.
    Configs measured at 0 are dropped, unmeasured ones too (no policy mixes the two
    estimators). Without a simulator: ``configs``."""
    if view.simulate is None:
        return configs
    ranked = sorted(
        (c for c in configs if c.colocated_rps > 0),
        key=lambda c: -per_cost(c, c.colocated_rps, objective),
    )
    out = []
    for c in ranked[:shortlist] if shortlist is not None else ranked:
        g = view.simulate(
            (InstanceSpec("mixed", c.gpu_type, c.tp, power_cap_w=c.power_cap_w),),
            c.colocated_rps,
            budget,
        )
        if g > 0:
            ratio = g / c.colocated_rps
            out.append(
                c._replace(
                    colocated_rps=g,
                    buckets=tuple(b._replace(rps=b.rps * ratio) for b in c.buckets),
                )
            )
    return out


def measured_phase(
    view: DeploymentView,
    role: Role,
    cands: list[ConfigView],
    partners: list[ConfigView],
    shortlist: int,
    budget: SearchBudget,
    partner_margin: float = 3.0,
) -> list[ConfigView]:
    """With the run's simulator, the ``shortlist`` configs of ``cands`` with the best
    predicted ``role`` goodput per dollar, each with one ``role`` instance's goodput
    bisected beside the best ``partners`` config of the other phase at ``partner_margin``
    x its predicted goodput (so that it does not limit it; DistServe's search); the other
    phase's figure is left as predicted and unused. Without a simulator: ``cands``."""
    if view.simulate is None:
        return cands
    other: Role = "decode" if role == "prefill" else "prefill"
    ranked = sorted(
        (c for c in cands if _rps(role, c) > 0), key=lambda c: -per_cost(c, _rps(role, c))
    )
    live = [c for c in partners if _rps(other, c) > 0]
    if not live:
        return []
    partner = max(live, key=lambda c: per_cost(c, _rps(other, c)))
    out = []
    for c in ranked[:shortlist]:
        k = max(1, math.ceil(partner_margin * _rps(role, c) / _rps(other, partner)))
        unit = (InstanceSpec(role, c.gpu_type, c.tp, power_cap_w=c.power_cap_w),) + (
            InstanceSpec(other, partner.gpu_type, partner.tp, power_cap_w=partner.power_cap_w),
        ) * k
        g = view.simulate(unit, _rps(role, c), budget)
        if g > 0:
            out.append(c._replace(prefill_rps=g) if role == "prefill" else c._replace(decode_rps=g))
    return out


def _rps(role: Role, c: ConfigView) -> float:
    return c.prefill_rps if role == "prefill" else c.decode_rps
