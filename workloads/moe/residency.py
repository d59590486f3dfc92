"""Where each routed expert's weights are: GPU slot cache, in flight over PCIe, or host.

One :class:`Residency` per run holds, per (MoE layer, expert), whether the expert
occupies a GPU slot (``cached``; resident or in flight) and from when it is usable
(``ready_at_s``). Layers are separate eviction groups with ``slots[l]`` slots each, as in
AdapMoE and HybriMoE. The cache policy decides admission and eviction; this class
applies and checks its decisions (never more experts than slots, never evicting an
expert in use or in flight) and keeps the PCIe copy engine's queue.

The copy engine is a priority queue (``priority=True``, the default): a demand copy
(an expert a layer needs now) overtakes every speculative prefetch that has not started
by its request time; a copy already on the wire finishes first (no pre-emption mid-
transfer), and the overtaken prefetches move back by one copy time each. When a layer's
router runs, prefetches aimed at it that have not started and whose expert was not
activated are stale: they are cancelled and their slots freed, and the queue behind
them moves up. ``priority=False`` keeps one FIFO for both (the earlier model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hetsim.simulator.engine import InvariantViolation
from hetsim.workloads.moe.costs import read_only
from hetsim.workloads.moe.view import CacheDecision, CachePolicy, CacheView


class Residency:
    """Slot cache per layer plus the copy engine's timeline (absolute seconds)."""

    def __init__(
        self, slots: tuple[int, ...], experts: int, copy_s: float, priority: bool = True
    ) -> None:
        self.slots = np.asarray(slots, dtype=np.int64)
        self.slot_counts: list[int] = [int(s) for s in slots]  # the same, as Python ints
        layers = len(slots)
        self.cached = np.zeros((layers, experts), dtype=bool)
        self.ready_at_s = np.zeros((layers, experts))
        # each layer's cached row as a read-only view (what cache views show; it follows
        # the row) and its count of cached experts
        self.cached_rows = [read_only(row.view()) for row in self.cached]
        self._rows = list(self.cached)  # the same rows, writable (the residency's own)
        self.cached_flat = self.cached.reshape(-1)  # a view: (layer, expert) at l * experts + e
        self.ready_rows = list(self.ready_at_s)  # each layer's row (a view)
        # ready_at_s where cached, +inf elsewhere (kept with every change of either):
        # an expert is evictable at t exactly where this is <= t (cached and landed)
        self._avail = np.full((layers, experts), np.inf)
        self._avail_rows = list(self._avail)
        self.occupied: list[int] = [0] * layers
        self.copy_s = copy_s
        self.pcie_free_s = 0.0
        self.pcie_busy_s = 0.0
        self.copies = 0
        self.prefetches = 0
        self.prefetch_pending: list[set[int]] = [set() for _ in range(layers)]
        self.priority = priority
        self.cancelled = 0
        # queued prefetches as [start, end, layer, expert], in start order
        self._queue: list[list[float]] = []

    def warm(self, frequency: np.ndarray) -> None:
        """Fill every layer's slots with its most frequently activated experts (warm start
        from the warm-up profile, the same for every policy; not timed)."""
        for layer, s in enumerate(self.slots):
            if s:
                order = np.argsort(-frequency[layer], kind="stable")[:s]
                self.cached[layer, order] = True
                self._avail[layer, order] = self.ready_at_s[layer, order]
                self.occupied[layer] = int(np.count_nonzero(self.cached[layer]))

    def copy(self, start_s: float) -> tuple[float, float]:
        """Queue one demand copy requested at ``start_s``; returns (start, end). With
        priority it goes ahead of every prefetch not started by ``start_s``."""
        if not self.priority:
            start = max(self.pcie_free_s, start_s)
            end = self.pcie_free_s = start + self.copy_s
        else:
            self._prune(start_s)
            waiting = [q for q in self._queue if q[0] > start_s and q[2] >= 0]
            fixed = [q for q in self._queue if not (q[0] > start_s and q[2] >= 0)]
            start = max([start_s] + [q[1] for q in fixed])
            end = start + self.copy_s
            self._queue = [*fixed, [start, end, -1.0, -1.0]]
            self.pcie_free_s = end
            if waiting:
                self._requeue(waiting, end)
        self.pcie_busy_s += self.copy_s
        self.copies += 1
        return start, end

    def _requeue(self, waiting: list[list[float]], t: float) -> None:
        """Put ``waiting`` prefetches back on the engine from ``t``, in order."""
        for q in waiting:
            q[0], q[1] = t, t + self.copy_s
            self.ready_at_s[int(q[2]), int(q[3])] = self._avail[int(q[2]), int(q[3])] = q[1]
            t = q[1]
            self._queue.append(q)
        self.pcie_free_s = max(t, max((q[1] for q in self._queue), default=t))

    def _prune(self, now_s: float) -> None:
        """Forget prefetches that have landed by ``now_s`` when the first one has (a
        landed entry changes no result: it started before and ended by any later
        request, so only the queue's length is at stake)."""
        if self._queue and self._queue[0][1] <= now_s:
            self._queue = [q for q in self._queue if q[1] > now_s]

    def _evictable(self, layer: int, in_use: Any, now_s: float) -> np.ndarray:
        """Read-only mask of the layer's cached experts that have landed by ``now_s``
        (none in flight) and are not in ``in_use``."""
        free = self._avail_rows[layer] <= now_s
        if len(in_use):
            free[in_use] = False
        return read_only(free)

    def request(
        self,
        cache: CachePolicy,
        layer: int,
        incoming: tuple[int, ...],
        in_use: Any,
        now_s: float,
        prefetch: bool,
    ) -> tuple[int, ...]:
        """Ask the cache policy for slots for ``incoming``; apply and check its decision.
        ``in_use``: ids (a sequence or an int array) that may not be evicted.

        Returns the admitted expert ids (they are marked cached; the caller sets their
        ready time)."""
        # positional construction, in CacheView's field order (one per admission)
        view = tuple.__new__(CacheView, (
            layer, self.slot_counts[layer], self.occupied[layer], self.cached_rows[layer],
            self._evictable(layer, in_use, now_s), incoming, prefetch,
        ))  # fmt: skip
        decision = cache.admit(view)
        self._apply(view, decision)
        return decision.admit

    def _apply(self, view: CacheView, decision: CacheDecision) -> None:
        layer = view.layer
        row, avail, ready = self._rows[layer], self._avail_rows[layer], self.ready_rows[layer]
        for e in decision.evict:
            if not row[e] or not view.evictable[e]:
                raise InvariantViolation(
                    f"cache policy evicted expert {e} of layer {layer}: not cached or in use"
                )
            row[e] = False
            avail[e] = np.inf
        for e in decision.admit:
            if e not in view.incoming or row[e]:
                raise InvariantViolation(
                    f"cache policy admitted expert {e} of layer {layer}: not asking"
                )
            row[e] = True
            ready[e] = avail[e] = 0.0
        # every eviction above cleared a set bit and every admission set a clear one
        count = self.occupied[layer] - len(decision.evict) + len(decision.admit)
        if count > view.slots:
            raise InvariantViolation(f"layer {layer}: {count} experts cached in {view.slots} slots")
        self.occupied[layer] = count

    def prefetch(
        self, cache: CachePolicy, layer: int, expert: int, now_s: float
    ) -> tuple[float, float] | None:
        """Copy ``expert`` of ``layer`` ahead if the cache gives it a slot; (start, end)."""
        if self._rows[layer][expert]:
            return None
        admitted = self.request(cache, layer, (expert,), (), now_s, prefetch=True)
        if expert not in admitted:
            return None
        if self._queue and self._queue[0][1] <= now_s:  # (_prune, inlined)
            self._prune(now_s)
        start = max(self.pcie_free_s, now_s)
        end = start + self.copy_s
        self.pcie_free_s = end
        self.pcie_busy_s += self.copy_s
        self.copies += 1
        if self.priority:
            self._queue.append([start, end, float(layer), float(expert)])
        self.ready_rows[layer][expert] = self._avail_rows[layer][expert] = end
        self.prefetches += 1
        self.prefetch_pending[layer].add(expert)
        return start, end

    def settle_prefetches(self, layer: int, activated: Sequence[int], now_s: float = 0.0) -> int:
        """Prefetches aimed at this layer that were used now; clears the pending set and
        (with priority) cancels the stale ones that have not started by ``now_s``."""
        pending = self.prefetch_pending[layer]
        if not pending:
            return 0
        used = len(pending.intersection(activated))
        stale = pending.difference(activated)
        # without stale prefetches nothing is cancelled and the queue stays as it is
        if self.priority and self._queue and stale:
            keep, moved = [], []
            for q in self._queue:
                if int(q[2]) == layer and int(q[3]) in stale and q[0] > now_s:
                    self.cached[layer, int(q[3])] = False
                    self.occupied[layer] -= 1
                    self.ready_at_s[layer, int(q[3])] = 0.0
                    self._avail[layer, int(q[3])] = np.inf
                    self.cancelled += 1
                    self.copies -= 1
                    self.pcie_busy_s -= self.copy_s
                elif q[0] > now_s and q[2] >= 0:
                    moved.append(q)
                else:
                    keep.append(q)
            if len(keep) + len(moved) < len(self._queue):
                self._queue = keep
                t = max([now_s] + [q[1] for q in keep])
                self.pcie_free_s = t
                if moved:
                    self._requeue(moved, t)
        pending.clear()
        return used
