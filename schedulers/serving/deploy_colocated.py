"""vLLM-like colocated homogeneous deployment: one GPU type, prefill and decode together."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveInt

from hetsim.schedulers.serving._measured import measured_colocated
from hetsim.schedulers.serving._pools import Objective, pools
from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import DeploymentView, InstanceSpec, SearchBudget


class ColocatedParams(BaseModel):
    """``gpu_type``/``tp``: fix the configuration (None: search every type/degree);
    ``headroom``: provision for ``rate x (1 + headroom)``; ``shortlist``: under
    ``workload.sizing_estimator: simulate``, the configs (best predicted goodput per
    dollar, or per W under ``objective: energy``) whose goodput is bisected on
    sub-simulations (DistServe's budget: 300 requests or 60 s, 5 steps) and sized from;
    the others are not used; ``objective``: what the fleet minimises, its $/h or the
    power its GPUs draw at goodput (W)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    gpu_type: str | None = Field(
        default=None, description="Fix the GPU type (null: search every type of the cluster)."
    )
    tp: PositiveInt | None = Field(
        default=None, description="Fix the tensor-parallel degree (null: search every degree)."
    )
    headroom: NonNegativeFloat = Field(
        default=0.0, description="Provision for target rate x (1 + headroom)."
    )
    shortlist: PositiveInt = Field(
        default=3,
        description="Under sizing_estimator simulate: configs (best predicted goodput "
        "per dollar, or per W under objective energy) bisected on sub-simulations and "
        "sized from.",
    )
    objective: Objective = Field(
        default="usd",
        description="What the homogeneous fleet minimises: usd, its price ($/h); energy, "
        "the power in W its GPUs draw serving colocated at goodput (ConfigView.colocated_W, "
        "the run's power model, priced as deployment energy prices it), among the same "
        "configs (GPU type, TP, power cap) and SLOs.",
    )


@policies.register("serving.deployment", "colocated")
class ColocatedDeployment:
    """vLLM (SOSP'23) as deployed in practice: identical instances that each run both
    phases, on the one GPU type and TP degree that meets the target rate at least
    cost (each instance is its own routing group). The best homogeneous baseline
    when ``gpu_type`` is left open. Goodput per config from the run's sizing estimator
    (the predictor, or the shortlist measured by simulate-and-bisect). With
    ``objective: energy`` the cost is the fleet's draw in W at goodput, as the
    energy-aware deployment (``deploy_energy.py``, after DynamoLLM) prices it: the
    least-power homogeneous fleet over every offered (GPU type, TP, power cap) config,
    the homogeneous baseline of an energy claim."""

    Params = ColocatedParams

    def __init__(self, params: ColocatedParams, rng: np.random.Generator) -> None:
        self.params = params

    def deploy(self, view: DeploymentView) -> tuple[InstanceSpec, ...]:
        """Cheapest (least $/h, or least W) feasible homogeneous colocated pool."""
        p = self.params
        cands = [
            c
            for c in view.configs
            if (p.gpu_type is None or c.gpu_type == p.gpu_type) and (p.tp is None or c.tp == p.tp)
        ]
        if not cands:
            raise ValueError(f"colocated: no configuration matches gpu_type={p.gpu_type} tp={p.tp}")
        if p.objective == "energy":  # a config without a draw (no TDP) is not priced
            cands = [c for c in cands if c.colocated_W > 0]
        cands = measured_colocated(view, cands, p.shortlist, SearchBudget(), p.objective)
        found = pools(view, [("mixed", cands)], p.headroom, p.objective)
        if found is None:
            raise ValueError(
                f"colocated: target rate {view.target_rate_per_s} req/s does not fit the GPUs"
            )
        return tuple(s._replace(group=i) for i, s in enumerate(found[1]))
