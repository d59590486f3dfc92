"""Shared sizing of prefill/decode or colocated pools for the deployment baselines."""

from __future__ import annotations

import math
from typing import Literal

from hetsim.workloads.serving.view import ConfigView, DeploymentView, InstanceSpec, Role

#: what a deployment minimises: dollars per hour, or the watts its GPUs draw
Objective = Literal["usd", "energy"]


def unit_price(c: ConfigView, objective: Objective = "usd") -> float:
    """What one instance of ``c`` costs under ``objective``: the $/h of its GPUs
    (``usd``), or their draw in W serving colocated at its goodput (``energy``,
    ``ConfigView.colocated_W``, the run's power model)."""
    return c.colocated_W if objective == "energy" else c.usd_per_hour


def demand(view: DeploymentView, headroom: float) -> float:
    """Requests/s to provision for: the target rate times (1 + headroom)."""
    return view.target_rate_per_s * (1.0 + headroom)


def count_for(rate: float, goodput: float) -> int | None:
    """Instances of ``goodput`` req/s needed for ``rate`` (None if goodput is 0)."""
    return math.ceil(rate / goodput - 1e-9) if goodput > 0 else None


def fits(view: DeploymentView, use: dict[str, int]) -> bool:
    """Whether ``use`` (GPUs per type) is within the cluster's availability."""
    avail = dict(view.available)
    return all(n <= avail.get(t, 0) for t, n in use.items())


def pools(
    view: DeploymentView,
    roles: list[tuple[Role, list[ConfigView]]],
    headroom: float,
    objective: Objective = "usd",
) -> tuple[float, tuple[InstanceSpec, ...]] | None:
    """Cheapest feasible pools: for each role, the config (among its candidates) and
    count meeting the demand at least cost (:func:`unit_price` under ``objective``), as
    (cost, instances); None when no choice fits availability. Watts are priced for
    colocated (``mixed``) pools only: ``colocated_W`` is the draw serving both phases.

    Roles are sized independently, then checked together against availability.
    """
    if objective == "energy" and any(role != "mixed" for role, _ in roles):
        raise ValueError("pools: objective energy prices colocated (mixed) pools only")
    rate = demand(view, headroom)
    best: tuple[float, tuple[InstanceSpec, ...]] | None = None
    options = [[(c, count_for(rate, _goodput(role, c))) for c in cands] for role, cands in roles]
    for combo in _product(options):
        if any(n is None for _, n in combo):
            continue
        use: dict[str, int] = {}
        cost = 0.0
        for c, n in combo:
            assert n is not None
            use[c.gpu_type] = use.get(c.gpu_type, 0) + n * c.gpus
            cost += n * unit_price(c, objective)
        if fits(view, use) and (best is None or cost < best[0]):
            specs = tuple(
                InstanceSpec(role, c.gpu_type, c.tp, 0, power_cap_w=c.power_cap_w)
                for (role, _), (c, n) in zip(roles, combo, strict=True)
                for _ in range(n or 0)
            )
            best = (cost, specs)
    return best


def _goodput(role: Role, c: ConfigView) -> float:
    return {"prefill": c.prefill_rps, "decode": c.decode_rps, "mixed": c.colocated_rps}[role]


def _product(
    options: list[list[tuple[ConfigView, int | None]]],
) -> list[list[tuple[ConfigView, int | None]]]:
    out: list[list[tuple[ConfigView, int | None]]] = [[]]
    for opts in options:
        out = [[*prev, o] for prev in out for o in opts]
    return out
