"""SlimPipe (Li et al., arXiv 2504.14519): 1F1B over sequence slices, cost-balanced.

Each microbatch's sequence is cut into n slices; forwards run slices in order (slice j
attends to the KV of slices < j), backwards in reverse order (dK/dV accumulate into earlier
slices). Stage i warms up with n + p - i - 2 forwards, then alternates. With equal slice
costs the bubble is (p-1)/(m n + p - 1).

Under a causal mask uniform slices are unequal: slice j of n costs (2j-1)/n^2 of the
sequence's attention. The paper keeps uniform slices and equalises per-slice time by
redistributing attention work between devices ("attention-context exchange"); the notes
give no algorithm (summaries only). ``balance``:

* ``redistribute`` (default, the paper's scheme as **reconstructed** in
  :mod:`hetsim.workloads.training.slice_exchange`): uniform slices; the mechanism moves
  part of each heavy slice's attention heads to the device that would run its mirror
  slice at the same moment, so by FLOPs both do the mean attention work. That partner
  device is simulated: it runs the moved share between its own layers as soon as it
  arrives (``partner_priority: interleave``, default) or after its current unit
  (``queue``), holds the exchanged context meanwhile, and the heavy slice ends when the
  results are back. The exchanged queries, keys, values, outputs and their gradients
  cross the pipeline link, pipelined with the partner's share (``exchange_overlap:
  attention``, default) or on the heavy device's stream (``none``).
* ``equal-cost`` (the Seq1F1B-like variant: compute-balanced, non-uniform slicing): the
  slice boundaries move so every slice has the same forward cost under the mechanism's
  estimate (linear FLOPs ``G`` uniform per token, causal attention ``A`` with prefix x
  costing ``A x^2``). Boundary i solves ``G x + A x^2 = (i/n)(G + A)``; with G = 0 this
  is ``x_i = sqrt(i/n)``. No traffic, but early slices grow, and so does the memory held
  through warm-up.
* ``none``: uniform slices, unequal costs.

Not modelled: the interleaved variant and activation offload.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.schedulers.training._orders import one_f_one_b
from hetsim.simulator.registry import policies
from hetsim.workloads.training.view import PipelineView, Schedule, Unit


class SlimPipeParams(BaseModel):
    """Slices per sequence (the paper tunes it; 16 is this reconstruction's default) and
    how slice boundaries are placed."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    slices: int = Field(
        16,
        ge=1,
        description="Slices per sequence, n (the paper tunes it; 16 "
        "is this reconstruction's default).",
    )
    balance: Literal["redistribute", "equal-cost", "none"] = Field(
        default="redistribute",
        description="Slice balancing: redistribute attention between mirror slices (the paper's, "
        "reconstructed), equal-cost boundaries (Seq1F1B-like), or none.",
    )
    exchange_overlap: Literal["attention", "none"] = Field(
        "attention",
        description="context exchange hidden behind the slice's attention, or not at all "
        "(reconstruction; redistribute only)",
    )
    partner_priority: Literal["interleave", "queue"] = Field(
        "interleave",
        description="the partner runs a heavy slice's moved attention between the layers of "
        "its own unit as soon as it arrives, or only after that unit (reconstruction; "
        "redistribute only)",
    )


def equal_cost_bounds(n: int, linear: float, attn: float) -> tuple[float, ...]:
    """Fractions ``0 = x_0 < ... < x_n = 1`` with equal ``linear dx + attn d(x^2)`` per
    slice (closed form of the quadratic; uniform when ``attn`` is 0)."""
    if linear < 0 or attn < 0:
        raise ValueError("slice cost estimates must be non-negative")
    target = np.arange(n + 1) / n * (linear + attn)
    if attn == 0:
        x = np.arange(n + 1) / n
    else:
        x = (-linear + np.sqrt(linear * linear + 4.0 * attn * target)) / (2.0 * attn)
    x[0], x[-1] = 0.0, 1.0
    return tuple(float(v) for v in x)


@policies.register("training.schedule", "slimpipe")
class SlimPipe:
    """Sliced 1F1B over uniform slices with workload redistribution (by default), or
    equal-forward-cost slice boundaries (Seq1F1B-like), or plain uniform slices."""

    Params = SlimPipeParams

    def __init__(self, params: SlimPipeParams, rng: np.random.Generator) -> None:
        self.params = params

    def schedule(self, view: PipelineView) -> Schedule:
        """Forward slices in order, backward slices in reverse, per microbatch."""
        p, m, n = view.stages, view.micro_batches, self.params.slices
        fwd = [Unit("F", mb, 0, j) for mb in range(m) for j in range(n)]
        bwd = [Unit("B", mb, 0, j) for mb in range(m) for j in reversed(range(n))]
        order = tuple(one_f_one_b(fwd, bwd, n + p - i - 2) for i in range(p))
        bounds: tuple[float, ...] = ()
        if self.params.balance == "equal-cost":
            bounds = equal_cost_bounds(n, view.linear_flops, view.causal_attn_flops)
        return Schedule(order, slices=n, bounds=bounds,
                        redistribute=self.params.balance == "redistribute" and n > 1,
                        exchange_overlap=self.params.exchange_overlap,
                        partner_priority=self.params.partner_priority)  # fmt: skip
