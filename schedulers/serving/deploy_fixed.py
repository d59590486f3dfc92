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
    role: Role = "mixed"
    gpu_type: str
    tp: PositiveInt = 1
    count: PositiveInt = 1
    group: NonNegativeInt | None = None
    power_cap_w: PositiveFloat | None = None


class FixedParams(BaseModel):
    """The instances, in order; each instance is its own routing group unless
    ``one_group`` (then all share group 0)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    instances: list[FixedEntry] = Field(min_length=1)
    one_group: bool = False


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
