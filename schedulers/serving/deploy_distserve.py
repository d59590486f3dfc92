"""DistServe's disaggregated homogeneous deployment: per phase, the parallel config with
the best per-GPU goodput found by simulate-and-bisect, replicated to the target rate."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveInt

from hetsim.schedulers.serving._pools import demand, fits
from hetsim.simulator.limits import PositiveSeconds
from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import (
    ConfigView,
    DeploymentView,
    InstanceSpec,
    Role,
    SearchBudget,
)


class DistServeParams(BaseModel):
    """``gpu_type``: fix the type (None: every type, compared per dollar); ``headroom``:
    provision for ``rate x (1 + headroom)``; ``search``: None (the default) follows the
    run's ``workload.sizing_estimator``, the one every deployment policy sizes from
    (``simulate``: bisect each shortlisted config's rate on short simulations,
    DistServe's way; ``analytic``: the predictor only); ``simulate`` or ``estimate``
    must agree with it (an error otherwise: no asymmetric sizing within a run);
    ``shortlist``: configs simulated per phase and type, the best by predicted per-GPU
    goodput; ``type_shortlist``: GPU types simulated, the cheapest deployments on the
    predictor; ``partner_margin``: the other phase's instances beside the measured one
    carry this many times its predicted goodput, so that they do not limit it; the
    search budget of one config: runs of ``max(num_requests, rate x duration_s)``
    requests, ``steps`` bisection steps, SLO ``attainment`` (DistServe's 90%). Runs of
    20 s from an empty system overstate goodput: on cauchy.yaml at 32 req/s they sized
    1 H100 prefill + 1 H100-TP2 decode, which attained 0.51 in the full run; 60 s runs
    size 2 + 1, which attain 1.0 (workloads/serving/subsim.py saw the same)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    gpu_type: str | None = Field(
        default=None, description="Fix the GPU type (null: every type, compared per dollar)."
    )
    headroom: NonNegativeFloat = Field(
        default=0.0, description="Provision for target rate x (1 + headroom)."
    )
    search: Literal["simulate", "estimate"] | None = Field(
        default=None,
        description="Goodput search: null follows workload.sizing_estimator; simulate "
        "(bisect on sub-simulations) or estimate must agree with it.",
    )
    shortlist: PositiveInt = Field(
        default=2,
        description="Configs simulated per phase and GPU type, the "
        "best by predicted per-GPU goodput.",
    )
    type_shortlist: PositiveInt = Field(
        default=2, description="GPU types simulated: those with the cheapest predicted deployments."
    )
    partner_margin: float = Field(
        3.0,
        ge=1.0,
        description="The other phase's instances beside the measured one carry this many "
        "times its predicted goodput, so that they do not limit it.",
    )
    num_requests: PositiveInt = Field(
        default=300,
        description="Fewest requests per bisection run: a run has "
        "max(num_requests, rate x duration_s) requests.",
    )
    duration_s: PositiveSeconds = Field(
        default=60.0,
        description="Seconds of arrivals per bisection run (60 s: 20 s runs from "
        "an empty system overstated goodput, see above).",
    )
    steps: PositiveInt = Field(default=5, description="Bisection steps per config.")
    attainment: float = Field(
        0.9,
        gt=0.0,
        lt=1.0,
        description="SLO attainment a bisected rate must reach (DistServe's 90%).",
    )


def _rps(role: Role, c: ConfigView) -> float:
    return c.prefill_rps if role == "prefill" else c.decode_rps


@policies.register("serving.deployment", "distserve")
class DistServeDeployment:
    """DistServe (Zhong et al., OSDI'24, its placement for high node affinity): prefill
    and decode on separate instances of ONE GPU type. For each phase and each parallel
    config (TP degree) the goodput of one instance is the largest Poisson rate whose
    simulated SLO attainment reaches ``attainment``, bisected on short simulations
    (DistServe's ``simdistserve`` bisection); per phase the config with the best
    goodput per GPU is kept and replicated, ``n = ceil(rate / goodput)`` instances of
    each phase. Across GPU types (``gpu_type`` None) goodput compares per dollar, which
    is per GPU within one type (DistServe's clusters are homogeneous); the next best
    type when one does not fit the GPUs.

    Simplified (budget parameters): a phase is simulated with the other phase's best
    predicted config beside it at ``partner_margin`` x the measured phase's predicted
    goodput (hetsim's instances run both phases only together); only the
    ``shortlist`` configs with the best predicted per-GPU goodput are simulated
    (DistServe simulates every config); no pipeline parallelism; one routing pool."""

    Params = DistServeParams

    def __init__(self, params: DistServeParams, rng: np.random.Generator) -> None:
        self.params = params
        # (gpu type, role) -> [(config, measured or predicted goodput)], best first
        self.ranked: dict[tuple[str, Role], list[tuple[ConfigView, float]]] = {}

    def deploy(self, view: DeploymentView) -> tuple[InstanceSpec, ...]:
        """The best config of each phase, replicated (see the class docstring)."""
        p = self.params
        types = sorted({c.gpu_type for c in view.configs})
        if p.gpu_type is not None:
            types = [t for t in types if t == p.gpu_type]
        rate = demand(view, p.headroom)
        run = "simulate" if view.simulate is not None else "estimate"
        if p.search is not None and p.search != run:
            raise ValueError(
                f"distserve: search '{p.search}' differs from the run's sizing estimator "
                f"'{view.estimator}' (workload.sizing_estimator): every deployment policy "
                "is sized the same way"
            )
        options = self._options(view, types, rate, simulate=False)
        if view.simulate is not None:
            short = [o[2] for o in options if fits(view, {o[2]: o[1]})][: p.type_shortlist]
            options = self._options(view, short, rate, simulate=True)
        for _, gpus, t, specs in options:
            if fits(view, {t: gpus}):
                return specs
        raise ValueError(
            f"distserve: target rate {view.target_rate_per_s} req/s does not fit the "
            f"available GPUs of {types}"
        )

    def _options(
        self, view: DeploymentView, types: list[str], rate: float, simulate: bool
    ) -> list[tuple[float, int, str, tuple[InstanceSpec, ...]]]:
        """Per type, the deployment of the best config of each phase replicated to
        ``rate``: ($/h or GPUs when unpriced, GPUs, type, instances), cheapest first."""
        options = []
        for t in types:
            cands = [c for c in view.configs if c.gpu_type == t]
            pre = self._rank(view, "prefill", cands, simulate)
            dec = self._rank(view, "decode", cands, simulate)
            if not pre or not dec:
                continue
            (cp, gp), (cd, gd) = pre[0], dec[0]
            n_p, n_d = math.ceil(rate / gp - 1e-9), math.ceil(rate / gd - 1e-9)
            cost = n_p * cp.usd_per_hour + n_d * cd.usd_per_hour
            gpus = n_p * cp.gpus + n_d * cd.gpus
            specs = (InstanceSpec("prefill", t, cp.tp, power_cap_w=cp.power_cap_w),) * n_p + (
                InstanceSpec("decode", t, cd.tp, power_cap_w=cd.power_cap_w),
            ) * n_d
            options.append((cost if cost > 0 else float(gpus), gpus, t, specs))
        return sorted(options, key=lambda o: (o[0], o[1], o[2]))

    def _rank(
        self, view: DeploymentView, role: Role, cands: list[ConfigView], simulate: bool
    ) -> list[tuple[ConfigView, float]]:
        """Configs of one type for ``role`` with their goodput, best per GPU first."""
        p = self.params
        est = sorted(((c, _rps(role, c)) for c in cands if _rps(role, c) > 0),
                     key=lambda cg: -cg[1] / cg[0].gpus)  # fmt: skip
        if simulate and view.simulate is not None and est:
            other: Role = "decode" if role == "prefill" else "prefill"
            partner = max(cands, key=lambda c: _rps(other, c) / c.gpus)
            budget = SearchBudget(p.num_requests, p.duration_s, p.steps, p.attainment)
            measured = []
            for c, g in est[: p.shortlist]:
                k = max(1, math.ceil(p.partner_margin * g / max(_rps(other, partner), 1e-9)))
                unit = (InstanceSpec(role, c.gpu_type, c.tp, power_cap_w=c.power_cap_w),) + (
                    InstanceSpec(
                        other, partner.gpu_type, partner.tp, power_cap_w=partner.power_cap_w
                    ),
                ) * k
                measured.append((c, view.simulate(unit, g, budget)))
            est = sorted([m for m in measured if m[1] > 0], key=lambda cg: -cg[1] / cg[0].gpus)
        if est:
            self.ranked[(est[0][0].gpu_type, role)] = est
        return est
