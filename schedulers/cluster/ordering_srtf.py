"""Shortest remaining time (or remaining GPU-service) first; durations known (Muri-S)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.cluster.view import OrderingView


class SrtfParams(BaseModel):
    """``gpu_time``: weigh remaining time by GPUs (SRSF, Muri-S's key); else plain SRTF."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    gpu_time: bool = Field(
        default=True,
        description="Sort by remaining time x GPUs (SRSF, Muri-S's key); "
        "false: by remaining solo time (SRTF).",
    )


@policies.register("cluster.ordering", "srtf")
class SrtfOrdering:
    """Smallest remaining solo time (x GPUs by default) on the reference type first.

    Muri-S (SIGCOMM'22) sorts by remaining GPU-time with durations known in advance;
    ties go to the earlier submission, then the lower job id.
    """

    Params = SrtfParams

    def __init__(self, params: SrtfParams, rng: np.random.Generator) -> None:
        self.params = params

    def order(self, view: OrderingView) -> np.ndarray:
        """Positions sorted by remaining (GPU-)time."""
        key = view.remaining_solo_s * (view.gpus if self.params.gpu_time else 1)
        return np.lexsort((view.job, view.submit_s, key))
