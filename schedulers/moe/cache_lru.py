"""Per-layer LRU expert cache (the LRU baseline; Mixtral-offloading's cache).

Each layer is its own eviction group with uniform slots. An expert's recency is the
last layer-step that activated it (whether it ran on the GPU or not) or admitted it.
Every expert asking for a slot is admitted: into a free slot, else in place of the
least recently used unprotected expert (ties: lowest id); if every cached expert is
protected, the rest are not admitted.
"""

from __future__ import annotations

import numpy as np

from hetsim.schedulers.moe._evict import victims_by_key
from hetsim.schedulers.moe._params import NoParams
from hetsim.schedulers.moe._slots import uniform_slots
from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import AllocationView, CacheDecision, CacheView


@policies.register("moe.cache", "lru")
class LruCache:
    """Least recently used eviction within each layer."""

    Params = NoParams

    def __init__(self, params: NoParams, rng: np.random.Generator) -> None:
        self.params = params
        self.last = np.zeros((0, 0))
        self.clock = 0

    def allocate(self, view: AllocationView) -> tuple[int, ...]:
        """Uniform slots per layer (and reset recency)."""
        self.last = np.zeros((view.layers, view.experts))
        return uniform_slots(view)

    def observe(self, layer: int, probs: np.ndarray, selected: np.ndarray, step: int) -> None:
        """Stamp this layer's activated experts with a new clock value."""
        self.clock += 1
        self.last[layer, selected.any(axis=0)] = self.clock

    def admit(self, view: CacheView) -> CacheDecision:
        """Admit every incoming expert, evicting the least recently used."""
        last = self.last[view.layer]
        free = view.slots - view.occupied
        evictable = victims_by_key(view, last, len(view.incoming) - free)
        admit: list[int] = []
        evict: list[int] = []
        for e in view.incoming:
            if free > 0:
                free -= 1
            elif evictable:
                evict.append(evictable.pop(0))
            else:
                break
            admit.append(e)
            last[e] = self.clock
        return CacheDecision(tuple(admit), tuple(evict))
