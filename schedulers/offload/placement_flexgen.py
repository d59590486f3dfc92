"""FlexGen (Sheng et al., ICML'23) policy search: weights, KV cache and attention placement
and the number of GPU micro-batches per block.

FlexGen solves a linear program over its own analytic cost model. This is a
reconstruction: a grid search over the same policy vector (weights on GPU / CPU / disk
in ``step`` increments, KV all on the GPU, all in host memory or, when the workload names
a disk tier, all or half on disk (FlexGen's cg / cc / cd; its runtime keeps activations
off the disk, ``hg + hc = 1`` in its cost model, and so does this search), attention on
CPU or GPU, micro-batches per block among the divisors of the batch), scored by the
mechanism's ``flexgen-analytic`` estimator (:meth:`OffloadView.estimate_s`: per layer
the slowest of copies, GPU, CPU and disk, no pipeline fill), keeping only plans that fit
in GPU, host and disk memory. Weights and KV are pinned and copies overlap compute, as
FlexGen runs them.
"""

from __future__ import annotations

import itertools

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.offload.view import OffloadPlan, OffloadView


class FlexGenParams(BaseModel):
    """``step``: grid of the weight fractions; ``max_gpu_batches``: largest block split;
    ``allow_disk``: weights (and, with a disk tier, KV) may go to disk."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    step: float = Field(
        0.1, gt=0, le=0.5, description="Grid step of the weight fractions on GPU and CPU searched."
    )
    max_gpu_batches: int = Field(
        16,
        ge=1,
        description="Largest number of micro-batches per block searched (divisors of the batch).",
    )
    allow_disk: bool = Field(
        default=True, description="Let weights (and, with a disk tier, KV) go to disk."
    )


@policies.register("offload.placement", "flexgen")
class FlexGenPlacement:
    """FlexGen: the plan with the lowest estimated time that fits (grid over its policy vector)."""

    Params = FlexGenParams

    def __init__(self, params: FlexGenParams, rng: np.random.Generator) -> None:
        self.params = params

    def place(self, view: OffloadView) -> OffloadPlan:
        """Search the grid; ValueError when nothing fits."""
        n = round(1 / self.params.step)
        fracs = [i / n for i in range(n + 1)]
        batches = [b for b in range(1, min(view.batch, self.params.max_gpu_batches) + 1)
                   if view.batch % b == 0]  # fmt: skip
        best: tuple[float, OffloadPlan] | None = None
        # (kv on GPU, kv on disk); the disk options only where a disk tier exists
        kvs: tuple[tuple[float, float], ...] = ((1.0, 0.0), (0.0, 0.0))
        if view.disk_free_bytes > 0 and self.params.allow_disk:
            kvs += ((0.0, 0.5), (0.0, 1.0))
        for wg, wc in itertools.product(fracs, fracs):
            if wg + wc > 1 + 1e-9 or (not self.params.allow_disk and wg + wc < 1 - 1e-9):
                continue
            for (kv, kd), att, gb in itertools.product(kvs, (False, True), batches):
                if att and kv == 1.0:
                    continue
                plan = OffloadPlan(weights_gpu=wg, weights_cpu=min(wc, 1 - wg), kv_gpu=kv,
                                   attention_on_cpu=att, gpu_batches=gb, kv_disk=kd)  # fmt: skip
                if not view.fits(plan):
                    continue
                t = view.estimate_s(plan) * (1 + 1e-9 * (1 - wg - wc + kd))  # ties: less disk
                if best is None or t < best[0]:
                    best = (t, plan)
        if best is None:
            raise ValueError("policies.placement: no FlexGen plan fits in GPU and host memory")
        return best[1]
