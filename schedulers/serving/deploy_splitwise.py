"""Splitwise-like pools: prompt machines of one GPU type, token machines of another."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveInt

from hetsim.schedulers.serving._measured import measured_phase
from hetsim.schedulers.serving._pools import pools
from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import DeploymentView, InstanceSpec, SearchBudget


class SplitwiseParams(BaseModel):
    """The Splitwise-HA design by default: prompts on H100, tokens on A100.
    ``kv_transfer``: ``layerwise`` (Splitwise's: each layer's KV leaves as soon as it is
    computed, overlapped with the rest of the prompt phase) or ``after-prefill`` (the
    whole KV after the prompt phase, for comparison); ``shortlist``: under
    ``workload.sizing_estimator: simulate``, the configs per phase (best predicted
    goodput per dollar) bisected on sub-simulations, as DistServe's search does."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    prefill_type: str = Field(
        default="h100-sxm", description="GPU type of the prompt pool (Splitwise-HA: H100)."
    )
    decode_type: str = Field(
        default="a100-80gb", description="GPU type of the token pool (Splitwise-HA: A100)."
    )
    headroom: NonNegativeFloat = Field(
        default=0.0, description="Provision for target rate x (1 + headroom)."
    )
    kv_transfer: Literal["layerwise", "after-prefill"] = Field(
        default="layerwise",
        description="KV hand-off: layerwise (each layer's KV sent as computed, "
        "Splitwise's) or after-prefill (the whole KV after the prompt phase).",
    )
    shortlist: PositiveInt = Field(
        default=2,
        description="Under sizing_estimator simulate: configs per phase (best "
        "predicted goodput per dollar) bisected on sub-simulations.",
    )


@policies.register("serving.deployment", "splitwise")
class SplitwiseDeployment:
    """Splitwise (Patel et al., ISCA'24): a prompt pool and a token pool, each of a
    fixed GPU type chosen by the operator (HH, AA, HA variants), sized for the target
    rate at least cost over TP degrees; prompt machines send the KV cache layer by
    layer, overlapped with the prompt computation (the mechanism exposes only the tail
    after the last layer, ``ServingWorkload.exposed_kv_bytes``). Goodputs from the run's
    sizing estimator (the predictor, or each phase's shortlist simulated). Simplified:
    no mixed pool, no power capping."""

    Params = SplitwiseParams

    def __init__(self, params: SplitwiseParams, rng: np.random.Generator) -> None:
        self.params = params

    def deploy(self, view: DeploymentView) -> tuple[InstanceSpec, ...]:
        """Cheapest feasible pools of the two fixed types."""
        p = self.params
        pre = [c for c in view.configs if c.gpu_type == p.prefill_type]
        dec = [c for c in view.configs if c.gpu_type == p.decode_type]
        if not pre or not dec:
            raise ValueError(
                f"splitwise: the cluster has no {p.prefill_type} or no {p.decode_type} GPU"
            )
        budget = SearchBudget()
        pre, dec = (
            measured_phase(view, "prefill", pre, dec, p.shortlist, budget),
            measured_phase(view, "decode", dec, pre, p.shortlist, budget),
        )
        found = pools(view, [("prefill", pre), ("decode", dec)], p.headroom)
        if found is None:
            raise ValueError(f"splitwise: target rate {view.target_rate_per_s} does not fit")
        layerwise = p.kv_transfer == "layerwise"
        return tuple(s._replace(kv_layerwise=layerwise and s.role == "prefill") for s in found[1])
