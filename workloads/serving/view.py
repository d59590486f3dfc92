"""Read-only snapshots the serving mechanism hands to its policies, and their decisions.

Decision points: ``serving.deployment`` (which instances, on which GPU types, at
start), ``serving.routing`` (which instance gets a request on arrival and, after a
disaggregated prefill, which decode instance gets its KV cache),
``serving.batching`` (what one continuous-batching iteration of an instance runs) and
``serving.scaling`` (every period: which unit to add, which to drain).
Every cost or capacity in a view is the mechanism's estimate on the device roofline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Literal, NamedTuple, Protocol, TypeVar, overload

Role = Literal["mixed", "prefill", "decode"]
T = TypeVar("T")


class LazyTuple(Sequence[T], Generic[T]):
    """A read-only sequence whose items ``make()`` returns on first use (then kept): the
    configs of a :class:`DeploymentView`, whose goodput estimates cost a run that never
    reads them (a fixed deployment) its start-up time. Compares equal to the tuple of its
    items."""

    __slots__ = ("_items", "_make")

    def __init__(self, make: Callable[[], tuple[T, ...]]) -> None:
        self._make: Callable[[], tuple[T, ...]] | None = make
        self._items: tuple[T, ...] = ()

    def _all(self) -> tuple[T, ...]:
        if self._make is not None:
            self._items, self._make = tuple(self._make()), None
        return self._items

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[T, ...]: ...
    def __getitem__(self, i: int | slice) -> T | tuple[T, ...]:
        return self._all()[i]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[T]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        items = tuple(other) if isinstance(other, LazyTuple) else other
        return self._all() == items

    def __hash__(self) -> int:
        return hash(self._all())

    def __add__(self, other: Sequence[Any]) -> tuple[Any, ...]:
        return self._all() + tuple(other)

    def __repr__(self) -> str:
        return repr(self._all())


# ---- deployment -----------------------------------------------------------------------
class BucketEstimate(NamedTuple):
    """One (prompt size, output size) bucket of the workload (Melange's request-size
    buckets) with one config's estimate: ``share`` of the requests fall in it, with
    these mean lengths; ``rps``: requests/s of this bucket alone that one colocated
    instance of the config sustains within the SLOs (0 if none); ``key``: the bucket's
    id (``workloads.serving_deploy.bucket_key``), what routing matches requests on."""

    prompt_tokens: float
    output_tokens: float
    share: float
    rps: float
    key: int = -1


class ConfigView(NamedTuple):
    """One instance configuration (GPU type x TP degree) with the mechanism's estimates.

    ``*_rps``: requests/s one instance sustains in that role at the sizing attainment,
    predicted over the workload's sampled lengths (``workloads/serving/estimate.py``; 0
    if it cannot meet the SLOs); ``usd_per_hour``: price of its ``gpus`` GPUs;
    ``power_cap_w``: the board power limit its GPUs run at (None: their TDP;
    ``workload.power_cap_options_w``); ``colocated_W``: the draw of its GPUs, serving
    colocated at ``colocated_rps`` (the run's power model, :func:`workloads.serving.deploy.
    instance_power_W`)."""

    gpu_type: str
    tp: int
    gpus: int
    usd_per_hour: float
    kv_tokens: int
    prefill_rps: float
    decode_rps: float
    colocated_rps: float
    buckets: tuple[BucketEstimate, ...] = ()  # per request-size bucket (colocated)
    power_cap_w: float | None = None
    colocated_W: float = 0.0


class SearchBudget(NamedTuple):
    """How hard a simulate-and-bisect goodput search works per candidate unit: runs of
    ``max(num_requests, rate x duration_s)`` Poisson requests, ``steps`` bisection
    steps on the rate, judged on SLO ``attainment``, ``routing`` inside the unit."""

    num_requests: int = 300
    duration_s: float = 60.0
    steps: int = 5
    attainment: float = 0.9
    routing: str = "jsq"


class DeploymentView(NamedTuple):
    """What a deployment policy decides from: load, SLOs, GPU availability, configs.

    Lengths and rate come from the held-out sizing sample (``workload.sizing_source``),
    never from the requests the run measures."""

    target_rate_per_s: float
    mean_prompt_tokens: float
    mean_output_tokens: float
    slo_ttft_s: float
    slo_tpot_s: float
    available: tuple[tuple[str, int], ...]  # (gpu type, GPUs in the cluster)
    configs: Sequence[ConfigView]  # a tuple, or a LazyTuple estimated on first use
    # the run's sizing estimator (workload.sizing_estimator), the same for every
    # deployment policy: with "simulate", ``simulate(unit's instances, estimate req/s,
    # budget)`` -> the largest req/s whose simulated SLO attainment reaches
    # budget.attainment, bisected on short seeded runs of Poisson requests drawn from the
    # workload's laws, over 1 + sizing_headroom as every estimate; with "analytic",
    # ``simulate`` is None and the configs' predicted goodputs are all there is
    simulate: Callable[[tuple[InstanceSpec, ...], float, SearchBudget], float] | None = None
    estimator: Literal["analytic", "simulate"] = "analytic"


class InstanceSpec(NamedTuple):
    """One instance to provision: its role, GPU type, TP degree and group (combo).

    ``plan``: (bucket key, req/s) of the request-size buckets the deployment planned
    this instance to serve (Melange; empty: no plan, any request); ``kv_layerwise``: a
    prefill instance sends each layer's KV as soon as it is computed, overlapped with
    the rest of the prefill (Splitwise), instead of after the whole prefill;
    ``power_cap_w``: the board power limit of its GPUs (None: their TDP), one of the
    configs' (``ConfigView.power_cap_w``)."""

    role: Role
    gpu_type: str
    tp: int
    group: int = 0
    plan: tuple[tuple[int, float], ...] = ()
    kv_layerwise: bool = False
    power_cap_w: float | None = None


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
    instances) or after prefill (``stage = decode``, candidates: decode instances).

    ``bucket``: the request's size-bucket key (-1: none); ``planned_rps``: parallel to
    ``instances``, the rate of that bucket the deployment planned for each candidate
    (empty when the deployment made no per-bucket plan); ``group_decode_rps``: on
    entry, (group, summed goodput estimate of its decode instances) for every group
    with decode instances in routing (empty when colocated); ``cached_tokens``: on
    entry with ``prefix_cache`` on, parallel to ``instances``, the tokens of the
    request's prompt that candidate's prefix cache holds now (empty otherwise)."""

    now_s: float
    request_id: int
    prompt_tokens: int
    stage: Literal["entry", "decode"]
    from_group: int  # group of the prefill instance (-1 on entry)
    instances: tuple[InstanceView, ...]
    bucket: int = -1
    planned_rps: tuple[float, ...] = ()
    group_decode_rps: tuple[tuple[int, float], ...] = ()
    cached_tokens: tuple[int, ...] = ()


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


# ---- scaling ----------------------------------------------------------------------------
UnitState = Literal["warming", "active", "draining"]


class UnitView(NamedTuple):
    """One scaling unit: a routing group of prefill/decode instances (a combo replica),
    or a group of colocated instances. ``goodput_rps``: the mechanism's estimate of what
    it sustains (min of its prefill and decode sums; the sum of its colocated instances);
    ``usd_per_hour``: price of its GPUs; ``added_s``: when it was provisioned."""

    group: int
    state: UnitState
    instances: int
    gpus: int
    goodput_rps: float
    usd_per_hour: float
    added_s: float


class ScaleView(NamedTuple):
    """What a scaling policy decides from, every ``period_s``.

    ``rate_per_s``: arrivals over the last ``window_s`` / ``window_s``; ``outstanding``:
    requests arrived and not finished; ``attainment``: SLO attainment of the requests
    finished in the window (NaN if none); ``capacity_rps``: summed goodput estimates of
    the warming and active units; ``deployment``: the configs with their estimates and
    prices, ``available`` = free GPUs per type now, target rate = ``rate_per_s``."""

    now_s: float
    window_s: float
    rate_per_s: float
    outstanding: int
    attainment: float
    capacity_rps: float
    disaggregated: bool
    units: tuple[UnitView, ...]
    deployment: DeploymentView


class ScaleDecision(NamedTuple):
    """Instances to provision now as one new unit (their ``group`` is ignored: the
    mechanism numbers the unit) and groups (active units) to drain."""

    add: tuple[InstanceSpec, ...] = ()
    drain: tuple[int, ...] = ()


class ScalingPolicy(Protocol):
    """Decision point ``serving.scaling``: ``period_s`` (None: never called) and
    ``window_s`` are the policy's; the mechanism wakes it every ``period_s``."""

    period_s: float | None
    window_s: float

    def decide(self, view: ScaleView) -> ScaleDecision:
        """What to add and what to drain now."""
        ...
