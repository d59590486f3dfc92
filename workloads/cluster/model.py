"""Physical model of the cluster domain: interleaved iteration time, the GPU pool (its
nodes from the inventory) and the groups of jobs that hold its GPUs.

Interleaving (Muri, SIGCOMM'22, as its public simulator computes it): the m jobs of a
group share one set of GPUs and cycle through their stages phase-shifted. The cycle has
``L = sum(spans)`` phases; stage s of a job occupies ``spans[s]`` consecutive phases
(Muri's traces merge storage IO and CPU into one data column, and its simulator, run with
4 resources, lets that column span the IO and CPU phases: ``spans = (2, 1, 1)``, so two
jobs' data stages may overlap, one on storage and one on the CPU; ``(1, 1, 1)`` is the
plain 3-stage cycle). Each job starts in its own phase. With phase boundaries f_q, job x
holds stage s from f_{x+c_s} to f_{x+c_s+w_s} (c_s = phases before s, w_s its span) and
needs ``f_{x+c_s+w_s} >= f_{x+c_s} + t[x, s]``; the steady-state iteration time is the
largest growth rate of f per cycle, which is the maximum over cycles of the constraint
graph on the L phases of (sum of stage times) / (cycles wrapped). The group takes the
best assignment of jobs to phases. With all spans 1 this is
``min over shifts of sum_s max_j t[j, (s - p_j) mod L]``.

Interference (two models, ``workloads.cluster_estimates`` picks one as ground truth):
- *group* (Muri's code): the cycle time times a measured factor per group size;
- *stage* (Cuckoo's stage-grained estimation, reconstruction): each member's stage r is
  inflated by its co-runners' use of r, ``t'_{j,r} = t_{j,r} (1 + sum_{i != j} beta_r
  occ_{i,r})`` with ``occ_{i,r} = t_{i,r} / sum_r t_{i,r}``, then the cycle time is taken
  with no further factor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import permutations
from pathlib import Path

import numpy as np

from hetsim.workloads.cluster.contention import NO_STRETCH, Stretch
from hetsim.workloads.cluster.data import read_alibaba_nodes
from hetsim.workloads.cluster.params import ClusterParams
from hetsim.workloads.paths import resolve_path

Edge = tuple[int, int, float, int]  # (from phase, to phase, seconds, cycles wrapped)


def cycle_period_s(stages_s: np.ndarray, spans: Sequence[int], slots: Sequence[int]) -> float:
    """Steady-state iteration time of jobs (rows of ``stages_s``) starting in ``slots``."""
    phases = int(sum(spans))
    offsets = np.concatenate(([0], np.cumsum(spans)[:-1]))
    edges: list[Edge] = []
    for row, x in zip(stages_s, slots, strict=True):
        for t, c, w in zip(row, offsets, spans, strict=True):
            u = (x + int(c)) % phases
            edges.append((u, (u + w) % phases, float(t), (u + w) // phases))
    return _max_cycle_ratio(edges, phases)


def _max_cycle_ratio(edges: list[Edge], nodes: int) -> float:
    """Max over simple cycles of sum(seconds) / sum(wraps) (every cycle wraps >= 1)."""
    out_edges: list[list[Edge]] = [[] for _ in range(nodes)]
    for e in edges:
        out_edges[e[0]].append(e)
    best = 0.0

    def walk(start: int, node: int, seen: set[int], secs: float, wraps: int) -> None:
        nonlocal best
        for _, v, t, w in out_edges[node]:
            if v == start:
                best = max(best, (secs + t) / (wraps + w))
            elif v > start and v not in seen:
                seen.add(v)
                walk(start, v, seen, secs + t, wraps + w)
                seen.discard(v)

    for s in range(nodes):
        walk(s, s, {s}, 0.0, 0)
    return best


def stage_inflated(stages_s: np.ndarray, beta: Sequence[float]) -> np.ndarray:
    """Stage times inflated by co-runners: t_{j,r} (1 + sum_{i != j} beta_r occ_{i,r})."""
    total = stages_s.sum(axis=1, keepdims=True)
    occ = np.divide(stages_s, total, out=np.zeros_like(stages_s), where=total > 0)
    others = occ.sum(axis=0, keepdims=True) - occ
    return stages_s * (1.0 + np.asarray(beta, dtype=float) * others)


def packed_cycle_s(stages_s: np.ndarray, spans: Sequence[int]) -> float:
    """Best cycle time over assignments of the jobs to distinct phases (job 0 in phase 0)."""
    m, phases = len(stages_s), int(sum(spans))
    if m > phases:
        raise ValueError(f"a group of {m} jobs needs at least {m} phases to interleave")
    return min(
        cycle_period_s(stages_s, spans, (0, *rest))
        for rest in permutations(range(1, phases), m - 1)
    )


def interleaved_iter_s(
    stages_s: np.ndarray, interference: list[float], spans: Sequence[int] | None = None
) -> float:
    """Iteration time of a group (rows of ``stages_s``) under the *group* model: the best
    cycle time times ``interference[m - 1]`` (a lone job: its stage sum x interference[0])."""
    m, k = stages_s.shape
    spans = tuple(spans) if spans is not None else (1,) * k
    if m == 1:
        return float(stages_s[0].sum()) * interference[0]
    return packed_cycle_s(stages_s, spans) * interference[m - 1]


def stage_model_iter_s(stages_s: np.ndarray, beta: Sequence[float], spans: Sequence[int]) -> float:
    """Iteration time of a group of >= 2 jobs under the *stage* model (no group factor)."""
    return packed_cycle_s(stage_inflated(stages_s, beta), spans)


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


@dataclass
class Group:
    """Jobs interleaved on one gang of GPUs of one type."""

    gid: int
    members: list[int]
    t: int
    gpus: int
    parts: list[tuple[int, int]]
    iter_s: float
    since_s: float  # progress settled up to here
    resume_s: float  # no progress before this (restart)
    start_s: float
    version: int = 0
    max_size: int = 0  # most members it ever had (the allocation record's ``size``)
    stretch: Stretch = NO_STRETCH  # node contention on (data, gpu, net) stages
    stretch_since_s: float = 0.0
    #: per member (in ``members`` order), its own iteration time in a measured pair
    #: (workloads.cluster.pairs); empty: every member at ``iter_s``
    member_iter_s: tuple[float, ...] = ()


def inventory(p: ClusterParams, base: Path) -> tuple[list[str], list[tuple[int, int]]]:
    """GPU types (first-seen order) and (type index, GPUs) per node."""
    if isinstance(p.inventory, list):
        if not p.inventory:
            raise ValueError("inventory: needs at least one node group")
        rows = [(g.gpu_type, g.gpus_per_node) for g in p.inventory for _ in range(g.nodes)]
    else:
        rows = read_alibaba_nodes(resolve_path(p.inventory.trace_dir, base) / p.inventory.file)
    types = list(dict.fromkeys(t for t, _ in rows))
    return types, [(types.index(t), g) for t, g in rows]
