"""The topology's graph: named nodes and undirected edges with attributes, shortest paths.

A small undirected graph kept as ``networkx.Graph`` keeps one: a node dict and an
adjacency dict of dicts in insertion order, one attribute dict shared by both directions
of an edge. Its iteration orders (nodes, each node's neighbours, edges) and its
:meth:`LinkGraph.shortest_path` are those of networkx 3 (``Graph.edges(data=True)``,
``dijkstra_path``: a binary heap of ``(distance, push count, node)``, a node's
predecessor being the node that last strictly shortened its distance), so routes, ties
included, are the routes networkx finds, without importing networkx on every run
(about 0.1-0.2 s). :meth:`LinkGraph.to_networkx` gives the networkx graph for analysis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from heapq import heappop, heappush
from itertools import count
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import networkx as nx

Weight = Callable[[str, str, dict[str, Any]], float | None]


class LinkGraph:
    """Undirected simple graph of named nodes (devices, switches) and attributed edges."""

    __slots__ = ("_adj", "_joined", "_node")

    def __init__(self) -> None:
        self._node: dict[str, dict[str, Any]] = {}
        self._adj: dict[str, dict[str, dict[str, Any]]] = {}
        self._joined: list[tuple[str, str]] = []  # edges in the order they were added

    def __contains__(self, n: object) -> bool:
        return n in self._node

    def __len__(self) -> int:
        return len(self._node)

    def add_node(self, n: str, **attr: Any) -> None:
        """Add node ``n`` (or update its attributes)."""
        if n not in self._node:
            self._adj[n] = {}
            self._node[n] = attr
        else:
            self._node[n].update(attr)

    def add_edge(self, u: str, v: str, **attr: Any) -> None:
        """Add edge ``u``-``v`` (its ends too, if new), or update its attributes."""
        for n in (u, v):
            if n not in self._node:
                self.add_node(n)
        data = self._adj[u].get(v)
        if data is None:
            data = {}
            self._joined.append((u, v))
        data.update(attr)
        self._adj[u][v] = data
        self._adj[v][u] = data

    def has_edge(self, u: str, v: str) -> bool:
        """Whether ``u`` and ``v`` are joined."""
        return u in self._adj and v in self._adj[u]

    def node(self, n: str) -> dict[str, Any]:
        """Attributes of node ``n`` (KeyError if absent)."""
        return self._node[n]

    def nodes(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(node, attributes) in insertion order."""
        return iter(self._node.items())

    def edge(self, u: str, v: str) -> dict[str, Any]:
        """Attributes of edge ``u``-``v`` (KeyError if absent)."""
        return self._adj[u][v]

    def edges(self) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """Every edge once as ``(u, v, attributes)``, in networkx's order: nodes in
        insertion order, each node's neighbours in the order they were joined, an edge
        reported from the end met first."""
        seen: set[str] = set()
        for n, nbrs in self._adj.items():
            for nbr, data in nbrs.items():
                if nbr not in seen:
                    yield n, nbr, data
            seen.add(n)

    def number_of_edges(self) -> int:
        """How many edges."""
        return sum(len(nbrs) for nbrs in self._adj.values()) // 2

    def components(self) -> list[set[str]]:
        """Connected components, each found from its first node in insertion order."""
        seen: set[str] = set()
        out: list[set[str]] = []
        for n in self._node:
            if n in seen:
                continue
            comp, frontier = {n}, [n]
            while frontier:
                nxt = []
                for v in frontier:
                    for u in self._adj[v]:
                        if u not in comp:
                            comp.add(u)
                            nxt.append(u)
                frontier = nxt
            seen |= comp
            out.append(comp)
        return out

    def shortest_path(self, source: str, target: str, weight: Weight) -> list[str] | None:
        """Least-weight path from ``source`` to ``target`` (node list; None if there is
        none), found and tie-broken as networkx's ``dijkstra_path`` finds it: nodes
        leave a heap of (distance, push count, node); a node is pushed again only when a
        strictly shorter distance reaches it, and its predecessor is the node that did
        so. ``weight(u, v, attributes)`` of None skips the edge."""
        if source not in self._node or target not in self._node:
            raise KeyError(source if source not in self._node else target)
        if source == target:
            return [source]
        adj = self._adj
        dist: dict[str, float] = {}
        seen: dict[str, float] = {source: 0}
        pred: dict[str, str] = {}
        push = count()
        fringe: list[tuple[float, int, str]] = [(0, next(push), source)]
        while fringe:
            d, _, v = heappop(fringe)
            if v in dist:
                continue  # already settled
            dist[v] = d
            if v == target:
                break
            for u, data in adj[v].items():
                cost = weight(v, u, data)
                if cost is None:
                    continue
                vu = d + cost
                if u in dist:
                    if vu < dist[u]:
                        raise ValueError("contradictory paths found: negative weights?")
                elif u not in seen or vu < seen[u]:
                    seen[u] = vu
                    heappush(fringe, (vu, next(push), u))
                    pred[u] = v
        if target not in dist:
            return None
        path = [target]
        while path[-1] in pred:
            path.append(pred[path[-1]])
        path.reverse()
        return path

    def to_networkx(self) -> nx.Graph:
        """The same graph as a ``networkx.Graph``: nodes and edges added in the order
        they were added here (so the same adjacency orders), attributes copied."""
        import networkx as nx

        g = nx.Graph()
        for n, attr in self._node.items():
            g.add_node(n, **attr)
        for u, v in self._joined:
            g.add_edge(u, v, **self._adj[u][v])
        return g
