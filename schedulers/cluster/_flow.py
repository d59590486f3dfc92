"""Min-cost max-flow from groups to GPU types, with the cheap exact cases solved directly.

The network is source -> group i (capacity gpus_i) -> type t (capacity gpus_i, integer
cost per GPU; only the group's allowed edges) -> sink (capacity free_t). The result is
the flow networkx's ``max_flow_min_cost`` returns, computed faster:

- the max-flow value has a closed form (max-flow = min-cut): a cut keeps a set A of types
  on the source side and costs ``sum_{t in A} free_t`` plus ``gpus_i`` for every group
  with an edge leaving A, so the value is the minimum of that over the 2^T sets A;
- networkx's network simplex is then called once on the graph with that demand (what
  ``max_flow_min_cost`` does after its own preflow-push max-flow and a graph copy);
- a single group whose edge costs are all distinct has one optimal flow (any other
  flow of the same value differs by a cycle that trades one type for another of a
  different cost), the greedy fill of its cheapest types, which is returned directly.
"""

from __future__ import annotations

from itertools import combinations

Flow = list[dict[int, int]]  # per group: type -> GPUs of flow


def max_flow_value(gpus: list[int], costs: list[dict[int, int]], free: list[int]) -> int:
    """Max flow of the group -> type network, as the minimum cut over sets of types."""
    types = range(len(free))
    best = sum(g for g, c in zip(gpus, costs, strict=True) if c)  # A = no type
    for k in range(1, len(free) + 1):
        for subset in combinations(types, k):
            inside = set(subset)
            cut = sum(free[t] for t in subset)
            cut += sum(g for g, c in zip(gpus, costs, strict=True) if not c.keys() <= inside)
            best = min(best, cut)
    return best


def min_cost_max_flow(gpus: list[int], costs: list[dict[int, int]], free: list[int]) -> Flow:
    """Per group, the GPUs sent to each type by the min-cost max-flow (as networkx finds it)."""
    if len(gpus) == 1 and len(set(costs[0].values())) == len(costs[0]):
        return [_greedy(gpus[0], costs[0], free)]
    value = max_flow_value(gpus, costs, free)
    if value == 0:
        return [{} for _ in gpus]
    import networkx as nx  # only a contended allocation needs it (start-up time)

    graph = nx.DiGraph()
    for i, (g, c) in enumerate(zip(gpus, costs, strict=True)):
        graph.add_edge("s", ("g", i), capacity=g, weight=0)
        for t, w in c.items():
            graph.add_edge(("g", i), ("t", t), capacity=g, weight=w)
    for t, cap in enumerate(free):
        graph.add_edge(("t", t), "k", capacity=int(cap), weight=0)
    graph.add_node("s", demand=-value)
    graph.add_node("k", demand=value)
    flow = nx.network_simplex(graph)[1]
    return [
        {t: f for (_, t), f in flow.get(("g", i), {}).items() if f > 0} for i in range(len(gpus))
    ]


def _greedy(gpus: int, cost: dict[int, int], free: list[int]) -> dict[int, int]:
    """The unique min-cost max-flow of one group: fill its types cheapest first."""
    out, need = {}, gpus
    for t in sorted(cost, key=cost.__getitem__):
        take = min(int(free[t]), need)
        if take > 0:
            out[t] = take
            need -= take
    return out
