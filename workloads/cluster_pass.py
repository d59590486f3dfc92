"""One scheduling pass of the cluster workload: order, pack, allocate, apply.

The pass asks the three policies with read-only views and applies their decisions after
checking them (a decision that over-commits a GPU type or breaks the packing rules is a
bug in the policy and raises). Only the first ``execution.window`` queued jobs in the
policy's order are candidates, so a pass costs O(queue) for the sort and O(window) for
the rest, independent of the number of GPUs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simulator.engine import InvariantViolation
from workloads.cluster_estimates import (
    allocation_view,
    group_view,
    ordering_view,
    packing_view,
    unit_view,
)

if TYPE_CHECKING:
    from workloads.cluster import ClusterWorkload, Group


class SchedulingPass:
    """The decision sequence of one instant, applied to the workload's state."""

    def __init__(self, wl: ClusterWorkload) -> None:
        self.wl = wl
        self.ex = wl.params.execution
        self._futile: tuple[object, ...] | None = None  # last packing input that merged nothing

    def _order(self, ids: np.ndarray, running: np.ndarray) -> np.ndarray:
        wl = self.wl
        rem = wl.jobs.iterations[ids] - wl.done_iters[ids]
        view = ordering_view(wl.sim.now, ids, running, rem, wl.attained[ids], wl.jobs, wl.est)
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
        self._allocate([g for g in groups if int(wl.jobs.gpus[g[0]]) <= free_total], rank)

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
        opened = self._open_groups({int(wl.jobs.gpus[j]) for j in cands})
        key = (tuple(cands), tuple((g.gid, len(g.members)) for g in opened), free)
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
        rem = {j: wl.remaining(j) for j in members}
        units = [unit_view([j], False, rank[j], rem, wl.jobs, wl.est) for j in window]
        units += [unit_view(g.members, True, len(window), rem, wl.jobs, wl.est) for g in opened]
        view = packing_view(wl.sim.now, units, free, self.ex.max_group_size,
                            self.ex.restart_s, wl.est)  # fmt: skip
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
        if len({u.gpus for u in us}) != 1 or sum(u.running for u in us) > 1:
            raise InvariantViolation(f"packing merge {m} mixes GPU counts or running groups")
        if sum(len(u.members) for u in us) > self.ex.max_group_size:
            raise InvariantViolation(f"packing merge {m} exceeds max_group_size")

    def _allocate(self, groups: list[list[int]], rank: dict[int, int]) -> None:
        wl = self.wl
        if not groups:
            return
        rem = {j: wl.remaining(j) for g in groups for j in g}
        now = wl.sim.now
        views = [group_view(now, g, rem, self.ex.restart_s, wl.jobs, wl.est) for g in groups]
        view = allocation_view(now, wl.types, wl.pool.free, views)
        choice = wl.policies["allocation"].allocate(view)
        if len(choice) != len(groups):
            raise InvariantViolation("allocation policy returned the wrong number of choices")
        for g, gv, t in zip(groups, views, choice, strict=True):
            if t is None:
                continue
            if not gv.allowed[t] or wl.pool.free[t] < gv.gpus:
                raise InvariantViolation(f"allocation put {g} on {wl.types[t]} without room")
            wl.start_group(g, t)

    def preempt_round(self) -> None:
        """Stop running groups that the order no longer admits within the cluster's GPUs."""
        wl = self.wl
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
