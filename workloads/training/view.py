"""Read-only views and typed decisions of the training domain's decision points.

``training.swap``: before every iteration the mechanism hands the policy a
:class:`StepReport` of the previous iteration (None before the first); the policy returns a
:class:`StepDecision`: a :class:`SwapPlan` and whether to run the profiler. A profiled
iteration's report carries a :class:`ProfileView` (op trace, tensors, measured times, the
no-swap memory timeline and each tensor's swap-out/in copy times, all estimated by the
mechanism).

``training.schedule``: the policy returns, per pipeline stage, the order of its forward and
backward work units (:class:`Unit`) from a :class:`PipelineView`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol

import numpy as np

TensorKey = tuple[int, str]  # (layer, name): stable across iterations, like a signature
OpKey = tuple[int, int, str, int]  # (phase, layer, op name, occurrence in that block)
#: what a profiler records of a tensor to find it again in a later iteration (MindSpeed's
#: smart_swap signature, reconstruction): (layer, name, number of uses, sorted op names of
#: its users, producer's position within its (phase, layer) block)
Signature = tuple[int, str, int, tuple[str, ...], int]


@dataclass(frozen=True)
class SwapOrder:
    """Swap one tensor out after its last forward use and back in before backward.

    Exactly one of ``in_at_op`` (absolute op index: a static, trace-bound plan),
    ``in_at_key`` (the op named by :data:`OpKey`: Capuchin's in-trigger, keyed by the
    operation rather than its position) or ``in_at_stage`` ((phase, layer) label whose
    first op issues the prefetch) is set. ``out_after_op`` None means "after the tensor's
    last forward use in the current sequence"; an index pins the swap-out to that op.
    ``signature``: when set, the executor finds the tensor by signature similarity (the
    best match in the key's layer at or above the plan's threshold), not by exact key; a
    planned tensor without a match is a miss and is not swapped.
    """

    key: TensorKey
    out_after_op: int | None = None
    in_at_op: int | None = None
    in_at_stage: tuple[int, int] | None = None
    in_at_key: OpKey | None = None
    signature: Signature | None = None


@dataclass(frozen=True)
class OptimizerOffload:
    """Keep the optimizer on the host (ZeRO-Offload): fp32 master weights, momentum and
    variance live in host memory; each iteration the fp16 gradients go device-to-host, the
    CPU runs Adam, the updated fp16 parameters come back host-to-device.

    ``overlap_grad_copy``: copy each layer's gradients as soon as its backward finishes
    (overlapping the rest of backward) rather than all of them after backward.
    """

    overlap_grad_copy: bool = True


@dataclass(frozen=True)
class SwapPlan:
    """What the executor does in one iteration.

    ``recompute``: keys of activations dropped after forward and rematerialised (per layer,
    all at once) before that layer's first backward op needs one of them.
    ``forced_swap_on_oom``: an allocation that does not fit is handed to the runtime's
    fallback (``workload.oom_fallback``: least recently used victims by default,
    synchronous copies, synchronisation and fragmentation costs) instead of failing the run.
    ``offload``: run the optimizer on the host (:class:`OptimizerOffload`); None keeps the
    optimizer states and the Adam step on the device.
    """

    swaps: tuple[SwapOrder, ...] = ()
    recompute: tuple[TensorKey, ...] = ()
    forced_swap_on_oom: bool = False
    offload: OptimizerOffload | None = None
    match_threshold: float = 0.75  # share of signature features that must agree


@dataclass(frozen=True)
class ProfileView:
    """One profiled iteration, as the profiler recorded it (arrays are read-only)."""

    n_ops: int
    phase: np.ndarray  # per op: 0 FWD, 1 BWD, 2 OPT
    layer: np.ndarray  # per op
    stage: np.ndarray  # per op: index of its contiguous (phase, layer) block
    op_start_s: np.ndarray  # per op, measured from the iteration start
    op_end_s: np.ndarray
    memory_bytes: np.ndarray  # per op: states + live tensors if nothing were swapped
    keys: tuple[TensorKey, ...]  # per tensor
    size_bytes: np.ndarray  # per tensor
    last_fwd_use: np.ndarray  # per tensor, op index (-1: none)
    first_bwd_use: np.ndarray  # per tensor, op index (-1: none)
    recompute_s: np.ndarray  # per tensor: time to rerun its producer (mechanism estimate)
    swap_out_s: np.ndarray  # per tensor: device-to-host copy time (mechanism estimate)
    swap_in_s: np.ndarray  # per tensor: host-to-device copy time (mechanism estimate)
    capacity_bytes: int
    step_s: float
    signatures: tuple[Signature, ...] = ()  # per tensor
    op_keys: tuple[OpKey, ...] = ()  # per op


@dataclass(frozen=True)
class StepReport:
    """The previous iteration: its op count (always monitored) and outcome."""

    iteration: int
    op_count: int
    step_s: float
    forced_swaps: int
    profile: ProfileView | None = None
    plan_misses: int = 0  # planned tensors the executor could not match


@dataclass(frozen=True)
class StepDecision:
    """The plan for the next iteration and whether to profile it."""

    plan: SwapPlan = field(default_factory=SwapPlan)
    profile: bool = False


class SwapPolicy(Protocol):
    """Decision point ``training.swap``."""

    def decide(self, report: StepReport | None) -> StepDecision:
        """Plan the next iteration from the previous one's report."""
        ...


class Unit(NamedTuple):
    """One unit of pipeline work on a stage: F, B or W of (microbatch, chunk, slice).

    A schedule without W units runs the whole backward as B. A schedule with W units
    (zero-bubble schedules, Qi et al., ICLR 2024) splits it: B computes the activation
    gradients (what the previous stage waits for), W the weight gradients, after the same
    unit's B on the same stage; activations are held until W."""

    kind: Literal["F", "B", "W"]
    micro: int
    chunk: int = 0
    slice: int = 0


@dataclass(frozen=True)
class PipelineView:
    """The pipeline's shape (stages p, microbatches m) and the mechanism's forward-cost
    estimate of one microbatch's sequence on one layer: ``linear_flops`` (GEMMs, uniform
    per token) and ``causal_attn_flops`` (causal attention; the prefix of fraction x of the
    sequence costs x^2 of it). Zeros mean no estimate."""

    stages: int
    micro_batches: int
    linear_flops: float = 0.0
    causal_attn_flops: float = 0.0


@dataclass(frozen=True)
class Schedule:
    """Per stage, its units in execution order; ``chunks`` model chunks per stage
    (virtual stages), ``slices`` sequence slices per microbatch; ``bounds`` the slice
    boundaries as fractions of the sequence (``slices + 1`` values from 0 to 1, increasing;
    empty: uniform slices). ``redistribute``: the mechanism evens out the slices'
    attention work by moving part of each heavy slice's attention to the device running
    the device that would run its mirror slice (SlimPipe's workload redistribution,
    uniform slices only; that device's time and memory are simulated) and charges the
    attention-context exchange, pipelined with the moved work (``exchange_overlap:
    attention``) or on the heavy device's stream (``none``); ``partner_priority``: the
    partner runs the moved work between the layers of its own unit (``interleave``) or
    after it (``queue``)."""

    order: tuple[tuple[Unit, ...], ...]
    chunks: int = 1
    slices: int = 1
    bounds: tuple[float, ...] = ()
    redistribute: bool = False
    exchange_overlap: Literal["attention", "none"] = "attention"
    partner_priority: Literal["interleave", "queue"] = "interleave"

    @property
    def split_backward(self) -> bool:
        """Whether the backward is split into B (activation) and W (weight) units."""
        return any(u.kind == "W" for o in self.order for u in o)


class SchedulePolicy(Protocol):
    """Decision point ``training.schedule``."""

    def schedule(self, view: PipelineView) -> Schedule:
        """The order of work units on every stage."""
        ...
