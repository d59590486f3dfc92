"""Collectives of a parallel training job over NVLink inside a node and NICs across nodes.

Ranks are numbered as Megatron-LM lays them out: tensor parallel innermost, then context
parallel, then data parallel, then pipeline parallel (``rank = tp_i + tp (cp_i + cp (dp_i +
dp pp_i))``), with ``gpus_per_node`` consecutive ranks on a node. A group of ``n`` ranks
``stride`` apart therefore has ``g = min(n, max(1, gpus_per_node // stride))`` members on
each node it spans, and spans ``N = n / g`` nodes.

* ``N = 1``: the collective runs on the node's scale-up fabric (NVSwitch) with ``n`` ranks,
  :func:`hetsim.devices.collectives.collective_time_s`.
* ``N > 1``: hierarchically, as NCCL does it in effect: a reduce-scatter among the ``g``
  members of a node (scale-up), the op over the ``N`` nodes on ``S / g`` bytes per rank
  (scale-out), and an all-gather inside the node again (all-reduce; all-gather and
  reduce-scatter keep only their own half). Every GPU of a node drives its own NIC
  (rail-optimised: ``node_nic_Bps / gpus_per_node`` each, since the node's other GPUs run
  their own groups' collectives at the same time), with the scale-out fabric's fitted
  efficiency curve and per-step latency. An all-to-all (expert parallelism) sends the
  ``(n - g) / n`` of each buffer bound for other nodes on that NIC share while the
  ``(g - 1) / n`` for the node's own members crosses NVLink at the same time.

Point-to-point sends between pipeline stages cross a node boundary when
``tp cp dp >= gpus_per_node`` and then use one GPU's NIC share; otherwise NVLink.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

from hetsim.devices.collectives import CollectiveFabric, collective_time_s


@dataclass(frozen=True)
class Layout:
    """Degrees of parallelism and how the ranks sit on nodes."""

    tp: int = 1
    cp: int = 1
    dp: int = 1
    pp: int = 1
    gpus_per_node: int = 8
    #: expert-parallel ranks, carved out of the ``tp cp dp`` ranks of a stage
    ep: int = 1

    @property
    def world(self) -> int:
        """All ranks: ``tp cp dp pp``."""
        return self.tp * self.cp * self.dp * self.pp

    def stride(self, dim: str) -> int:
        """Rank distance between neighbours of a ``tp``/``cp``/``dp``/``dpcp``/``pp`` group
        (``dpcp``: the ranks that hold the same weights, which reduce gradients together;
        ``ep``: consecutive ranks, Megatron-core's expert rank order with expert tensor
        parallel 1; ``edp``: the ranks holding the same experts, ``ep`` apart)."""
        return {"tp": 1, "cp": self.tp, "dp": self.tp * self.cp, "dpcp": self.tp,
                "pp": self.tp * self.cp * self.dp, "ep": 1, "edp": self.ep}[dim]  # fmt: skip

    def size(self, dim: str) -> int:
        """Ranks of a ``tp``/``cp``/``dp``/``dpcp``/``pp``/``ep``/``edp`` group."""
        return {"tp": self.tp, "cp": self.cp, "dp": self.dp, "dpcp": self.dp * self.cp,
                "pp": self.pp, "ep": self.ep,
                "edp": self.tp * self.cp * self.dp // self.ep}[dim]  # fmt: skip

    def per_node(self, dim: str) -> int:
        """Members of one group on each node it spans (``g`` of the module doc)."""
        n = self.size(dim)
        return min(n, max(1, self.gpus_per_node // self.stride(dim)))


@dataclass(frozen=True)
class Fabrics:
    """The scale-up fabric of a node and the scale-out fabric between nodes."""

    intra: CollectiveFabric
    inter: CollectiveFabric
    #: NIC bandwidth of one node, bytes/s per direction (all its NICs together)
    node_nic_Bps: float
    gpus_per_node: int = 8

    @cached_property
    def rail(self) -> CollectiveFabric:
        """The scale-out fabric as one GPU sees it: its share of the node's NICs."""
        return dataclasses.replace(
            self.inter, bandwidth_Bps=self.node_nic_Bps / self.gpus_per_node, mesh_links=0
        )

    def time_s(self, op: str, layout: Layout, dim: str, nbytes: float) -> float:
        """Seconds of one ``op`` over a ``dim`` group (``nbytes`` as nccl-tests counts it)."""
        n = layout.size(dim)
        if n <= 1 or nbytes <= 0:
            return 0.0
        g = layout.per_node(dim)
        nodes = n // g
        size = int(nbytes)
        if nodes <= 1:
            return collective_time_s(op, n, size, self.intra)
        inter = collective_time_s(op, nodes, max(size // g, 1), self.rail)
        if g == 1:
            return inter
        if op == "all_reduce":
            return (
                collective_time_s("reduce_scatter", g, size, self.intra)
                + inter
                + collective_time_s("all_gather", g, size, self.intra)
            )
        if op in ("reduce_scatter", "all_gather"):
            return collective_time_s(op, g, size, self.intra) + inter
        # all-to-all: every rank sends (n - g) / n of its buffer across nodes on its NIC
        # share and (g - 1) / n to its node's other members on NVLink, both at once
        off = collective_time_s(op, n, max(int(size * (n - g) / (n - 1)), 1), self.rail)
        on = collective_time_s(op, g, max(size * g // n, 1), self.intra)
        return max(off, on)

    def p2p_s(self, layout: Layout, nbytes: float) -> float:
        """Seconds to send ``nbytes`` to the next pipeline stage."""
        if nbytes <= 0:
            return 0.0
        cross = layout.stride("pp") >= self.gpus_per_node
        fabric = self.rail if cross else self.intra
        fit = fabric.fit("ring")
        bw = fabric.rank_bandwidth_Bps(2) * fit.efficiency(int(nbytes))
        return fit.alpha_s + nbytes / bw
