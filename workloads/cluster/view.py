"""Read-only snapshots the cluster mechanism hands to its three policies, and their decisions.

Every estimate in a view (solo and packed iteration times, remaining times per GPU type,
deadline feasibility) is computed by the mechanism from the throughput table and the
interleaving model; policies only compare them. Remaining work is the declared length
less progress (workloads.cluster.duration_estimate, ``workload.estimates``), never the
true iteration count; packed iteration times are the policy's own interference model,
which need not be the run's truth (``execution.interference_model``). Arrays in views
are read-only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

import numpy as np


class OrderingView(NamedTuple):
    """Active jobs (queued and, in preemptive rounds, running) at one scheduling pass."""

    now_s: float
    job: np.ndarray  # job ids
    submit_s: np.ndarray
    gpus: np.ndarray
    remaining_solo_s: np.ndarray  # remaining iterations x solo iteration time, reference type
    best_remaining_s: np.ndarray  # the same on the job's fastest allowed type
    attained_gpu_s: np.ndarray  # GPU-seconds of service received so far
    deadline_s: np.ndarray  # absolute; inf for best-effort jobs
    running: np.ndarray  # bool
    last_run_s: np.ndarray | None = None  # length of each job's last run segment (0: none)
    waiting_s: np.ndarray | None = None  # time since that segment ended (0: running/never ran)


class UnitView(NamedTuple):
    """A packing candidate: one queued job, or a running group that can take more members."""

    members: tuple[int, ...]  # job ids
    gpus: int
    running: bool
    rank: int  # position of its best member in the pass's order (0 = first)
    solo_iter_s: tuple[float, ...]  # per member, reference type
    remaining_iters: tuple[int, ...]
    deadline_s: tuple[float, ...]
    member_gpus: tuple[int, ...] = ()  # per member (empty: all ``gpus``)
    running_on: int = -1  # GPU type index a running group holds (-1: queued)


class PackingView(NamedTuple):
    """Candidates for interleaving when queued demand exceeds free GPUs."""

    now_s: float
    units: tuple[UnitView, ...]
    free_gpus: int
    max_group_size: int
    num_stages: int  # phases of the interleaving cycle (Muri's multi_resource)
    restart_s: float
    #: packed iteration time of a set of jobs on the reference type with Muri's per-size
    #: interference factors (the coarse estimate)
    estimate_iter_s: Callable[[tuple[int, ...]], float]
    #: the same with per-stage interference (Cuckoo's stage-grained estimate); None: absent
    estimate_stage_iter_s: Callable[[tuple[int, ...]], float] | None = None
    #: units with different GPU counts may merge (ablation ``execution.cross_gpu_packing``)
    cross_gpu: bool = False
    #: free GPUs per GPU type (empty: not offered)
    free_by_type: tuple[int, ...] = ()
    #: iteration time of a set of jobs on GPU type t with the stage-grained estimate (a
    #: lone job: its solo time on t; inf where a member may not run on t); None: absent
    estimate_stage_iter_on: Callable[[tuple[int, ...], int], float] | None = None
    #: the same with the data/network stages stretched by the set's own expected load on
    #: a node's CPU cores, storage and NIC against the share of the GPUs it holds
    #: (workloads.cluster_contention.ShareEstimate); offered only with node contention on
    estimate_contended_on: Callable[[tuple[int, ...], int], float] | None = None


class GroupView(NamedTuple):
    """A group waiting for GPUs, with the mechanism's per-type estimates."""

    members: tuple[int, ...]
    gpus: int
    allowed: tuple[bool, ...]  # per GPU type
    iter_s: tuple[float, ...]  # group iteration time per type (inf where not allowed)
    remaining_s: tuple[float, ...]  # restart + time until its last member ends, per type
    meets_deadlines: tuple[bool, ...]  # every deadline member finishes in time on that type
    has_deadline: bool
    urgency: float  # max over members of remaining solo time / time to deadline (0: none)
    #: per GPU type, seconds the members have held GPUs of that type (mean over members);
    #: filled for allocation policies with ``sees_running = True`` (else empty)
    received_s: tuple[float, ...] = ()
    active_s: float = 0.0  # mean time since the members' submission (same condition)
    running_on: int = -1  # type index a running group holds (-1: waiting)


class AllocationView(NamedTuple):
    """Groups in priority order and free GPUs per type."""

    now_s: float
    types: tuple[str, ...]
    free_gpus: tuple[int, ...]
    groups: tuple[GroupView, ...]
    #: running groups (``running_on`` set) and GPUs per type; filled only for allocation
    #: policies that declare ``sees_running = True`` (Gavel's LP needs every active job)
    running: tuple[GroupView, ...] = ()
    total_gpus: tuple[int, ...] = ()
    #: ``groups`` again with stage-grained estimates (per-stage interference, Cuckoo's model)
    groups_stage: tuple[GroupView, ...] = ()
    #: space sharing (Gavel's measured pairs, ``speeds.pairs_path``; None: not offered):
    #: per member, the iteration time of a combination of job ids on type t (a lone job:
    #: its solo time; a measured pair: each member's own, through the interference
    #: estimator; inf where unmeasured or not allowed)
    combo_iter_s: Callable[[tuple[int, ...], int], tuple[float, ...]] | None = None
    #: per combination of job ids (one job or a pair): seconds it has run together per
    #: GPU type (a lone job: its time alone), and seconds since its last member arrived
    combo_service: Callable[[tuple[int, ...]], tuple[tuple[float, ...], float]] | None = None


class SpaceShared(NamedTuple):
    """An allocation decision with co-located pairs (Gavel's space sharing): ``types``
    as a plain allocation (per group, a type index or None) and ``pairs`` of group
    indices that share one gang of GPUs of their common type. In a preemptive round a
    running group in a pair is stopped (its job rejoins the queue for the fill that
    follows)."""

    types: list[int | None]
    pairs: tuple[tuple[int, int], ...]


class OrderingPolicy(Protocol):
    """Decision point ``cluster.ordering``: the priority order of active jobs.

    Optional, for event-driven preemption (Tiresias): ``preemptive: bool`` (True: the
    mechanism preempts at every pass, not only at rounds) and ``next_change_gpu_s(view)
    -> np.ndarray``, per job the attained GPU-seconds at which its priority next changes
    (inf: never); the mechanism turns that into the instant of a pass."""

    def order(self, view: OrderingView) -> np.ndarray:
        """Positions into the view's arrays, highest priority first (a permutation)."""
        ...


class PackingPolicy(Protocol):
    """Decision point ``cluster.packing``: which candidates to interleave."""

    def pack(self, view: PackingView) -> list[tuple[int, ...]]:
        """Disjoint tuples of unit indices to merge into one group each."""
        ...


class AllocationPolicy(Protocol):
    """Decision point ``cluster.allocation``: the GPU type of each waiting group."""

    def allocate(self, view: AllocationView) -> list[int | None] | SpaceShared:
        """Per group, a type index with enough free GPUs, or None (wait); a policy that
        space-shares (``view.combo_iter_s`` offered) may return :class:`SpaceShared`.

        A policy with ``sees_running = True`` is also asked at preemptive rounds with the
        running groups among ``groups`` (``running_on`` set) and ``free_gpus`` equal to
        the total: a running group keeps its GPUs only if given its own type again."""
        ...
