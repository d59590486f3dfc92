"""Energy-aware deployment: colocated instances on the GPU types and power caps that
serve the target rate under the SLOs with the least power (most Tokens/J)."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveInt

from hetsim.schedulers.serving._milp import min_cost_counts
from hetsim.schedulers.serving._pools import demand, unit_price
from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import ConfigView, DeploymentView, InstanceSpec, SearchBudget


class EnergyParams(BaseModel):
    """``headroom``: provision for ``rate x (1 + headroom)``; ``shortlist``: under
    ``workload.sizing_estimator: simulate``, the configs with the most predicted
    Tokens/J whose goodput is bisected on sub-simulations (the others are not used);
    ``tokens``: what a Tokens/J figure counts (output only, or prompt + output; the
    choice does not change the ranking for one workload)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    headroom: NonNegativeFloat = Field(
        default=0.0, description="Provision for target rate x (1 + headroom)."
    )
    shortlist: PositiveInt = Field(
        default=4,
        description="Under workload.sizing_estimator simulate: the configs with the most "
        "predicted Tokens/J whose goodput is bisected on sub-simulations.",
    )
    tokens: Literal["output", "total"] = Field(
        default="output",
        description="What a Tokens/J figure counts: output tokens only, or prompt + output.",
    )


def tokens_per_J(c: ConfigView, view: DeploymentView, tokens: str = "output") -> float:
    """Tokens/J of one instance of ``c`` serving colocated at its goodput: goodput x
    tokens per request / its GPUs' draw there (0 when it meets no SLO)."""
    per_req = view.mean_output_tokens
    if tokens == "total":
        per_req += view.mean_prompt_tokens
    if c.colocated_rps <= 0 or c.colocated_W <= 0:
        return 0.0
    return c.colocated_rps * per_req / c.colocated_W


@policies.register("serving.deployment", "energy")
class EnergyDeployment:
    """Energy-aware static deployment after DynamoLLM (Stojkovic et al., HPCA'25: choose
    instance configurations and GPU frequency for the least energy that meets the SLOs),
    with a board power cap in place of a locked clock and no reconfiguration over time.
    Every (GPU type, TP, power cap) config the run offers (``workload.tp_options``,
    ``workload.power_cap_options_w``) has a colocated goodput from the run's sizing
    estimator (the one every deployment policy sizes from) and the draw of its GPUs at
    that goodput from the run's power model (``ConfigView.colocated_W``). Replica counts
    come from the integer program Cauchy solves for dollars, with watts as the cost:
    minimise the fleet's draw at full goodput subject to goodput >= rate x (1 + headroom)
    and GPUs of each type (any cap) <= availability. Under ``simulate``, the
    ``shortlist`` configs of most predicted Tokens/J are re-scored by simulate-and-bisect
    (their draw kept at the predicted goodput's). Each instance is its own routing group."""

    Params = EnergyParams

    def __init__(self, params: EnergyParams, rng: np.random.Generator) -> None:
        self.params = params

    def deploy(self, view: DeploymentView) -> tuple[InstanceSpec, ...]:
        """Least-power feasible colocated pool."""
        p = self.params
        cands = [c for c in view.configs if tokens_per_J(c, view, p.tokens) > 0]
        cands.sort(key=lambda c: -tokens_per_J(c, view, p.tokens))
        if view.simulate is not None:
            budget = SearchBudget()
            scored = []
            for c in cands[: p.shortlist]:
                spec = InstanceSpec("mixed", c.gpu_type, c.tp, power_cap_w=c.power_cap_w)
                g = view.simulate((spec,), c.colocated_rps, budget)
                if g > 0:
                    scored.append(c._replace(colocated_rps=g))
            cands = scored
        types = [t for t, _ in view.available]
        use = np.array(
            [[c.gpus if c.gpu_type == t else 0 for c in cands] for t in types], dtype=float
        ).reshape(len(types), len(cands))
        x = min_cost_counts(
            np.array([unit_price(c, "energy") for c in cands]),
            np.array([c.colocated_rps for c in cands]),
            use,
            np.array([n for _, n in view.available], dtype=float),
            demand(view, p.headroom),
        )
        if x is None:
            raise ValueError(
                f"energy: target rate {view.target_rate_per_s} req/s does not fit the GPUs"
            )
        specs: list[InstanceSpec] = []
        for c, n in zip(cands, x, strict=True):
            for _ in range(int(n)):
                specs.append(
                    InstanceSpec("mixed", c.gpu_type, c.tp, len(specs), power_cap_w=c.power_cap_w)
                )
        return tuple(specs)
