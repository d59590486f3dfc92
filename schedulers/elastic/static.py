"""Static provisioning: a fixed replica count for the whole run (baseline)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from hetsim.simulator.limits import PositiveSeconds
from hetsim.simulator.registry import policies
from hetsim.workloads.elastic.view import ScaleView


class StaticParams(BaseModel):
    """``replicas``: the fixed size (None: keep the workload's initial_replicas)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    replicas: PositiveInt | None = Field(
        default=None,
        description="The fixed replica count (null: keep the workload's initial_replicas).",
    )
    sync_period_s: PositiveSeconds = Field(
        default=3600.0, description="Seconds between (unchanging) decisions."
    )


@policies.register("elastic.autoscaler", "static")
class StaticAutoscaler:
    """Always asks for the same replica count: no rescale after t = 0, no downtime.

    The baseline a team uses when it provisions for a chosen load (often the peak).
    """

    Params = StaticParams
    horizon_s = 0.0

    def __init__(self, params: StaticParams, rng: np.random.Generator) -> None:
        self.params = params
        self.sync_period_s = params.sync_period_s
        self._fixed: int | None = params.replicas

    def decide(self, view: ScaleView) -> int:
        """The configured size (the first target seen if none was configured)."""
        if self._fixed is None:
            self._fixed = view.target
        return self._fixed
