"""Activation recomputation (checkpointing): full, or selective (attention core only).

Full: each layer keeps only its input; everything else it stores is dropped after forward
and rematerialised by rerunning the layer's forward before its backward (Chen et al. 2016;
Megatron ``--recompute-granularity full``), about one extra forward (~33% of a step).
Selective: only the attention core's ``5 a s^2 b`` tensors (softmax, dropout output and
mask) are dropped and recomputed (Korthikanti et al. 2022); with flash attention nothing
is stored there, so selective recompute does nothing.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from hetsim.simulator.registry import policies
from hetsim.workloads.training.view import StepDecision, StepReport, SwapPlan

FULL_NAMES = ("a1", "qk", "v", "sm", "smd", "smmask", "ctx", "mask1", "r1", "a2", "gin",
              "gout", "mask2")  # fmt: skip
SELECTIVE_NAMES = ("sm", "smd", "smmask")


class RecomputeParams(BaseModel):
    """Which tensors to recompute and the number of layers to plan for."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    granularity: Literal["full", "selective"] = Field(
        default="full",
        description="Recompute every stored activation of a layer (full) or only the "
        "attention core's softmax, dropout and mask tensors (selective).",
    )
    max_layers: PositiveInt = Field(
        default=1024,
        description="Layers the plan covers (keys of layers absent from the model are ignored).",
    )


@policies.register("training.swap", "recompute")
class Recompute:
    """Drop the chosen activations of every layer in forward; recompute them in backward."""

    Params = RecomputeParams

    def __init__(self, params: RecomputeParams, rng: np.random.Generator) -> None:
        self.params = params
        names = FULL_NAMES if params.granularity == "full" else SELECTIVE_NAMES
        keys = tuple((layer, n) for layer in range(params.max_layers) for n in names)
        self.plan = SwapPlan(recompute=keys)

    def decide(self, report: StepReport | None) -> StepDecision:
        """The same recompute plan every iteration (keys absent from a model are ignored)."""
        return StepDecision(self.plan)
