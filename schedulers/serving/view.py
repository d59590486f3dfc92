"""Read-only snapshots the serving mechanism hands to its policies, and their decisions.

Three decision points: ``serving.deployment`` (which instances, on which GPU types, at
start), ``serving.routing`` (which instance gets a request on arrival and, after a
disaggregated prefill, which decode instance gets its KV cache) and
``serving.batching`` (what one continuous-batching iteration of an instance runs).
Every cost or capacity in a view is the mechanism's estimate from the device roofline.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, Protocol

Role = Literal["mixed", "prefill", "decode"]


# ---- deployment -----------------------------------------------------------------------
class ConfigView(NamedTuple):
    """One instance configuration (GPU type x TP degree) with the mechanism's estimates.

    ``*_rps``: requests/s one instance sustains within the SLOs for the workload's mean
    lengths (0 if it cannot meet them); ``usd_per_hour``: price of its ``gpus`` GPUs."""

    gpu_type: str
    tp: int
    gpus: int
    usd_per_hour: float
    kv_tokens: int
    prefill_rps: float
    decode_rps: float
    colocated_rps: float


class DeploymentView(NamedTuple):
    """What a deployment policy decides from: load, SLOs, GPU availability, configs."""

    target_rate_per_s: float
    mean_prompt_tokens: float
    mean_output_tokens: float
    slo_ttft_s: float
    slo_tpot_s: float
    available: tuple[tuple[str, int], ...]  # (gpu type, GPUs in the cluster)
    configs: tuple[ConfigView, ...]


class InstanceSpec(NamedTuple):
    """One instance to provision: its role, GPU type, TP degree and group (combo)."""

    role: Role
    gpu_type: str
    tp: int
    group: int = 0


class DeploymentPolicy(Protocol):
    """Decision point ``serving.deployment``: the instances to provision at start."""

    def deploy(self, view: DeploymentView) -> tuple[InstanceSpec, ...]:
        """Instances to start (the mechanism checks availability)."""
        ...


# ---- routing ----------------------------------------------------------------------------
class InstanceView(NamedTuple):
    """One instance as a router sees it."""

    number: int
    group: int
    gpu_type: str
    role: Role
    outstanding: int  # requests assigned and not yet finished or handed off
    queued_tokens: int  # prompt tokens waiting for prefill
    running: int  # sequences in its decode batch
    free_kv_tokens: int
    goodput_rps: float  # the mechanism's estimate for this instance's role


class RouteView(NamedTuple):
    """A request to place: on arrival (``stage = entry``, candidates: mixed or prefill
    instances) or after prefill (``stage = decode``, candidates: decode instances)."""

    now_s: float
    request_id: int
    prompt_tokens: int
    stage: Literal["entry", "decode"]
    from_group: int  # group of the prefill instance (-1 on entry)
    instances: tuple[InstanceView, ...]


class RoutingPolicy(Protocol):
    """Decision point ``serving.routing``."""

    def route(self, view: RouteView) -> int:
        """``number`` of the chosen instance (one of ``view.instances``)."""
        ...


# ---- batching -----------------------------------------------------------------------
class BatchView(NamedTuple):
    """One instance about to start an iteration with prompts waiting.

    ``waiting``: (prompt tokens still to prefill, tokens already prefilled) of the
    first waiting requests, in queue order; decodes always need one KV slot each."""

    now_s: float
    role: Role
    running: int
    waiting: tuple[tuple[int, int], ...]
    free_kv_tokens: int
    block_tokens: int


class BatchPlan(NamedTuple):
    """Prefill chunk sizes for the first ``len(chunks)`` waiting requests (a chunk
    smaller than the request's remainder is a partial, chunked prefill) and whether
    the running decodes step in the same iteration."""

    chunks: tuple[int, ...]
    with_decodes: bool


class BatchingPolicy(Protocol):
    """Decision point ``serving.batching``."""

    def plan(self, view: BatchView) -> BatchPlan:
        """What this iteration runs."""
        ...


def blocks(tokens: int, block_tokens: int) -> int:
    """Paged-KV blocks holding ``tokens`` tokens: ceil(tokens / block_tokens)."""
    return -(-tokens // block_tokens)
