"""DL training jobs on a heterogeneous GPU cluster: queueing, packing and placement.

Mechanism (events only, never a process per iteration): jobs arrive, wait, and run in
groups of 1..max_group_size jobs sharing one gang of same-type GPUs, interleaving their
stages (workloads.cluster_model). A group's members each finish one iteration per group
iteration; when a group forms, grows, shrinks or is preempted, progress is settled and
completion times are recomputed. A (re)start or regroup costs ``restart_s`` of no
progress (checkpoint-restart). One coalesced scheduling pass runs at the end of each
instant with an arrival, a completion or a periodic round (``sim.at_end_of_instant``):
it asks the ordering, packing and allocation policies in turn, with views built by
workloads.cluster_estimates. Rounds with ``preemption`` may first stop running groups
that the order no longer admits. With ``contention.enabled``, groups sharing a node also
contend for its CPU cores, storage and NIC (workloads.cluster_contention): a change of
the groups on a node re-times the others there.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from hetsim.devices.cluster import Cluster
from hetsim.simulator.budget import WorkEstimate
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, conserve
from hetsim.workloads.cluster.contention import (
    NO_STRETCH,
    NodeContention,
    ShareEstimate,
    Stretch,
    node_capacities,
)
from hetsim.workloads.cluster.data import read_speed_table
from hetsim.workloads.cluster.duration_estimate import DurationEstimator, error_factors
from hetsim.workloads.cluster.estimates import Estimator
from hetsim.workloads.cluster.interference_estimate import InterferenceError
from hetsim.workloads.cluster.jobs import build_jobs
from hetsim.workloads.cluster.metrics import JOB_COLUMNS, METRICS, summarise
from hetsim.workloads.cluster.model import GpuPool, Group, inventory
from hetsim.workloads.cluster.pairs import pair_slowdowns, read_pair_table
from hetsim.workloads.cluster.params import ClusterParams
from hetsim.workloads.cluster.power_cap import (
    check_no_node_caps,
    gpu_stage_stretch,
    inventory_power_models,
)
from hetsim.workloads.cluster.scheduling_pass import SchedulingPass
from hetsim.workloads.cluster.timeline import GpuTimeline
from hetsim.workloads.paths import resolve_path


@workloads.register("cluster")
class ClusterWorkload(Workload):
    """DL jobs with multi-resource stages on heterogeneous GPUs; Muri/Cuckoo packing."""

    Params = ClusterParams
    domain = "cluster"
    decision_points: ClassVar[dict[str, str]] = {
        "ordering": "fifo",
        "packing": "none",
        "allocation": "first-fit",
    }
    metrics: ClassVar[dict[str, str]] = METRICS

    def __init__(
        self, sim: Simulation, cluster: Cluster, params: ClusterParams,
        policies: dict[str, Any], base_dir: Path,
    ) -> None:  # fmt: skip
        super().__init__(sim, cluster, params, policies, base_dir)
        ex = params.execution
        if len(ex.interference) < ex.max_group_size:
            raise ValueError("execution.interference needs one factor per group size")
        if ex.max_group_size > ex.data_slots + 2:
            raise ValueError(
                f"execution.max_group_size {ex.max_group_size} exceeds the cycle's "
                f"{ex.data_slots + 2} phases (data_slots + 2)"
            )
        self.types, nodes = inventory(params, base_dir)
        if params.speeds.reference_type not in self.types and params.jobs.kind != "alibaba2023":
            raise ValueError(
                f"speeds.reference_type {params.speeds.reference_type!r} is not in the "
                f"inventory {self.types}"
            )
        self.pool = GpuPool(self.types, nodes)
        rngs = {k: sim.rng(f"cluster.{k}") for k in ("jobs", "deadlines")}
        self.jobs = build_jobs(params, self.types, base_dir, rngs)
        check_no_node_caps(cluster.config)
        if cluster.config.accelerator_power_cap_w is not None:  # workloads.cluster.power_cap
            models = inventory_power_models(self.types, cluster.config, strict=True)
            assert models is not None
            stretch = gpu_stage_stretch(models, ex.compute_bound_fraction)
            self.jobs = replace(self.jobs, speed=self.jobs.speed / stretch[None, :])
        self._check_every_job_fits()
        #: declared job lengths: the only job lengths policies see (workload.estimates)
        self.lengths = DurationEstimator(
            self.jobs.iterations,
            error_factors(params.estimates, self.jobs.n, sim.rng("cluster.estimates")),
        )
        self.contention: NodeContention | None = None
        if params.contention.enabled:
            inv = params.inventory
            caps = [g for g in inv for _ in range(g.nodes)] if isinstance(inv, list) else [
                inv] * len(nodes)  # fmt: skip
            self.contention = NodeContention(node_capacities(caps), self.jobs, params.contention)
        ref = self.types.index(params.speeds.reference_type) if (
            params.speeds.reference_type in self.types) else 0  # fmt: skip
        #: interference estimates the policies see: their model x the estimator's error
        seed = int(sim.rng("cluster.interference_estimate").integers(2**63))
        self.est = Estimator(self.jobs, ex, ref, InterferenceError(params.estimates, seed))
        if params.speeds.pairs_path is not None:
            self._use_pairs(base_dir)
        pool = self.pool  # Cuckoo's contention-aware packing estimate (None: contention off)
        self.share = None if self.contention is None else ShareEstimate(
            self.contention, self.est, pool.node_type, pool.capacity, len(self.types))  # fmt: skip
        n = self.jobs.n
        self.done_iters = np.zeros(n)
        self.attained = np.zeros(n)
        self.received = np.zeros((n, len(self.types)))  # seconds holding GPUs, per type
        #: kept only for allocation policies that see running groups (Gavel), as it costs
        self.track_received = bool(getattr(policies["allocation"], "sees_running", False))
        #: with measured pairs: seconds each pair (sorted job ids) shared a type, and
        #: ``received`` then counts a job's time alone (Gavel's per-combination service)
        self.pair_received: dict[tuple[int, ...], np.ndarray] | None = (
            {} if self.track_received and params.speeds.pairs_path is not None else None
        )
        self.first_start = np.full(n, np.nan)
        self.run_since = np.full(n, np.nan)  # start of the current run (Tiresias starvation)
        self.last_run = np.zeros(n)  # length of the last finished run segment
        self.stopped_at = np.full(n, np.nan)  # when the last run segment ended
        self.finish = np.full(n, np.nan)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.group_of = np.full(n, -1, dtype=np.int64)
        self.queued: dict[int, None] = {}
        self.groups: dict[int, Group] = {}
        self.packed: dict[int, None] = {}  # running groups with >= 2 members (for unpack)
        self._next_gid = 0
        self._next_arrival = 0
        self._round_due = False
        self._round_timer = False
        self._change_version = 0
        self.completed = 0
        self.rows = sim.recorder.table("jobs", JOB_COLUMNS)
        self.allocs = sim.recorder.table(
            "allocations", ("group", "gpu_type", "gpus", "size", "start_s", "end_s")
        )
        self.alloc_spans: list[tuple[int, int, float, float, int]] = []
        self.stretched = sim.recorder.table(
            "contention", ("group", "gpus", "start_s", "end_s", "data_stretch", "net_stretch")
        ) if self.contention is not None else None  # fmt: skip
        self.log: list[tuple[str, float, int]] = []  # (event, time, job/group) for tests
        self.passer = SchedulingPass(self)
        #: which numbered GPU each group holds, for the trace (None: spans off)
        self.timeline = GpuTimeline(
            sim.recorder, self.types, self.pool.node_type.tolist(), self.pool.capacity.tolist()
        ) if sim.recorder.record_spans else None  # fmt: skip
        sim.add_invariant(self.check_pool)

    def _use_pairs(self, base_dir: Path) -> None:
        """Gavel's measured co-location pairs as the ground truth of two-job groups
        (``speeds.pairs_path``; workloads.cluster.pairs)."""
        sp = self.params.speeds
        assert sp.pairs_path is not None
        table = read_pair_table(resolve_path(sp.pairs_path, base_dir))
        isolated = read_speed_table(resolve_path(sp.path, base_dir))
        gpus = self.jobs.gpus.tolist()
        names = [sp.model_map.get(m) if int(g) == 1 else None
                 for m, g in zip(self.jobs.model, gpus, strict=True)]  # fmt: skip
        self.est.use_pairs(names, lambda per_profile: pair_slowdowns(
            per_profile, self.types, table, isolated))  # fmt: skip

    def _check_every_job_fits(self) -> None:
        """A job needing more GPUs than any type it may use has can never start: refuse
        the scenario up front (the queue would never drain) and name the job."""
        jobs, total = self.jobs, self.pool.total
        fits = (jobs.allowed & (jobs.gpus[:, None] <= total[None, :])).any(axis=1)
        if fits.all():
            return
        j = int(np.flatnonzero(~fits)[0])
        usable = [f"{t} ({int(total[i])} GPUs)" for i, t in enumerate(self.types)
                  if jobs.allowed[j, i]]  # fmt: skip
        raise ValueError(
            f"job {j} ({jobs.model[j]}, {int(jobs.gpus[j])} GPUs) fits no GPU type: it may "
            f"use {', '.join(usable) or 'none of ' + str(self.types)}; "
            f"{int((~fits).sum())} of {jobs.n} jobs cannot run"
        )

    # ---- arrivals, rounds, passes -------------------------------------------------
    def start(self) -> None:
        """Schedule the first arrival."""
        self._schedule_arrival()

    def _schedule_arrival(self) -> None:
        if self._next_arrival >= self.jobs.n:
            return
        delay = max(0.0, float(self.jobs.submit_s[self._next_arrival]) - self.sim.now)
        self.sim.env.timeout(delay).callbacks.append(self._arrive)

    def _arrive(self, _: object) -> None:
        now, n = self.sim.now, self.jobs.n
        while self._next_arrival < n and self.jobs.submit_s[self._next_arrival] <= now:
            j = self._next_arrival
            self.queued[j] = None
            self.log.append(("arrive", now, j))
            self._next_arrival += 1
        self._request_pass()
        self._start_rounds()
        self._schedule_arrival()

    def _start_rounds(self) -> None:
        if self.params.execution.round_s is None or self._round_timer:
            return
        self._round_timer = True
        self.sim.env.timeout(self.params.execution.round_s).callbacks.append(self._round)

    def _round(self, _: object) -> None:
        self._round_timer = False
        if self.queued or self.groups:
            self._round_due = True
            self._request_pass()
            self._start_rounds()

    def _request_pass(self) -> None:
        self.sim.at_end_of_instant(("cluster", "pass"), self._pass)

    def _pass(self) -> None:
        self.log.append(("pass", self.sim.now, -1))
        round_preempts = self.params.execution.preemption or getattr(
            self.policies["allocation"], "preempts_at_rounds", False
        )
        if (self._round_due and round_preempts) or self._event_preemption:
            self.passer.preempt_round()
        self._round_due = False
        self.passer.fill()
        self.passer.unpack()
        if self._event_preemption:
            self._arm_priority_change()
        if self.completed == self.jobs.n and not self.done.triggered:
            self.done.succeed()

    @property
    def _event_preemption(self) -> bool:
        """The ordering policy preempts at its own priority changes, arrivals and
        completions (Tiresias), not only at rounds; not with an allocation policy that
        re-decides running groups itself (Gavel's LP)."""
        return bool(getattr(self.policies["ordering"], "preemptive", False)) and not getattr(
            self.policies["allocation"], "sees_running", False
        )

    def _arm_priority_change(self) -> None:
        """While jobs wait, schedule a pass at the earliest instant a running job's
        attained GPU-service reaches the level where the ordering policy's priority of it
        changes (``next_change_gpu_s``); service grows at its GPU count per second after
        its restart delay. Superseded by any later pass."""
        self._change_version += 1
        if not self.queued or not self.groups:
            return
        ids = np.array([j for g in self.groups.values() for j in g.members], dtype=np.int64)
        view = self.passer.ordering_view(ids, np.ones(len(ids), bool))
        level = np.asarray(self.policies["ordering"].next_change_gpu_s(view), dtype=float)
        now, best = self.sim.now, np.inf
        for j, target in zip(ids.tolist(), level.tolist(), strict=True):
            if not np.isfinite(target):
                continue
            g = self.groups[int(self.group_of[j])]
            need = max(0.0, target - float(self.attained[j]))
            best = min(best, max(now, g.resume_s) + need / float(self.jobs.gpus[j]))
        if np.isfinite(best):
            version = self._change_version
            self.sim.env.timeout(best - now).callbacks.append(
                lambda _: self._priority_change(version)
            )

    def _priority_change(self, version: int) -> None:
        if version == self._change_version:
            self.log.append(("priority", self.sim.now, -1))
            self._request_pass()

    # ---- group life cycle ---------------------------------------------------------
    def remaining(self, j: int) -> int:
        """Whole iterations job ``j`` still has to run (ceil of the fractional rest)."""
        return int(np.ceil(self.jobs.iterations[j] - self.done_iters[j] - 1e-9))

    def estimated_remaining(self, j: int) -> int:
        """Whole iterations job ``j`` has left by its declared length (what policies see)."""
        return self.lengths.remaining_whole(j, float(self.done_iters[j]))

    def start_group(self, members: list[int], t: int) -> None:
        """Place a new group of queued jobs on type ``t`` (the pool picks the nodes)."""
        gpus = int(self.jobs.gpus[members].max())
        parts = self.pool.allocate(t, gpus)
        if parts is None:
            raise InvariantViolation(f"allocation of {gpus} GPUs on {self.types[t]} failed")
        now = self.sim.now
        g = Group(self._next_gid, list(members), t, gpus, parts, 0.0, now,
                  now + self.params.execution.restart_s, now)  # fmt: skip
        self._next_gid += 1
        self.groups[g.gid] = g
        if self.timeline is not None:
            self.timeline.start(g.gid, parts, g.members, now)
        self._admit(g, members)
        self._reschedule(g)

    def join_group(self, g: Group, newcomers: list[int]) -> None:
        """Add queued jobs to a running group: all members pay a restart."""
        self.settle(g)
        self._admit(g, newcomers)
        g.members.extend(newcomers)
        g.resume_s = self.sim.now + self.params.execution.restart_s
        self._trace(g)
        self._reschedule(g)

    def _admit(self, g: Group, jobs: list[int]) -> None:
        """Queued ``jobs`` start running in ``g`` now."""
        now = self.sim.now
        for j in jobs:
            del self.queued[j]
            self.group_of[j] = g.gid
            if np.isnan(self.first_start[j]):
                self.first_start[j] = now
            self.run_since[j] = now
            self.log.append(("start", now, j))

    def detach(self, g: Group, j: int) -> None:
        """Take member ``j`` out of the packed group ``g`` back to the queue (to run alone on
        free GPUs); the members left pay a restart, as for any regroup."""
        self.settle(g)
        g.members.remove(j)
        self.group_of[j] = -1
        self.queued[j] = None
        self._end_run(j)
        self.log.append(("detach", self.sim.now, j))
        g.resume_s = self.sim.now + self.params.execution.restart_s
        self._shrink(g)
        self._trace(g)
        self._reschedule(g)

    def _trace(self, g: Group) -> None:
        """Bring the trace's GPU spans of ``g`` up to its members and size."""
        if self.timeline is not None:
            self.timeline.sync(g.gid, g.members, g.gpus, self.sim.now)

    def _shrink(self, g: Group) -> None:
        """Release GPUs a group no longer needs (cross-GPU packing: its largest member
        left); the released part is recorded as an allocation that ends now."""
        need = int(self.jobs.gpus[g.members].max())
        extra = g.gpus - need
        if extra <= 0:
            return
        freed, parts, left = [], list(g.parts), extra
        while left > 0:
            node, k = parts.pop()
            take = min(k, left)
            freed.append((node, take))
            if k > take:
                parts.append((node, k - take))
            left -= take
        self.pool.release(freed)
        g.parts, g.gpus = parts, need
        self._record_alloc(g, extra)

    def stop_group(self, g: Group, preempted: bool) -> None:
        """Release a group's GPUs; with ``preempted`` its members go back to the queue."""
        self.settle(g)
        self.pool.release(g.parts)
        if self.timeline is not None:
            self.timeline.stop(g.gid, self.sim.now)
        del self.groups[g.gid]
        self.packed.pop(g.gid, None)
        g.version += 1
        if self.contention is not None:
            self._set_stretch(g, NO_STRETCH)
            for h in sorted(self.contention.remove(g.gid)):
                self._retime(self.groups[h])
        self._record_alloc(g, g.gpus)
        for j in g.members:
            self.group_of[j] = -1
            if preempted:
                self.preemptions[j] += 1
                self.queued[j] = None
                self._end_run(j)
                self.log.append(("preempt", self.sim.now, j))

    def _record_alloc(self, g: Group, gpus: int) -> None:
        """``gpus`` of ``g`` held from its start until now (table ``allocations``)."""
        now = self.sim.now
        self.alloc_spans.append((g.t, gpus, g.start_s, now, g.max_size))
        self.allocs.append(g.gid, self.types[g.t], gpus, g.max_size, g.start_s, now)

    def _end_run(self, j: int) -> None:
        self.last_run[j] = self.sim.now - self.run_since[j]
        self.stopped_at[j] = self.sim.now

    def settle(self, g: Group) -> None:
        """Credit the iterations and GPU service of ``g`` up to now (``received``: time
        holding GPUs of the group's type, restart included, for Gavel's priorities)."""
        now = self.sim.now
        if self.track_received and now > g.since_s:
            if self.pair_received is not None and len(g.members) == 2:
                key = tuple(sorted(g.members))
                held = self.pair_received.setdefault(key, np.zeros(len(self.types)))
                held[g.t] += now - g.since_s
            else:
                self.received[g.members, g.t] += now - g.since_s
        begin = max(g.since_s, g.resume_s)
        if now > begin:
            if g.member_iter_s:  # a measured pair: each member at its own rate
                self.done_iters[g.members] += (now - begin) / np.asarray(g.member_iter_s)
            else:
                self.done_iters[g.members] += (now - begin) / g.iter_s
            self.attained[g.members] += (now - begin) * self.jobs.gpus[g.members]
        g.since_s = now

    def _reschedule(self, g: Group) -> None:
        if len(g.members) > 1:
            self.packed[g.gid] = None
        else:
            self.packed.pop(g.gid, None)
        g.iter_s = self.est.iter_s(g.members, g.t)
        g.member_iter_s = self.est.member_iter_s(g.members, g.t) or ()
        touched: set[int] = set()
        if self.contention is not None:
            c = self.contention
            touched = c.place(g.gid, c.group_loads(g.members, g.gpus, g.parts, g.iter_s))
            self._set_stretch(g, c.stretch(g.gid))
            self._stretch_members(g, self.est.stretched_iter_s(g.members, g.t, g.stretch))
        g.max_size = max(g.max_size, len(g.members))
        self._arm(g)
        for h in sorted(touched):
            self._retime(self.groups[h])

    def _stretch_members(self, g: Group, iter_s: float) -> None:
        """Set the group's (contention-stretched) iteration time; a measured pair's
        member times scale by the same ratio."""
        if g.member_iter_s and g.iter_s > 0:
            g.member_iter_s = tuple(x * iter_s / g.iter_s for x in g.member_iter_s)
        g.iter_s = iter_s

    def _arm(self, g: Group) -> None:
        """(Re)set the group's next completion timer: the first member to finish at its
        iteration time (each member's own in a measured pair)."""
        g.version += 1
        own = g.member_iter_s or (g.iter_s,) * len(g.members)
        left = min(max(0.0, self.jobs.iterations[j] - self.done_iters[j]) * it
                   for j, it in zip(g.members, own, strict=True))  # fmt: skip
        delay = max(g.resume_s, self.sim.now) - self.sim.now + left
        version = g.version
        self.sim.env.timeout(delay).callbacks.append(lambda _: self._tick(g, version))

    def _retime(self, g: Group) -> None:
        """Node contention changed around running group ``g``: settle its progress at the
        old iteration time, then run on at the new one (no restart: nothing moved)."""
        assert self.contention is not None
        s = self.contention.stretch(g.gid)
        if s == g.stretch:
            return
        self.settle(g)
        self._set_stretch(g, s)
        if g.member_iter_s:  # back to the unstretched pair times, then stretch anew
            g.iter_s = self.est.iter_s(g.members, g.t)
            g.member_iter_s = self.est.member_iter_s(g.members, g.t) or ()
        self._stretch_members(g, self.est.stretched_iter_s(g.members, g.t, s))
        self._arm(g)

    def _set_stretch(self, g: Group, s: Stretch) -> None:
        """Record the interval ``g`` ran stretched (table ``contention``), then switch."""
        now = self.sim.now
        if g.stretch != NO_STRETCH and self.stretched is not None and now > g.stretch_since_s:
            self.stretched.append(g.gid, g.gpus, g.stretch_since_s, now, g.stretch[0], g.stretch[2])
        g.stretch, g.stretch_since_s = s, now

    def _tick(self, g: Group, version: int) -> None:
        if g.version != version:
            return  # superseded by a regroup, preemption or earlier completion
        self.settle(g)
        now = self.sim.now
        tol = 1e-9 * self.jobs.iterations[g.members].max() + 1e-9
        ended = [j for j in g.members if self.jobs.iterations[j] - self.done_iters[j] <= tol]
        for j in ended:
            self._finish(j, g)
        g.members = [j for j in g.members if j not in ended]
        if not g.members:
            g.members = ended  # for the allocation record
            self.stop_group(g, preempted=False)
        else:
            self._shrink(g)
            self._trace(g)
            self._reschedule(g)
        self.log.append(("tick", now, g.gid))
        self._request_pass()

    def _finish(self, j: int, g: Group) -> None:
        now = self.sim.now
        if not np.isnan(self.finish[j]):
            raise InvariantViolation(f"job {j} completed twice")
        self.done_iters[j] = self.jobs.iterations[j]
        self.finish[j] = now
        self.group_of[j] = -1
        self.completed += 1
        self.log.append(("finish", now, j))
        jb = self.jobs
        self.rows.append(
            j, jb.model[j], int(jb.gpus[j]), float(jb.submit_s[j]), float(self.first_start[j]),
            now, now - float(jb.submit_s[j]), float(self.first_start[j] - jb.submit_s[j]),
            float(jb.deadline_s[j]), bool(now <= jb.deadline_s[j]), int(self.preemptions[j]),
            self.types[g.t], len(g.members), float(jb.solo_s[j]),
        )  # fmt: skip

    # ---- checks and summary -------------------------------------------------------
    def check_pool(self) -> None:
        """No GPU double-allocated: free + allocated == capacity on every node."""
        used = np.zeros_like(self.pool.capacity)
        for g in self.groups.values():
            for node, k in g.parts:
                used[node] += k
        if np.any(used + self.pool.node_free != self.pool.capacity) or np.any(used < 0):
            raise InvariantViolation("GPU accounting broken: a GPU is double-allocated or lost")

    @classmethod
    def estimate_work(cls, params: ClusterParams) -> WorkEstimate | None:
        """Jobs x scheduling rounds each: an arrival, a completion and, with
        ``execution.round_s``, one pass per round a job of mean length is active
        (synthetic jobs: ``duration_median_s exp(sigma^2 / 2)``; trace jobs: their
        lengths are read at build, so the count of jobs alone). None: a trace read
        whole (no ``max_jobs``)."""
        jobs = params.jobs
        n = getattr(jobs, "num_jobs", None) or getattr(jobs, "max_jobs", None)
        if n is None:
            return None
        rounds, how = 2.0, "arrival and completion"
        round_s = params.execution.round_s
        if round_s is not None and jobs.kind == "synthetic":
            mean_s = jobs.duration_median_s * float(np.exp(min(jobs.duration_sigma, 10.0) ** 2 / 2))
            rounds += mean_s / round_s
            how = f"rounds of {round_s:g} s over a {mean_s:.3g} s mean job"
        return WorkEstimate(n * rounds, None, f"{n} jobs x {rounds:.4g} {how}")

    def check_partial(self) -> None:
        """At any moment: every job completed, queued, running in exactly one group, or
        not yet submitted; none both queued and running; GPU accounting intact."""
        n = self.jobs.n
        running = [j for g in self.groups.values() for j in g.members]
        both = set(running) & set(self.queued)
        if both or len(set(running)) != len(running):
            j = min(both) if both else next(j for j in running if running.count(j) > 1)
            raise InvariantViolation(f"cluster job {j} is in two places (queued or groups)")
        finished = int(np.isfinite(self.finish).sum())
        if finished != self.completed:
            raise InvariantViolation(
                f"cluster: {self.completed} jobs counted completed, {finished} have a finish time"
            )
        conserve("cluster jobs", n, self.completed, len(running) + len(self.queued),
                 n - self._next_arrival)  # fmt: skip
        self.check_pool()

    def check(self) -> None:
        """Every job completed exactly once; nothing left running or queued."""
        if self.completed != self.jobs.n or np.isnan(self.finish).any():
            raise InvariantViolation(f"{self.jobs.n - self.completed} jobs never completed")
        if self.groups or self.queued:
            raise InvariantViolation("groups or queued jobs left at the end")
        if self.contention is not None and self.contention.contrib:
            raise InvariantViolation("node contention still counts groups that stopped")
        self.check_pool()

    def horizon_s(self) -> float | None:
        """Last submit time plus the longest solo duration (a rough end guess)."""
        return float(self.jobs.submit_s.max() + self.jobs.solo_s.max())

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """The summary row (definitions in :data:`workloads.cluster_metrics.METRICS`)."""
        return summarise(self, end_s)
