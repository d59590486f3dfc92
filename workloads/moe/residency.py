"""Where each routed expert's weights are: GPU slot cache, in flight over PCIe, or host.

One :class:`Residency` per run holds, per (MoE layer, expert), whether the expert
occupies a GPU slot (``cached``; resident or in flight) and from when it is usable
(``ready_at_s``). Layers are separate eviction groups with ``slots[l]`` slots each, as in
AdapMoE and HybriMoE. The cache policy decides admission and eviction; this class
applies and checks its decisions (never more experts than slots, never evicting an
expert in use or in flight) and keeps the PCIe copy engine's free time.
"""

from __future__ import annotations

import numpy as np

from hetsim.simulator.engine import InvariantViolation
from hetsim.workloads.moe.costs import read_only
from hetsim.workloads.moe.view import CacheDecision, CachePolicy, CacheView

_EMPTY = np.zeros(0, dtype=np.int64)


class Residency:
    """Slot cache per layer plus the copy engine's timeline (absolute seconds)."""

    def __init__(self, slots: tuple[int, ...], experts: int, copy_s: float) -> None:
        self.slots = np.asarray(slots, dtype=np.int64)
        layers = len(slots)
        self.cached = np.zeros((layers, experts), dtype=bool)
        self.ready_at_s = np.zeros((layers, experts))
        self.copy_s = copy_s
        self.pcie_free_s = 0.0
        self.pcie_busy_s = 0.0
        self.copies = 0
        self.prefetches = 0
        self.prefetch_pending: list[set[int]] = [set() for _ in range(layers)]

    def warm(self, frequency: np.ndarray) -> None:
        """Fill every layer's slots with its most frequently activated experts (warm start
        from the warm-up profile, the same for every policy; not timed)."""
        for layer, s in enumerate(self.slots):
            if s:
                order = np.argsort(-frequency[layer], kind="stable")[:s]
                self.cached[layer, order] = True

    def copy(self, start_s: float) -> tuple[float, float]:
        """Queue one expert copy on the FIFO copy engine; returns (start, end)."""
        start = max(self.pcie_free_s, start_s)
        end = start + self.copy_s
        self.pcie_free_s = end
        self.pcie_busy_s += self.copy_s
        self.copies += 1
        return start, end

    def _protected(self, layer: int, in_use: np.ndarray, now_s: float) -> np.ndarray:
        flying = self.cached[layer] & (self.ready_at_s[layer] > now_s)
        if len(in_use):
            flying[in_use] = True  # the sorted union of both id sets, as a mask
        return read_only(flying.nonzero()[0])

    def request(
        self,
        cache: CachePolicy,
        layer: int,
        incoming: np.ndarray,
        in_use: np.ndarray,
        now_s: float,
        prefetch: bool,
    ) -> tuple[int, ...]:
        """Ask the cache policy for slots for ``incoming``; apply and check its decision.

        Returns the admitted expert ids (they are marked cached; the caller sets their
        ready time)."""
        view = CacheView(
            layer=layer,
            slots=int(self.slots[layer]),
            cached=read_only(self.cached[layer].nonzero()[0]),
            protected=self._protected(layer, in_use, now_s),
            incoming=read_only(np.asarray(incoming, dtype=np.int64)),
            prefetch=prefetch,
        )
        decision = cache.admit(view)
        self._apply(view, decision)
        return decision.admit

    def _apply(self, view: CacheView, decision: CacheDecision) -> None:
        row = self.cached[view.layer]
        incoming = set(view.incoming.tolist())
        protected = set(view.protected.tolist())
        for e in decision.evict:
            if not row[e] or e in protected:
                raise InvariantViolation(
                    f"cache policy evicted expert {e} of layer {view.layer}: not cached or in use"
                )
            row[e] = False
        for e in decision.admit:
            if e not in incoming or row[e]:
                raise InvariantViolation(
                    f"cache policy admitted expert {e} of layer {view.layer}: not asking"
                )
            row[e] = True
            self.ready_at_s[view.layer, e] = 0.0
        count = np.count_nonzero(row)
        if count > view.slots:
            raise InvariantViolation(
                f"layer {view.layer}: {count} experts cached in {view.slots} slots"
            )

    def prefetch(
        self, cache: CachePolicy, layer: int, expert: int, now_s: float
    ) -> tuple[float, float] | None:
        """Copy ``expert`` of ``layer`` ahead if the cache gives it a slot; (start, end)."""
        if self.cached[layer, expert]:
            return None
        incoming = np.array([expert], dtype=np.int64)
        admitted = self.request(cache, layer, incoming, _EMPTY, now_s, prefetch=True)
        if expert not in admitted:
            return None
        start, end = self.copy(now_s)
        self.ready_at_s[layer, expert] = end
        self.prefetches += 1
        self.prefetch_pending[layer].add(expert)
        return start, end

    def settle_prefetches(self, layer: int, activated: np.ndarray) -> int:
        """Prefetches aimed at this layer that were used now; clears the pending set."""
        pending = self.prefetch_pending[layer]
        if not pending:
            return 0
        used = len(pending.intersection(activated.tolist()))
        pending.clear()
        return used
