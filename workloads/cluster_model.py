"""Physical model of the cluster domain: interleaved iteration time and the GPU pool.

Interleaving (Muri, SIGCOMM'22, as in its public simulator): the m jobs of a group share
one set of GPUs and run their k iteration stages phase-shifted, so the group's iteration
time for a shift assignment p is ``sum_s max_j t[j, (s - p_j) mod k]``; the group takes
the best assignment of distinct shifts and multiplies by the measured interference
factor of its size (Muri's code: 1.015, 1.33, 1.5, 1.37 for 1-4 jobs). Every member
completes one iteration per group iteration.
"""

from __future__ import annotations

from itertools import permutations

import numpy as np


def interleaved_iter_s(stages_s: np.ndarray, interference: list[float]) -> float:
    """Iteration time of a group whose members' stage times are the rows of ``stages_s``."""
    m, k = stages_s.shape
    if m == 1:
        return float(stages_s[0].sum()) * interference[0]
    if m > k:
        raise ValueError(f"a group of {m} jobs needs at least {m} stages to interleave, not {k}")
    best = np.inf
    for shifts in permutations(range(1, k), m - 1):
        rows = [stages_s[0]] + [np.roll(stages_s[i + 1], p) for i, p in enumerate(shifts)]
        best = min(best, float(np.max(rows, axis=0).sum()))
    return best * interference[m - 1]


class GpuPool:
    """Free GPUs per node, indexed by GPU type and free count (no scan of the cluster).

    A request for g GPUs of one type goes to the node with the fewest free GPUs that
    still holds g (best-fit, consolidated); if no single node can, it spreads over the
    nodes with the most free GPUs (fewest nodes). Both cost O(gpus per node + nodes used).
    """

    def __init__(self, types: list[str], nodes: list[tuple[int, int]]) -> None:
        """``nodes``: (type index, GPUs) of every node."""
        self.types = types
        self.node_type = np.array([t for t, _ in nodes], dtype=np.int64)
        self.capacity = np.array([g for _, g in nodes], dtype=np.int64)
        self.node_free = self.capacity.copy()
        self.total = np.bincount(self.node_type, weights=self.capacity, minlength=len(types))
        self.total = self.total.astype(np.int64)
        self.free = self.total.copy()
        self.max_free = int(self.capacity.max())
        self._buckets: list[list[dict[int, None]]] = [
            [{} for _ in range(self.max_free + 1)] for _ in types
        ]
        for i, (t, g) in enumerate(nodes):
            self._buckets[t][g][i] = None

    def allocate(self, t: int, gpus: int) -> list[tuple[int, int]] | None:
        """(node, GPUs) parts of a ``gpus``-GPU allocation on type ``t`` (None: not enough)."""
        if gpus > self.free[t]:
            return None
        buckets = self._buckets[t]
        for f in range(min(gpus, self.max_free + 1), self.max_free + 1):
            if f >= gpus and buckets[f]:
                node = next(iter(buckets[f]))
                self._take(node, gpus)
                return [(node, gpus)]
        parts, need = [], gpus
        for f in range(self.max_free, 0, -1):
            while buckets[f] and need > 0:
                node = next(iter(buckets[f]))
                take = min(f, need)
                self._take(node, take)
                parts.append((node, take))
                need -= take
            if need == 0:
                break
        return parts

    def release(self, parts: list[tuple[int, int]]) -> None:
        """Give back the GPUs of an allocation."""
        for node, g in parts:
            self._move(node, int(self.node_free[node]) + g)

    def _take(self, node: int, g: int) -> None:
        self._move(node, int(self.node_free[node]) - g)

    def _move(self, node: int, new_free: int) -> None:
        t, old = int(self.node_type[node]), int(self.node_free[node])
        if not 0 <= new_free <= self.capacity[node]:
            raise RuntimeError(f"node {node}: free GPUs would be {new_free}")
        del self._buckets[t][old][node]
        self._buckets[t][new_free][node] = None
        self.node_free[node] = new_free
        self.free[t] += new_free - old
