"""Cauchy's deployment: GPU combos ranked by Tokens/USD, then an integer program
under availability (RECONSTRUCTION of an unpublished algorithm)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveInt

from hetsim.schedulers.serving._milp import min_cost_counts
from hetsim.schedulers.serving._pools import demand
from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import ConfigView, DeploymentView, InstanceSpec, SearchBudget


class CauchyParams(BaseModel):
    """Unknown constants of the paper, exposed (``../shared/papers/serving.md`` §1.2):
    ``pd_ratios``: prefill:decode instance ratios per combo; ``top_m``: combos kept by
    Tokens/USD before the integer program; ``headroom``; ``tokens``: what a Tokens/USD
    figure counts (output only, or prompt + output)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    pd_ratios: list[tuple[PositiveInt, PositiveInt]] = Field(
        default_factory=lambda: [(1, 1), (1, 2), (2, 1), (1, 3), (1, 4)],
        description="Prefill:decode instance ratios (n_p, n_d) tried "
        "per GPU combo (not published: exposed).",
    )
    top_m: PositiveInt = Field(
        default=12,
        description="Combos kept by Tokens/USD before the integer "
        "program (not published: exposed).",
    )
    headroom: NonNegativeFloat = Field(
        default=0.0, description="Provision for target rate x (1 + headroom)."
    )
    tokens: Literal["output", "total"] = Field(
        default="output",
        description="Tokens a Tokens/USD figure counts: output only, or prompt plus output.",
    )


class Combo(NamedTuple):
    """A prefill config x n_p with a decode config x n_d, and its figures."""

    prefill: ConfigView
    decode: ConfigView
    n_p: int
    n_d: int
    goodput_rps: float
    usd_per_hour: float
    tokens_per_usd: float


def combos(view: DeploymentView, params: CauchyParams) -> list[Combo]:
    """Every (prefill config, decode config, ratio) with goodput > 0, best Tokens/USD
    first: goodput = min(n_p G_P, n_d G_D), cost = n_p C_P + n_d C_D,
    Tokens/USD = 3600 x goodput x tokens per request / cost."""
    per_req = view.mean_output_tokens
    if params.tokens == "total":
        per_req += view.mean_prompt_tokens
    out = []
    for p in view.configs:
        for d in view.configs:
            for n_p, n_d in params.pd_ratios:
                g = min(n_p * p.prefill_rps, n_d * d.decode_rps)
                cost = n_p * p.usd_per_hour + n_d * d.usd_per_hour
                if g > 0:
                    out.append(Combo(p, d, n_p, n_d, g, cost, 3600 * g * per_req / cost))
    return sorted(out, key=lambda k: -k.tokens_per_usd)


@policies.register("serving.deployment", "cauchy")
class CauchyDeployment:
    """Cauchy (SoCC'25): prefill and decode instances on the GPU types that suit each
    phase, bundled as "GPU combos". Reconstructed (the paper's text is not public):
    enumerate combos, keep the ``top_m`` by Tokens/USD, then choose replica counts by
    an integer program: minimise $/h subject to goodput >= rate x (1 + headroom) and
    GPUs of each type <= availability. Goodput per combo comes from the run's sizing
    estimator, the one every deployment policy sizes from: the attainment predictor
    (``workload.sizing_estimator: analytic``), or, with ``simulate``, the ``top_m``
    combos re-scored by seeded sub-simulation and bisection (as the paper finds it;
    DistServe's budget: 300 requests or 60 s, 5 steps, attainment 0.9) before the
    integer program. Each replica is a routing group."""

    Params = CauchyParams

    def __init__(self, params: CauchyParams, rng: np.random.Generator) -> None:
        self.params = params

    def deploy(self, view: DeploymentView) -> tuple[InstanceSpec, ...]:
        """Replicas of the chosen combos, one group per replica."""
        kept = combos(view, self.params)[: self.params.top_m]
        if view.simulate is not None:
            sim = view.simulate
            kept = [k for k in (measured(k, sim) for k in kept) if k.goodput_rps > 0]
        types = [t for t, _ in view.available]
        use = np.array([[gpus(k, t) for k in kept] for t in types], dtype=float).reshape(
            len(types), len(kept)
        )
        x = min_cost_counts(
            np.array([k.usd_per_hour for k in kept]),
            np.array([k.goodput_rps for k in kept]),
            use,
            np.array([n for _, n in view.available], dtype=float),
            demand(view, self.params.headroom),
        )
        if x is None:
            raise ValueError(
                f"cauchy: target rate {view.target_rate_per_s} req/s does not fit the GPUs"
            )
        specs: list[InstanceSpec] = []
        for k, count in zip(kept, x, strict=True):
            for _ in range(int(count)):
                g = len({s.group for s in specs})
                specs += [
                    InstanceSpec(
                        "prefill",
                        k.prefill.gpu_type,
                        k.prefill.tp,
                        g,
                        power_cap_w=k.prefill.power_cap_w,
                    )
                ] * k.n_p
                specs += [
                    InstanceSpec(
                        "decode",
                        k.decode.gpu_type,
                        k.decode.tp,
                        g,
                        power_cap_w=k.decode.power_cap_w,
                    )
                ] * k.n_d
        return tuple(specs)


def unit(k: Combo) -> tuple[InstanceSpec, ...]:
    """The instances of one replica of combo ``k`` (group 0)."""
    return (
        InstanceSpec(
            "prefill", k.prefill.gpu_type, k.prefill.tp, power_cap_w=k.prefill.power_cap_w
        ),
    ) * k.n_p + (
        InstanceSpec("decode", k.decode.gpu_type, k.decode.tp, power_cap_w=k.decode.power_cap_w),
    ) * k.n_d


def measured(
    k: Combo,
    simulate: Callable[[tuple[InstanceSpec, ...], float, SearchBudget], float],
    budget: SearchBudget | None = None,
) -> Combo:
    """Combo ``k`` with its goodput (and Tokens/USD) as the run's simulator bisects it."""
    g = simulate(unit(k), k.goodput_rps, budget or SearchBudget())
    return k._replace(goodput_rps=g, tokens_per_usd=k.tokens_per_usd * g / k.goodput_rps)


def gpus(k: Combo, gpu_type: str) -> int:
    """GPUs of type ``gpu_type`` one replica of combo ``k`` takes."""
    n = k.n_p * k.prefill.gpus if k.prefill.gpu_type == gpu_type else 0
    return n + (k.n_d * k.decode.gpus if k.decode.gpu_type == gpu_type else 0)
