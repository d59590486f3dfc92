"""Mitigation: restart the job from its last checkpoint without the flagged rank.

The blunt remedy when hot replacement is not available: the job pays ``restart_s`` and
loses the work since the last checkpoint (``since_checkpoint_s``).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from hetsim.simulator.registry import policies
from hetsim.workloads.observability.view import Action, MitigationView


class RestartParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("observability.mitigation", "restart")
class RestartFromCheckpoint:
    """Restart from the last checkpoint on a healthy set of ranks, on every finding."""

    Params = RestartParams

    def __init__(self, params: RestartParams, rng: np.random.Generator) -> None:
        self.params = params

    def decide(self, view: MitigationView) -> Action:
        """Always ``restart``."""
        return "restart"
