"""Melange's deployment: the cost-minimising GPU mix of colocated instances."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveInt

from hetsim.schedulers.serving._measured import measured_colocated
from hetsim.schedulers.serving._milp import slice_assignment
from hetsim.schedulers.serving._pools import demand
from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import ConfigView, DeploymentView, InstanceSpec, SearchBudget


class MelangeParams(BaseModel):
    """``slice_factor``: slices per size bucket (Melange's ``slice_factor``; each slice
    goes wholly to one GPU type, so more slices let a bucket be split across types);
    ``headroom``: provision for ``rate x (1 + headroom)``; ``gpu_types``: restrict the
    candidate types (None: every type of the cluster); ``shortlist``: under
    ``workload.sizing_estimator: simulate``, how many configs (best predicted goodput
    per dollar) are profiled by simulate-and-bisect (None: every candidate, as Melange
    profiles every GPU type)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    slice_factor: PositiveInt = Field(
        default=4,
        description="Slices per size bucket, each assigned wholly to "
        "one GPU config (Melange's slice_factor).",
    )
    headroom: NonNegativeFloat = Field(
        default=0.0, description="Provision for target rate x (1 + headroom)."
    )
    gpu_types: list[str] | None = Field(
        default=None, description="Candidate GPU types (null: every type of the cluster)."
    )
    shortlist: PositiveInt | None = Field(
        default=None,
        description="Under sizing_estimator simulate: configs (best predicted goodput per "
        "dollar) profiled by simulate-and-bisect (null: every candidate).",
    )


@policies.register("serving.deployment", "melange")
class MelangeDeployment:
    """Melange (Griggs et al. 2024, "Melange: cost efficient LLM serving by exploiting
    GPU heterogeneity"): colocated (not disaggregated) instances on a MIX of GPU
    types. Requests are bucketed by (prompt, output) size; each bucket's rate
    (target rate x its share) is cut into ``slice_factor`` slices; an integer program
    assigns every slice to one (GPU type, TP) config and chooses instance counts
    minimising $/h, subject to each config's load (sum of slice rate / the config's
    max rate for the slice's bucket) <= its instance count, and GPUs per type <=
    availability (the caps are hetsim's addition; Melange's solver has none).

    The max rate per (bucket, config) is the mechanism's attainment predictor for one
    instance serving that bucket alone (``ConfigView.buckets``); Melange profiles it
    on real GPUs under a TPOT SLO. Under ``workload.sizing_estimator: simulate`` each
    config's one-instance goodput is bisected on sub-simulations (the profile) and its
    bucket rates scaled by the measured / predicted ratio (per-bucket sub-simulations
    would multiply the search by the bucket count: a simplification).
    Each instance carries its plan (``InstanceSpec.plan``: the rate of each bucket
    assigned to its config, split evenly over the config's instances); a plan-aware
    router (``goodput-wrr``) sends each request among the instances planned for its
    bucket, as Melange routes by size bucket.
    """

    Params = MelangeParams

    def __init__(self, params: MelangeParams, rng: np.random.Generator) -> None:
        self.params = params

    def deploy(self, view: DeploymentView) -> tuple[InstanceSpec, ...]:
        """Colocated instances of the configs the integer program chooses."""
        configs = self._candidates(view)
        load = self._loads(view, configs)
        types = [t for t, _ in view.available]
        use = np.array(
            [[c.gpus if c.gpu_type == t else 0 for c in configs] for t in types], dtype=float
        ).reshape(len(types), len(configs))
        found = slice_assignment(
            np.array([c.usd_per_hour for c in configs]),
            load,
            use,
            np.array([n for _, n in view.available], dtype=float),
        )
        if found is None:
            raise ValueError(
                f"melange: target rate {view.target_rate_per_s} req/s does not fit the GPUs"
            )
        plans = self._plans(view, configs, found[0], found[1])
        specs = [
            InstanceSpec("mixed", c.gpu_type, c.tp, 0, plan, power_cap_w=c.power_cap_w)
            for c, n, plan in zip(configs, found[0], plans, strict=True)
            for _ in range(int(n))
        ]
        return tuple(s._replace(group=i) for i, s in enumerate(specs))

    def _plans(
        self, view: DeploymentView, configs: list[ConfigView], x: np.ndarray, unit: np.ndarray
    ) -> list[tuple[tuple[int, float], ...]]:
        """Per config, the (bucket key, req/s) one of its instances is planned to serve:
        the rates of the slices assigned to the config, split evenly over its instances
        (Melange routes each request to the GPU type its size bucket was assigned)."""
        k = self.params.slice_factor
        rate = demand(view, self.params.headroom)
        out = []
        for g in range(len(configs)):
            plan: dict[int, float] = {}
            for b, bucket in enumerate(configs[0].buckets):
                slices = int((unit[b * k : (b + 1) * k] == g).sum())
                key = bucket.key if bucket.key >= 0 else b  # hand-built views: position
                if slices and x[g] > 0:
                    plan[key] = rate * bucket.share * slices / k / int(x[g])
            out.append(tuple(sorted(plan.items())))
        return out

    def _candidates(self, view: DeploymentView) -> list[ConfigView]:
        allowed = self.params.gpu_types
        configs = [c for c in view.configs if allowed is None or c.gpu_type in allowed]
        if not configs or not configs[0].buckets:
            raise ValueError("melange: no configuration with request-size bucket estimates")
        if any(len(c.buckets) != len(configs[0].buckets) for c in configs):
            raise ValueError("melange: configurations disagree on the size buckets")
        configs = measured_colocated(view, configs, self.params.shortlist, SearchBudget())
        if not configs:
            raise ValueError("melange: no configuration sustains a rate > 0 when simulated")
        return configs

    def _loads(self, view: DeploymentView, configs: list[ConfigView]) -> np.ndarray:
        """Slices x configs: slice rate / the config's max rate for its bucket."""
        k = self.params.slice_factor
        rate = demand(view, self.params.headroom)
        rows = []
        for b, bucket in enumerate(configs[0].buckets):
            slice_rate = rate * bucket.share / k
            row = [
                slice_rate / c.buckets[b].rps if c.buckets[b].rps > 0 else np.inf for c in configs
            ]
            rows += [row] * k
        return np.array(rows, dtype=float)
