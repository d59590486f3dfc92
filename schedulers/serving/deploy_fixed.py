"""A deployment written out by hand: instances per role, GPU type and TP degree."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt

from hetsim.simulator.registry import policies
from hetsim.workloads.serving.view import DeploymentView, InstanceSpec, Role


class FixedEntry(BaseModel):
    """``count`` instances of one shape; ``group``: their routing group (None: as
    ``FixedParams.one_group`` says)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    role: Role = Field(
        default="mixed",
        description="Phase the instances run: both (mixed), prefill only or decode only.",
    )
    gpu_type: str = Field(description="GPU type of the instances, by catalogue name.")
    tp: PositiveInt = Field(default=1, description="Tensor-parallel degree of each instance.")
    count: PositiveInt = Field(default=1, description="Instances of this shape.")
    group: NonNegativeInt | None = Field(
        default=None, description="Routing group of these instances (null: as one_group says)."
    )
    power_cap_w: PositiveFloat | None = Field(
        default=None,
        description="Board power limit of these instances' GPUs in W (null: the TDP); "
        "one of workload.power_cap_options_w.",
    )


class FixedParams(BaseModel):
    """The instances, in order; each instance is its own routing group unless
    ``one_group`` (then all share group 0)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    instances: list[FixedEntry] = Field(
        min_length=1,
        description="The instances in order: role, GPU type, TP "
        "degree, count and optional routing group.",
    )
    one_group: bool = Field(
        default=False,
        description="Put every instance in routing group 0 (false: each instance "
        "is its own group unless its entry names one).",
    )


@policies.register("serving.deployment", "fixed")
class FixedDeployment:
    """No decision: the operator's deployment as given (for benchmarks and what-ifs)."""

    Params = FixedParams

    def __init__(self, params: FixedParams, rng: np.random.Generator) -> None:
        self.params = params

    def deploy(self, view: DeploymentView) -> tuple[InstanceSpec, ...]:
        """The listed instances."""
        out: list[InstanceSpec] = []
        for e in self.params.instances:
            for _ in range(e.count):
                group = 0 if self.params.one_group else len(out)
                group = group if e.group is None else e.group
                out.append(InstanceSpec(e.role, e.gpu_type, e.tp, group,
                                        power_cap_w=e.power_cap_w))  # fmt: skip
        return tuple(out)
