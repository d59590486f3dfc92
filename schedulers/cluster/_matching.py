"""Muri's packing loop, shared by the Muri and Cuckoo packing policies.

Rounds of maximum-weight general-graph matching (networkx's blossom algorithm) over the
candidates: pairs merge, then merged groups may match again, until queued demand fits
the free GPUs or groups reach ``max_group_size``. Only candidates with the same GPU
count are joined (Muri's same-#GPU rule); two running groups are never merged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hetsim.workloads.cluster.view import PackingView

if TYPE_CHECKING:
    import networkx as nx

#: job id -> (solo iteration s, remaining iterations, deadline s, GPUs)
Facts = dict[int, tuple[float, int, float, int]]
#: weight of merging a set of jobs (job ids) given the view; <= 0 means no edge
Weight = Callable[[PackingView, Facts, tuple[int, ...]], float]


def merged_demand(view: PackingView, groups: list[tuple[int, ...]]) -> int:
    """GPUs that the queued part of the candidates would take if ``groups`` ran."""
    return sum(
        max(view.units[i].gpus for i in g)
        for g in groups
        if not any(view.units[i].running for i in g)
    )


def members_of(view: PackingView, group: tuple[int, ...]) -> tuple[int, ...]:
    """Job ids of a set of units."""
    return tuple(j for i in group for j in view.units[i].members)


def matching_rounds(view: PackingView, weight: Weight) -> list[tuple[int, ...]]:
    """Disjoint merges (tuples of unit indices, each of size >= 2)."""
    groups: list[tuple[int, ...]] = [(i,) for i in range(len(view.units))]
    facts = job_facts(view)
    for _ in range(view.max_group_size - 1):
        if merged_demand(view, groups) <= view.free_gpus:
            break
        import networkx as nx  # on the first packing decision, not at import (start-up)

        graph = _graph(view, groups, facts, weight)
        matched = nx.max_weight_matching(graph)
        if not matched:
            break
        used: set[int] = set()
        out: list[tuple[int, ...]] = []
        for a, b in sorted(tuple(sorted(e)) for e in matched):
            out.append(tuple(sorted(groups[a] + groups[b])))
            used.update((a, b))
        groups = sorted(out + [g for i, g in enumerate(groups) if i not in used])
    return [g for g in groups if len(g) > 1]


def _graph(
    view: PackingView, groups: list[tuple[int, ...]], facts: Facts, weight: Weight
) -> nx.Graph:
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(range(len(groups)))
    gpus = [max(view.units[i].gpus for i in g) for g in groups]
    running = [any(view.units[i].running for i in g) for g in groups]
    members = [members_of(view, g) for g in groups]
    for a in range(len(groups)):
        ga, run_a, ma = gpus[a], running[a], members[a]
        for b in range(a + 1, len(groups)):
            gb, run_b, mb = gpus[b], running[b], members[b]
            if (ga != gb and not view.cross_gpu) or (run_a and run_b):
                continue
            if (run_a and gb > ga) or (run_b and ga > gb):
                continue  # a running group cannot grow its GPUs
            if len(ma) + len(mb) > view.max_group_size:
                continue
            w = weight(view, facts, ma + mb)
            if w > 0:
                graph.add_edge(a, b, weight=w)
    return graph


def job_facts(view: PackingView) -> Facts:
    """Job id -> (solo iteration s, remaining iterations, deadline s, GPUs) over all units."""
    out = {}
    for u in view.units:
        gpus = u.member_gpus or (u.gpus,) * len(u.members)
        for j, s, r, d, g in zip(
            u.members, u.solo_iter_s, u.remaining_iters, u.deadline_s, gpus, strict=True
        ):
            out[j] = (s, r, d, g)
    return out
