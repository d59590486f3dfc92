"""The fast min-cost max-flow of Cuckoo's allocation against networkx's reference."""

from __future__ import annotations

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsim.schedulers.cluster._flow import max_flow_value, min_cost_max_flow


def reference(gpus: list[int], costs: list[dict[int, int]], free: list[int]) -> list[dict]:
    """networkx max_flow_min_cost on the same network, as per-group type -> flow."""
    graph = nx.DiGraph()
    for i, (g, c) in enumerate(zip(gpus, costs, strict=True)):
        graph.add_edge("s", ("g", i), capacity=g, weight=0)
        for t, w in c.items():
            graph.add_edge(("g", i), ("t", t), capacity=g, weight=w)
    for t, cap in enumerate(free):
        graph.add_edge(("t", t), "k", capacity=cap, weight=0)
    flow = nx.max_flow_min_cost(graph, "s", "k")
    return [
        {t: f for (_, t), f in flow.get(("g", i), {}).items() if f > 0} for i in range(len(gpus))
    ]


def test_max_flow_closed_form_by_hand() -> None:
    # Groups of 8 (types 0, 1) and 4 (type 1 only); free 3 and 2. Cuts: A = {} -> 12,
    # {0} -> 3 + 12, {1} -> 2 + 8, {0, 1} -> 5. Max flow = min = 5 (the sink edges).
    assert max_flow_value([8, 4], [{0: 1, 1: 2}, {1: 1}], [3, 2]) == 5
    # A lone group with distinct costs fills its cheapest type first: 3 on type 1, 2 on 0.
    assert min_cost_max_flow([8], [{0: 5, 1: 2}], [2, 3]) == [{1: 3, 0: 2}]


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda n_types: st.tuples(
            st.lists(
                st.tuples(
                    st.sampled_from([1, 2, 4, 8]),
                    st.dictionaries(st.integers(0, n_types - 1), st.integers(1, 6)),
                ),
                min_size=1,
                max_size=5,
            ),
            st.lists(st.integers(0, 10), min_size=n_types, max_size=n_types),
        )
    )
)
def test_flow_equals_networkx(case: tuple[list[tuple[int, dict[int, int]]], list[int]]) -> None:
    groups, free = case
    gpus, costs = [g for g, _ in groups], [c for _, c in groups]
    assert min_cost_max_flow(gpus, costs, free) == reference(gpus, costs, free)
