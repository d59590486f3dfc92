"""Read-only snapshots the TEE mechanisms hand to their policies, and the decisions.

``tee.protection`` (collaborative training, :mod:`workloads.tee_collab`): the view lists
the byte streams of one training step on each side; the policy names an enclave preset
per stream and for each side, a transfer mode and a verification mode.

``tee.execution`` (TEE + untrusted NNAs, :mod:`workloads.tee_nna`): the view lists every
op with the mechanism's time estimates in the TEE and on each NNA; the policy places
each op and chooses the prefetch depth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Annotated, Literal, NamedTuple, Protocol

from pydantic import AfterValidator

from hetsim.workloads.tee.secure import tee_preset

Side = Literal["cpu", "accel"]
Transfer = Literal["plain", "reencrypt", "direct", "bounce"]
Verify = Literal["none", "sync", "delayed"]
TEE = -1  # placement of an op kept inside the CPU TEE
#: placement of an op whose input is split into additive shares, one per NNA, each NNA
#: computing on its share in parallel (Nappa's vector decomposition, reconstruction)
DECOMPOSE = -2


def known_preset(name: str) -> str:
    """``name`` if it is an enclave preset, else ValueError listing the presets (so a
    policy's parameters fail at scenario validation, naming the field)."""
    try:
        tee_preset(name)
    except KeyError as e:
        raise ValueError(str(e).strip("'\"")) from None
    return name


Preset = Annotated[str, AfterValidator(known_preset)]


class StreamView(NamedTuple):
    """One byte stream of a training step on one side (CPU or accelerator)."""

    name: str
    side: Side
    nbytes_per_step: float
    is_tensor: bool  # a contiguous tensor (TensorTEE's TenAnalyzer would detect it)
    write: bool
    streams: int = 1  # arrays accessed side by side (Adam: param, m, v, grad)


class ProtectionView(NamedTuple):
    """The hardware and the streams of collaborative training."""

    cpu_type: str
    accel_type: str
    accel_kind: str
    streams: tuple[StreamView, ...]


class ProtectionPlan(NamedTuple):
    """Enclave presets (None: unprotected) per side and per stream, transfer, verification."""

    cpu_enclave: str | None
    accel_enclave: str | None
    stream_enclaves: tuple[str | None, ...]  # aligned with ProtectionView.streams
    transfer: Transfer
    verify: Verify
    #: presets a ``tensor`` stream falls back to on each side when the hardware does not
    #: detect it as a tensor (TensorTEE's cacheline fallback)
    fallback_cpu: str = "sgx-mee"
    fallback_accel: str = "tnpu-like"


class ProtectionPolicy(Protocol):
    """Decides how collaborative training is protected (decision point ``tee.protection``)."""

    def plan(self, view: ProtectionView) -> ProtectionPlan:
        """The protection of every stream and transfer."""
        ...


class OpView(NamedTuple):
    """One op of a training step with the mechanism's estimates (seconds per step)."""

    name: str
    offloadable: bool  # linear in one private operand: can be masked for an NNA
    tee_s: float  # the op run entirely inside the TEE
    protect_s: float  # TEE-side work when offloaded: mask, meta-keys, unmask, conversion
    nna_s: tuple[float, ...]  # compute on each NNA (inf: unsupported dtype)
    xfer_s: tuple[float, ...]  # masked input and output over the link to each NNA
    mask_s: float = 0.0  # part of protect_s before the NNA: masking, type conversion
    metakey_s: float = 0.0  # part of protect_s that can be prefetched: meta-key generation
    crossings_s: float = 0.0  # part of protect_s paid per interaction: ECALL/OCALL pairs
    nonlinear_s: float = 0.0  # part of protect_s a TEE-only run does too: nonlinear, update


class MicroTimes(NamedTuple):
    """One op's link and NNA seconds per micro-batch on each NNA at some micro-batch count."""

    nna_s: tuple[float, ...]
    xfer_s: tuple[float, ...]


class ExecutionView(NamedTuple):
    """Ops in execution order, the NNAs, and the toll of switching device between ops."""

    nnas: tuple[str, ...]
    ops: tuple[OpView, ...]
    switch_s: float  # enclave exit/entry when consecutive ops run on different devices
    #: the mechanism's estimate of a plan's step time (placement, depth[, micro-batches])
    #: -> seconds: the same task graph the step runs (None: no estimator offered)
    estimate_s: Callable[..., float] | None = None
    #: micro-batch counts the mechanism can interleave, and per count the ops' per
    #: micro-batch link and NNA times (count 1: the ops' own ``nna_s``, ``xfer_s``)
    micro_batch_options: tuple[int, ...] = (1,)
    micro: Mapping[int, tuple[MicroTimes, ...]] | None = None


class ExecutionPlan(NamedTuple):
    """Placement per op (:data:`TEE`, :data:`DECOMPOSE` or an NNA index), the meta-key
    prefetch depth and the number of micro-batches interleaved."""

    placement: tuple[int, ...]
    depth: int  # 0: no pipelining
    micro_batches: int = 1  # 1: the batch goes through each op in one piece


def best_micro_batches(
    view: ExecutionView, placement: tuple[int, ...], depth: int
) -> tuple[float, int]:
    """(estimate, count) of the micro-batch count of ``view.micro_batch_options`` with
    the lowest estimated step time for this placement (ties: the fewest)."""
    if view.estimate_s is None:
        return math.inf, 1
    return min(
        (view.estimate_s(placement, depth, m) if m > 1 else view.estimate_s(placement, depth), m)
        for m in view.micro_batch_options
    )


class ExecutionPolicy(Protocol):
    """Decides where each op runs and how far ahead the TEE prepares (``tee.execution``)."""

    def plan(self, view: ExecutionView) -> ExecutionPlan:
        """Placement and prefetch depth."""
        ...


def post_s(op: OpView) -> float:
    """TEE work after the NNA returns: unmasking, conversion, nonlinear work, update."""
    return max(0.0, op.protect_s - op.mask_s - op.metakey_s)


def offload_cost_s(op: OpView, k: int) -> float:
    """The mechanism's estimate for op on NNA ``k``: protection + transfer + compute."""
    return op.protect_s + op.xfer_s[k] + op.nna_s[k]


def fastest_nna(op: OpView) -> int:
    """Index of the NNA with the lowest estimated offload time (ties: lowest index)."""
    costs = [offload_cost_s(op, k) for k in range(len(op.nna_s))]
    return min(range(len(costs)), key=lambda k: (costs[k], k))
