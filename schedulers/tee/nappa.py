"""Nappa-style allocation of ops to the TEE and to heterogeneous untrusted NNAs.

Nappa (IEEE 2026, abstract only) compiles a model into an encrypted computation graph
and allocates operators by hardware affinity (which NNA supports the op, how fast) and
cross-hardware communication cost. Here the graph is the op chain of one training
step; each op may run in the TEE or, if it has one private operand, on any NNA that
supports it; moving between devices pays the view's switch toll. The cheapest
allocation is a shortest path through a layered graph (networkx), exact for a chain.
Reconstructed: Nappa's vector decomposition is priced like DAC'23's masking (the view's
``protect_s``), and the allocation keeps DAC'23's prefetch (``depth``, default 1).
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.tee.view import TEE, ExecutionPlan, ExecutionView, OpView, offload_cost_s


class NappaParams(BaseModel):
    """``depth``: meta-key prefetch distance applied to the allocation (0: none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    depth: int = Field(default=1, ge=0)


def _choices(op: OpView) -> dict[int, float]:
    out = {TEE: op.tee_s}
    if op.offloadable:
        for k in range(len(op.nna_s)):
            cost = offload_cost_s(op, k)
            if math.isfinite(cost):
                out[k] = cost
    return out


def allocate(view: ExecutionView) -> tuple[int, ...]:
    """Minimum-time placement of the op chain (shortest path, ties to the lower index)."""
    g = nx.DiGraph()
    g.add_node(("start", TEE))
    prev_nodes: list[tuple[object, int]] = [("start", TEE)]
    for i, op in enumerate(view.ops):
        nodes: list[tuple[object, int]] = []
        for dev, cost in sorted(_choices(op).items()):
            node = (i, dev)
            for p in prev_nodes:
                toll = 0.0 if p[1] == dev else view.switch_s
                g.add_edge(p, node, weight=cost + toll)
            nodes.append(node)
        prev_nodes = nodes
    g.add_node("end")
    for p in prev_nodes:
        g.add_edge(p, "end", weight=0.0 if p[1] == TEE else view.switch_s)
    path = nx.shortest_path(g, ("start", TEE), "end", weight="weight", method="bellman-ford")
    return tuple(node[1] for node in path[1:-1])


@policies.register("tee.execution", "nappa")
class NappaExecution:
    """Ops allocated to TEE or NNAs by affinity and switching cost (Nappa-style)."""

    Params = NappaParams

    def __init__(self, params: NappaParams, rng: np.random.Generator) -> None:
        self.params = params

    def plan(self, view: ExecutionView) -> ExecutionPlan:
        """Shortest-path allocation, prefetch ``depth``."""
        return ExecutionPlan(allocate(view), self.params.depth)
