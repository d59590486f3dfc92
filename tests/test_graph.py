"""The topology's own graph finds networkx's routes: same Dijkstra paths (ties included),
edge order and components, on tie-heavy random graphs and on every shipped cluster."""

import random
from itertools import pairwise
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
import yaml

from hetsim.devices.cluster import ClusterConfig
from hetsim.devices.graph import LinkGraph

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def _twins(seed: int, nodes: int, edges: int) -> tuple[LinkGraph, nx.Graph]:
    """The same random graph built both ways, by the same calls in the same order; edge
    weights from {1, 2, 3} so that many routes tie."""
    rng = random.Random(seed)
    ours, theirs = LinkGraph(), nx.Graph()
    names = [f"n{i}" for i in range(nodes)]
    rng.shuffle(names)
    for n in names:
        ours.add_node(n, entry=n)
        theirs.add_node(n, entry=n)
    for _ in range(edges):
        a, b = rng.sample(names, 2)
        w = rng.choice((1, 2, 3))
        ours.add_edge(a, b, w=w)
        theirs.add_edge(a, b, w=w)
    return ours, theirs


def _w(u: str, v: str, d: dict[str, Any]) -> float:
    return float(d["w"])


@pytest.mark.parametrize("seed", range(6))
def test_paths_edges_and_components_are_networkx(seed: int) -> None:
    ours, theirs = _twins(seed, nodes=14, edges=22)
    assert [(u, v) for u, v, _ in ours.edges()] == list(theirs.edges())
    assert ours.number_of_edges() == theirs.number_of_edges()
    assert ours.components() == list(nx.connected_components(theirs))
    ties = 0
    for src in theirs:
        for dst in theirs:
            try:
                expected = nx.dijkstra_path(theirs, src, dst, weight=_w)
            except nx.NetworkXNoPath:
                expected = None
            assert ours.shortest_path(src, dst, _w) == expected, (src, dst)
            if expected is not None and len(expected) > 2:
                cost = sum(_w(u, v, theirs[u][v]) for u, v in pairwise(expected))
                ties += sum(1 for _ in nx.all_shortest_paths(theirs, src, dst, weight="w")) > 1
                assert cost == nx.dijkstra_path_length(theirs, src, dst, weight=_w)
    assert ties > 0  # the draw has equal-cost routes, so the tie-breaking is exercised


def _clusters() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(SCENARIOS.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        if isinstance(raw, dict) and isinstance(raw.get("cluster"), dict):
            out.append((path.stem, raw["cluster"]))
    return out


@pytest.mark.slow
def test_every_shipped_cluster_routes_as_networkx() -> None:
    clusters = _clusters()
    assert len(clusters) > 30
    pairs = 0
    for name, raw in clusters:
        topo = ClusterConfig.model_validate(raw).topology()
        graph = topo.graph.to_networkx()
        assert [(u, v) for u, v, _ in topo.graph.edges()] == list(graph.edges()), name
        devices = [n for n, _ in topo.graph.nodes()]

        def weight(u: str, v: str, d: dict[str, Any], nbytes: int = topo.route_nbytes) -> float:
            return float(d["spec"].transfer_time_s(nbytes))

        for src in devices:
            for dst in devices:
                if not nx.has_path(graph, src, dst):
                    with pytest.raises(ValueError, match="no route"):
                        topo.path(src, dst)
                    continue
                hops = topo.path(src, dst)
                nodes = [src] + [h.dst for h in hops] if hops else [src]
                assert nodes == nx.dijkstra_path(graph, src, dst, weight=weight), (name, src, dst)
                pairs += 1
    assert pairs > 100


def test_no_route_is_one_error() -> None:
    g = LinkGraph()
    g.add_node("a")
    g.add_node("b")
    assert g.shortest_path("a", "b", _w) is None
    assert g.shortest_path("a", "a", _w) == ["a"]
    assert g.components() == [{"a"}, {"b"}]
