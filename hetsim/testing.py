"""Helpers to unit-test a policy on a hand-built view, without running a simulation.

A policy sees only its decision point's view (``workloads/<domain>/view.py``) and
returns a decision, so it can be checked on a view written by hand::

    from hetsim.testing import decide, dispatch_view, make_policy, server

    policy = make_policy("queueing.dispatch", "shortest-queue")  # or the class itself
    view = dispatch_view([server(0, jobs=3), server(1, jobs=1)])
    assert decide("queueing.dispatch", policy, view) == 1

:func:`make_policy` validates the parameters with the policy's ``Params`` (as a
scenario's ``policies:`` block is) and seeds its random stream; :func:`decide` calls
the method the decision point calls. The view builders fill every field a test does
not care about with a neutral default.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hetsim.simulator import registry
from hetsim.simulator.plugins import load_plugins
from hetsim.workloads.colocate.view import ArbiterView
from hetsim.workloads.queueing.view import DispatchView, ServerView
from hetsim.workloads.serving.view import InstanceView, RouteView

#: decision point -> the method its mechanism calls on the policy
METHODS: dict[str, str] = {
    "queueing.dispatch": "choose",
    "serving.deployment": "deploy",
    "serving.routing": "route",
    "serving.batching": "plan",
    "serving.scaling": "decide",
    "colocate.arbiter": "decide",
}


def make_policy(point: str, policy: str | type, seed: int = 0, **params: Any) -> Any:
    """An instance of ``policy`` (a registered name at ``point`` or a class) with
    ``params`` validated by its ``Params``, on a random stream seeded by ``seed``."""
    load_plugins()
    cls: Any = registry.policies.get(point, policy) if isinstance(policy, str) else policy
    if getattr(cls, "Params", None) is None:
        raise TypeError(f"{getattr(cls, '__name__', cls)} has no Params model")
    return cls(cls.Params.model_validate(params), rng=np.random.default_rng(seed))


def decide(point: str, policy: Any, view: Any) -> Any:
    """The decision of ``policy`` on ``view`` at ``point`` (the method its mechanism
    calls: :data:`METHODS`; other points: ``choose``)."""
    return getattr(policy, METHODS.get(point, "choose"))(view)


def server(
    number: int,
    *,
    jobs: int = 0,
    idle: bool | None = None,
    backlog_s: float = 0.0,
    est_service_s: float = 1.0,
    device_type: str = "ideal-server",
) -> ServerView:
    """One queueing server as a dispatcher sees it (idle: no jobs, unless given)."""
    idle = jobs == 0 if idle is None else idle
    return ServerView(number, f"n/server{number}", device_type, idle, jobs, backlog_s,
                      est_service_s)  # fmt: skip


def dispatch_view(
    servers: Sequence[ServerView], *, now_s: float = 0.0, request_id: int = 0,
    flops: float = 1e12, nbytes: float = 0.0,
) -> DispatchView:  # fmt: skip
    """A ``queueing.dispatch`` view: a request arriving at ``now_s`` and the servers."""
    return DispatchView(now_s, request_id, flops, nbytes, tuple(servers))


def instance(
    number: int,
    *,
    outstanding: int = 0,
    queued_tokens: int = 0,
    running: int = 0,
    free_kv_tokens: int = 100_000,
    goodput_rps: float = 1.0,
    gpu_type: str = "a100-80gb",
    role: str = "mixed",
    group: int = 0,
) -> InstanceView:
    """One serving instance as a router sees it."""
    return InstanceView(number, group, gpu_type, role, outstanding, queued_tokens,  # type: ignore[arg-type]
                        running, free_kv_tokens, goodput_rps)  # fmt: skip


def route_view(
    instances: Sequence[InstanceView], *, now_s: float = 0.0, request_id: int = 0,
    prompt_tokens: int = 512, stage: str = "entry", **extra: Any,
) -> RouteView:  # fmt: skip
    """A ``serving.routing`` view: a request to place on one of ``instances``
    (``extra``: the optional fields, e.g. ``cached_tokens``)."""
    return RouteView(now_s, request_id, prompt_tokens, stage, -1, tuple(instances), **extra)  # type: ignore[arg-type]


def arbiter_view(
    *, now_s: float = 0.0, rate_per_s: float | None = 10.0, busy_gpus: int = 2,
    free_gpus: int = 8, rps_per_gpu: float = 10.0, lent_gpus: int = 0,
    returning_gpus: int = 0, lendable_gpus: int | None = None, waiting_jobs: int = 1,
    gang_gpus: int = 1, restore_s: float = 0.0, checkpoint_s: float = 0.0, **extra: Any,
) -> ArbiterView:  # fmt: skip
    """A ``colocate.arbiter`` view: serving's load estimate and GPUs, the harvesters'
    (``lendable_gpus``: all of serving's free GPUs unless given; ``extra``: the shared-GPU
    fields, e.g. ``shared_gpus``)."""
    lendable = free_gpus if lendable_gpus is None else lendable_gpus
    return ArbiterView(now_s, rate_per_s, busy_gpus, free_gpus, rps_per_gpu, lent_gpus,
                       returning_gpus, lendable, waiting_jobs, gang_gpus, restore_s,
                       checkpoint_s, **extra)  # fmt: skip
