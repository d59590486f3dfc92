"""ZeRO-Offload-like optimizer offload (Ren et al., ZeRO-Offload, USENIX ATC'21).

ZeRO-Offload keeps the fp16 parameters and the forward/backward on the accelerator and
moves the fp32 master weights, Adam momentum and variance, and the optimizer step, to the
CPU: gradients go device-to-host over PCIe each iteration, CPU-Adam updates the fp32
master weights, and the fp16 parameters come back host-to-device. The device saves the
12 B/param of optimizer state (16 -> 4 B/param here; the executor and its costs are in
:mod:`workloads.training_offload`). ZeRO-Offload overlaps the gradient copy with backward
(``overlap_grad_copy``, default on as in the paper).

The policy only asks for the offload; it does not swap activations. ``recompute: full``
adds full activation checkpointing (the same plan as the ``recompute`` policy), the way
ZeRO-Offload is combined with checkpointing to train large models; default ``none``.
Not modelled: the one-step delayed parameter update (DPU) and multi-GPU partitioning.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from hetsim.schedulers.training.recompute import FULL_NAMES
from hetsim.simulator.registry import policies
from hetsim.workloads.training.view import OptimizerOffload, StepDecision, StepReport, SwapPlan


class ZeroOffloadParams(BaseModel):
    """Overlap of the gradient copy with backward, and optional activation checkpointing."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    overlap_grad_copy: bool = Field(True, description="copy each layer's grads after its bwd")
    recompute: Literal["none", "full"] = Field(
        default="none",
        description="Add full activation checkpointing (the recompute "
        "policy's plan) to the optimizer offload.",
    )
    max_layers: PositiveInt = Field(
        default=1024,
        description="Layers the recompute plan covers (keys of layers "
        "absent from the model are ignored).",
    )


@policies.register("training.swap", "zero-offload")
class ZeroOffload:
    """Optimizer states and the Adam step on the host CPU every iteration; never profiles."""

    Params = ZeroOffloadParams
    offloads_optimizer: ClassVar[bool] = True  # the workload's fit check counts 4 B/param

    def __init__(self, params: ZeroOffloadParams, rng: np.random.Generator) -> None:
        self.params = params
        keys: tuple[tuple[int, str], ...] = ()
        if params.recompute == "full":
            keys = tuple((layer, n) for layer in range(params.max_layers) for n in FULL_NAMES)
        self.plan = SwapPlan(recompute=keys, offload=OptimizerOffload(params.overlap_grad_copy))

    def decide(self, report: StepReport | None) -> StepDecision:
        """The same offload plan every iteration."""
        return StepDecision(self.plan)
