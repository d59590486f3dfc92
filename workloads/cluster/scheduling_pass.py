"""One scheduling pass of the cluster workload: order, pack, allocate, apply.

The pass asks the three policies with read-only views and applies their decisions after
checking them (a decision that over-commits a GPU type or breaks the packing rules is a
bug in the policy and raises). Only the first ``execution.window`` queued jobs in the
policy's order are candidates, so a pass costs O(queue) for the sort and O(window) for
the rest, independent of the number of GPUs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from hetsim.simulator.engine import InvariantViolation
from hetsim.workloads.cluster.estimates import (
    allocation_view,
    group_view,
    ordering_view,
    packing_view,
    readonly,
    unit_view,
    with_service,
)
from hetsim.workloads.cluster.view import AllocationView, GroupView, OrderingView, SpaceShared

if TYPE_CHECKING:
    from hetsim.simulator.engine import Simulation
    from hetsim.workloads.cluster.contention import ShareEstimate
    from hetsim.workloads.cluster.duration_estimate import DurationEstimator
    from hetsim.workloads.cluster.estimates import Estimator
    from hetsim.workloads.cluster.jobs import JobTable
    from hetsim.workloads.cluster.model import GpuPool, Group
    from hetsim.workloads.cluster.params import ClusterParams


class ClusterState(Protocol):
    """The state and group operations of a cluster run that a scheduling pass reads and
    drives (workloads.cluster.workload.ClusterWorkload)."""

    sim: Simulation
    params: ClusterParams
    #: decision point -> policy ("ordering", "packing", "allocation")
    policies: dict[str, Any]
    types: list[str]
    pool: GpuPool
    jobs: JobTable
    est: Estimator
    #: declared job lengths (the estimator of remaining work every view reads)
    lengths: DurationEstimator
    #: contention-aware packing estimate (None: node contention off)
    share: ShareEstimate | None
    #: per job: iterations done, GPU-seconds attained, seconds held per GPU type, length of
    #: the last run segment, when it ended, and its running group's id (-1: none)
    done_iters: np.ndarray
    attained: np.ndarray
    received: np.ndarray
    last_run: np.ndarray
    stopped_at: np.ndarray
    group_of: np.ndarray
    #: with measured pairs and an allocation policy that sees running groups: seconds
    #: each pair (sorted job ids) shared each type (None: no space sharing)
    pair_received: dict[tuple[int, ...], np.ndarray] | None
    #: queued jobs in arrival order; running groups by id; the packed ones among them
    queued: dict[int, None]
    groups: dict[int, Group]
    packed: dict[int, None]

    def remaining(self, j: int) -> int:
        """Whole iterations job ``j`` still has to run."""
        ...

    def estimated_remaining(self, j: int) -> int:
        """Whole iterations job ``j`` has left by its declared length."""
        ...

    def start_group(self, members: list[int], t: int) -> None:
        """Place a new group of queued jobs on type ``t``."""
        ...

    def join_group(self, g: Group, newcomers: list[int]) -> None:
        """Add queued jobs to a running group."""
        ...

    def detach(self, g: Group, j: int) -> None:
        """Take member ``j`` out of the packed group ``g`` back to the queue."""
        ...

    def stop_group(self, g: Group, preempted: bool) -> None:
        """Release a group's GPUs; with ``preempted`` its members go back to the queue."""
        ...

    def settle(self, g: Group) -> None:
        """Credit the iterations and GPU service of ``g`` up to now."""
        ...


class SchedulingPass:
    """The decision sequence of one instant, applied to the workload's state."""

    def __init__(self, wl: ClusterState) -> None:
        self.wl = wl
        self.ex = wl.params.execution
        self._futile: tuple[object, ...] | None = None  # last packing input that merged nothing

    def ordering_view(self, ids: np.ndarray, running: np.ndarray) -> OrderingView:
        """The ordering snapshot of jobs ``ids`` (remaining work from declared lengths)."""
        wl = self.wl
        rem = wl.lengths.remaining(wl.done_iters, ids)
        view = ordering_view(wl.sim.now, ids, running, rem, wl.attained[ids], wl.jobs, wl.est)
        waited = np.where(running | np.isnan(wl.stopped_at[ids]), 0.0,
                          wl.sim.now - wl.stopped_at[ids])  # fmt: skip
        last, waited = readonly(wl.last_run[ids], waited)
        return view._replace(last_run_s=last, waiting_s=waited)

    def _order(self, ids: np.ndarray, running: np.ndarray) -> np.ndarray:
        wl = self.wl
        view = self.ordering_view(ids, running)
        order = np.asarray(wl.policies["ordering"].order(view))
        n = len(ids)
        if order.shape != (n,) or not np.array_equal(np.sort(order), np.arange(n)):
            raise InvariantViolation("ordering policy did not return a permutation")
        return ids[order]

    def fill(self) -> None:
        """Start (or interleave) queued jobs on free GPUs."""
        wl = self.wl
        free_total = int(wl.pool.free.sum())
        if not wl.queued or (free_total == 0 and not self._open_groups(None)):
            return
        ids = np.fromiter(wl.queued, dtype=np.int64, count=len(wl.queued))
        window = [int(j) for j in self._order(ids, np.zeros(len(ids), bool))[: self.ex.window]]
        rank = {j: r for r, j in enumerate(window)}
        groups: list[list[int]] = [[j] for j in window]
        if int(wl.jobs.gpus[window].sum()) > free_total and self.ex.max_group_size > 1:
            groups = self._pack(window, rank, free_total)
        self._allocate([g for g in groups if int(wl.jobs.gpus[g].max()) <= free_total], rank)

    def unpack(self) -> None:
        """With the queue empty, run members of packed groups alone on free GPUs (Muri
        re-plans every job at each event and packs only while demand exceeds the cluster's
        GPUs): one member per packed group at a time, while some allowed type has room."""
        wl = self.wl
        if wl.queued or self.ex.max_group_size < 2 or not self.ex.unpack:
            return
        free = wl.pool.free.copy()
        for gid in list(wl.packed):
            if free.sum() == 0:
                break
            g = wl.groups[gid]
            while len(g.members) > 1:
                j = g.members[-1]
                need = int(wl.jobs.gpus[j])
                ok = [t for t in range(len(free)) if wl.jobs.allowed[j, t] and free[t] >= need]
                if not ok:
                    break
                free[g.t if g.t in ok else ok[0]] -= need
                wl.detach(g, j)
        if wl.queued:
            self.fill()

    def _open_groups(self, sizes: set[int] | None) -> list[Group]:
        out = []
        for g in self.wl.groups.values():
            if len(g.members) < self.ex.max_group_size and (sizes is None or g.gpus in sizes):
                out.append(g)
                if len(out) >= self.ex.pack_window:
                    break
        return out

    def _pack(self, window: list[int], rank: dict[int, int], free: int) -> list[list[int]]:
        wl = self.wl
        cands = window[: self.ex.pack_window]
        sizes = None if self.ex.cross_gpu_packing else {int(wl.jobs.gpus[j]) for j in cands}
        opened = self._open_groups(sizes)
        key = (tuple(cands), tuple((g.gid, len(g.members)) for g in opened), tuple(wl.pool.free))
        if key == self._futile:
            return [[j] for j in window]  # same candidates as a pass that merged nothing
        out = self._pack_candidates(cands, opened, rank, free)
        if not any(len(g) > 1 for g in out) and len(out) == len(cands):
            self._futile = key
        taken = {j for g in out for j in g}
        rest = [[j] for j in window if j not in taken and j in wl.queued]
        return sorted(out + rest, key=lambda g: rank[g[0]])

    def _pack_candidates(
        self, window: list[int], opened: list[Group], rank: dict[int, int], free: int
    ) -> list[list[int]]:
        wl = self.wl
        members = window + [j for g in opened for j in g.members]
        rem = {j: wl.estimated_remaining(j) for j in members}
        units = [unit_view([j], False, rank[j], rem, wl.jobs, wl.est) for j in window]
        units += [unit_view(g.members, True, len(window), rem, wl.jobs, wl.est, g.t)
                  for g in opened]  # fmt: skip
        contended = None if wl.share is None else wl.share.iter_on
        view = packing_view(wl.sim.now, units, wl.pool.free, self.ex.max_group_size,
                            self.ex.restart_s, wl.est, self.ex.cross_gpu_packing,
                            contended)  # fmt: skip
        merges = wl.policies["packing"].pack(view)
        merged: set[int] = set()
        out: list[list[int]] = []
        for m in merges:
            self._check_merge(m, units, merged)
            merged.update(m)
            running = [i for i in m if units[i].running]
            newcomers = [j for i in m if not units[i].running for j in units[i].members]
            if running:
                wl.join_group(opened[running[0] - len(window)], newcomers)
            else:
                out.append(sorted(newcomers, key=rank.__getitem__))
        out += [[j] for i, j in enumerate(window) if i not in merged]
        return out

    def _check_merge(self, m: tuple[int, ...], units: list, merged: set[int]) -> None:
        if len(m) < 2 or merged.intersection(m) or len(set(m)) != len(m):
            raise InvariantViolation(f"packing policy returned a bad merge {m}")
        if not all(0 <= i < len(units) for i in m):
            raise InvariantViolation(f"packing policy returned unknown units {m}")
        us = [units[i] for i in m]
        if sum(u.running for u in us) > 1 or (
            len({u.gpus for u in us}) != 1 and not self.ex.cross_gpu_packing
        ):
            raise InvariantViolation(f"packing merge {m} mixes GPU counts or running groups")
        if any(u.running and u.gpus < max(v.gpus for v in us) for u in us):
            raise InvariantViolation(f"packing merge {m} needs more GPUs than its group holds")
        if sum(len(u.members) for u in us) > self.ex.max_group_size:
            raise InvariantViolation(f"packing merge {m} exceeds max_group_size")

    def _allocate(self, groups: list[list[int]], rank: dict[int, int]) -> None:
        wl = self.wl
        if not groups:
            return
        rem = {j: wl.estimated_remaining(j) for g in groups for j in g}
        now = wl.sim.now
        views = [group_view(now, g, rem, self.ex.restart_s, wl.jobs, wl.est) for g in groups]
        staged = [group_view(now, g, rem, self.ex.restart_s, wl.jobs, wl.est, "stage")
                  for g in groups]  # fmt: skip
        view = allocation_view(now, wl.types, wl.pool.free, views, staged)
        if getattr(wl.policies["allocation"], "sees_running", False):
            views = [with_service(v, wl.received, wl.jobs.submit_s, now) for v in views]
            view = view._replace(groups=tuple(views), running=self._running_views(),
                                 total_gpus=tuple(int(x) for x in wl.pool.total))  # fmt: skip
            view = self._with_space_sharing(view)
        choice, pairs = self._decision(wl.policies["allocation"].allocate(view), len(groups))
        partner = self._check_pairs(pairs, choice, views)
        for i, (g, gv, t) in enumerate(zip(groups, views, choice, strict=True)):
            if t is None or partner.get(i, len(groups)) < i:
                continue  # waits, or started with its partner
            members = g + groups[partner[i]] if i in partner else g
            both = (gv, views[partner[i]]) if i in partner else (gv,)
            if not all(v.allowed[t] for v in both) or wl.pool.free[t] < gv.gpus:
                raise InvariantViolation(f"allocation put {members} on {wl.types[t]} without room")
            wl.start_group(members, t)

    def _with_space_sharing(self, view: AllocationView) -> AllocationView:
        """``view`` with the combination estimates and service of space sharing, where the
        run has measured pairs (``speeds.pairs_path``)."""
        if self.wl.pair_received is None:
            return view
        return view._replace(combo_iter_s=self.wl.est.combo_iter_s,
                             combo_service=self._combo_service)  # fmt: skip

    def _combo_service(self, members: tuple[int, ...]) -> tuple[tuple[float, ...], float]:
        """Seconds the combination ``members`` ran together per type (one job: alone) and
        seconds since its last member arrived (running groups are settled to now)."""
        wl = self.wl
        ms = tuple(sorted(int(j) for j in members))
        if len(ms) == 1:
            held = wl.received[ms[0]]
        else:
            assert wl.pair_received is not None
            held = wl.pair_received.get(ms, np.zeros(len(wl.types)))
        return tuple(held.tolist()), float(wl.sim.now - wl.jobs.submit_s[list(ms)].max())

    @staticmethod
    def _decision(
        choice: list[int | None] | SpaceShared, n: int
    ) -> tuple[list[int | None], tuple[tuple[int, int], ...]]:
        """Per group type choices and co-located pairs of an allocation decision."""
        types, pairs = (choice.types, choice.pairs) if isinstance(choice, SpaceShared) else (
            choice, ())  # fmt: skip
        if len(types) != n:
            raise InvariantViolation("allocation policy returned the wrong number of choices")
        return list(types), tuple(pairs)

    def _check_pairs(self, pairs: tuple[tuple[int, int], ...], types: list[int | None],
                     views: list[GroupView]) -> dict[int, int]:  # fmt: skip
        """Partner of each group in a co-located pair; raises on a pair that is not two
        distinct lone jobs of equal GPU count on one type (a policy bug)."""
        partner: dict[int, int] = {}
        for a, b in pairs:
            ok = 0 <= a < len(views) and 0 <= b < len(views) and a != b
            if not ok or a in partner or b in partner or self.ex.max_group_size < 2:
                raise InvariantViolation(f"allocation returned a bad pair {(a, b)}")
            va, vb = views[a], views[b]
            if (types[a] is None or types[a] != types[b] or len(va.members) != 1
                    or len(vb.members) != 1 or va.gpus != vb.gpus):  # fmt: skip
                raise InvariantViolation(f"allocation pair {(a, b)} is not two lone jobs of "
                                         "equal GPUs on one type")  # fmt: skip
            partner[a], partner[b] = b, a
        return partner

    def _running_views(self) -> tuple[GroupView, ...]:
        """Every running group, settled up to now, with its service so far."""
        wl, now = self.wl, self.wl.sim.now
        out = []
        for g in wl.groups.values():
            wl.settle(g)
            rem = {j: wl.estimated_remaining(j) for j in g.members}
            gv = group_view(now, g.members, rem, 0.0, wl.jobs, wl.est)
            out.append(with_service(gv, wl.received, wl.jobs.submit_s, now, g.t))
        return tuple(out)

    def _preempt_by_allocation(self) -> None:
        """Round of an allocation policy that sees running groups (Gavel): it re-decides the
        running groups and the queue window with every GPU free; a running group not given
        its own type again stops (its jobs requeue; the fill that follows places them)."""
        wl, now = self.wl, self.wl.sim.now
        running = self._running_views()
        if not running:
            return
        ids = np.fromiter(wl.queued, dtype=np.int64, count=len(wl.queued))
        window = self._order(ids, np.zeros(len(ids), bool))[: self.ex.window].tolist()
        rem = {j: wl.estimated_remaining(j) for j in window}
        waiting = [with_service(group_view(now, [j], rem, self.ex.restart_s, wl.jobs, wl.est),
                                wl.received, wl.jobs.submit_s, now) for j in window]  # fmt: skip
        total = tuple(int(x) for x in wl.pool.total)
        view = AllocationView(now, tuple(wl.types), total, running + tuple(waiting), running, total)
        view = self._with_space_sharing(view)
        choice, pairs = self._decision(wl.policies["allocation"].allocate(view), len(view.groups))
        in_pair = {i for p in pairs for i in p}
        for i, (g, rv, t) in enumerate(zip(list(wl.groups.values()), running, choice,
                                           strict=False)):  # fmt: skip
            if t != rv.running_on or i in in_pair:  # a new pair: its running member restarts
                wl.stop_group(g, preempted=True)

    def preempt_round(self) -> None:
        """Stop running groups that the order no longer admits within the cluster's GPUs."""
        wl = self.wl
        if getattr(wl.policies["allocation"], "sees_running", False):
            self._preempt_by_allocation()
            return
        for g in wl.groups.values():
            wl.settle(g)
        running = [j for g in wl.groups.values() for j in g.members]
        ids = np.array(list(wl.queued) + running, dtype=np.int64)
        if len(ids) == 0:
            return
        flags = np.zeros(len(ids), bool)
        flags[len(wl.queued) :] = True
        capacity, used, keep, seen = int(wl.pool.total.sum()), 0, set(), set()
        for j in self._order(ids, flags).tolist():
            gid = int(wl.group_of[j])
            if gid >= 0:
                if gid not in seen and used + wl.groups[gid].gpus <= capacity:
                    keep.add(gid)
                    used += wl.groups[gid].gpus
                seen.add(gid)
            elif used + int(wl.jobs.gpus[j]) <= capacity:
                used += int(wl.jobs.gpus[j])
        for g in [g for g in wl.groups.values() if g.gid not in keep]:
            wl.stop_group(g, preempted=True)
