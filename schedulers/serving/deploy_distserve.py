"""DistServe-like disaggregated homogeneous deployment."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, NonNegativeFloat

from hetsim.schedulers.serving._pools import pools
from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import DeploymentView, InstanceSpec


class DistServeParams(BaseModel):
    """``gpu_type``: fix the type (None: search every type); ``headroom`` as colocated."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    gpu_type: str | None = None
    headroom: NonNegativeFloat = 0.0


@policies.register("serving.deployment", "distserve")
class DistServeDeployment:
    """DistServe (Zhong et al., OSDI'24): prefill and decode on separate instances of
    ONE GPU type; search the TP degree of each phase and the prefill:decode instance
    ratio for the target rate. Simplified: the per-phase goodput comes from the
    mechanism's attainment predictor, the one every deployment policy sizes from
    (DistServe bisects simulated runs), no pipeline
    parallelism, and the objective is least cost (DistServe's per-GPU goodput)."""

    Params = DistServeParams

    def __init__(self, params: DistServeParams, rng: np.random.Generator) -> None:
        self.params = params

    def deploy(self, view: DeploymentView) -> tuple[InstanceSpec, ...]:
        """Cheapest feasible homogeneous prefill + decode pools."""
        types = sorted({c.gpu_type for c in view.configs})
        if self.params.gpu_type is not None:
            types = [t for t in types if t == self.params.gpu_type]
        best: tuple[float, tuple[InstanceSpec, ...]] | None = None
        for t in types:
            cands = [c for c in view.configs if c.gpu_type == t]
            found = pools(view, [("prefill", cands), ("decode", cands)], self.params.headroom)
            if found is not None and (best is None or found[0] < best[0]):
                best = found
        if best is None:
            raise ValueError(
                f"distserve: target rate {view.target_rate_per_s} req/s does not fit the "
                f"available GPUs of {types}"
            )
        return best[1]
