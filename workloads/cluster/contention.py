"""Node contention between groups sharing a node: CPU cores, storage and NIC bandwidth.

Opt-in (``workload.contention.enabled``). Mean-field rule, exactly:

- Each node n has capacities ``C[n, r]`` for r in (cpu cores, storage bytes/s, NIC bytes/s).
- A member j of a group, on a node where it has ``k`` GPUs, does per iteration:
  CPU work ``cores_per_gpu(model) x k x t_data`` core-seconds (``t_data`` its data stage
  on the reference profile: Muri's traces merge storage IO and CPU into that column, so
  the whole data stage counts as CPU time); storage work ``bytes_per_gpu_iter(model) x k``
  bytes; NIC work, when the group spans ``n_g > 1`` nodes, ``2 (n_g - 1) / n_g x
  params(model) x grad_bytes_per_param`` bytes per node (a hierarchical all-reduce: one
  ring over the nodes, each node sending that much per iteration); 0 on one node (NVLink
  or PCIe inside the node).
- Its demand while in the stage is work / stage time, and the fraction of the group's
  iteration it spends there is stage time / T_g, so its expected load is work / T_g, with
  ``T_g`` the group's iteration time without node contention (one shot: no fixed point).
- ``load[n, r]`` = sum over every member of every group resident on n. The stretch of
  resource r on n is ``max(1, load / capacity)``; a group takes, per resource, the worst
  over its nodes. Its data stage is multiplied by max(cpu, storage stretch), its network
  stage by the NIC stretch, and its iteration time is recomputed from those stage times
  (workloads.cluster_estimates.Estimator.stretched_iter_s).

The workload re-places a group whenever its members or nodes change and removes it when
it stops; only the groups resident on that group's nodes can change stretch, and only
those whose stretch changed are settled and re-timed. Simplification: with cross-GPU
packing a smaller member is counted on the group's nodes in proportion to its GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from hetsim.workloads.cluster.jobs import JobTable
from hetsim.workloads.cluster.params import Contention, NodeCapacity

RESOURCES = ("cpu", "storage", "nic")
Stretch = tuple[float, float, float]  # per stage: data, gpu, network
NO_STRETCH: Stretch = (1.0, 1.0, 1.0)


class StageEstimator(Protocol):
    """The iteration-time estimates :class:`ShareEstimate` prices a set of jobs with: the
    part of the mechanism's estimator (workloads.cluster.estimates.Estimator) it uses."""

    @property
    def profile(self) -> np.ndarray:
        """Per job: the index of its profile (jobs with equal profiles share estimates)."""
        ...

    def stage_iter_on(self, members: tuple[int, ...], t: int) -> float:
        """Stage-model iteration time of ``members`` on type ``t`` (inf: not allowed)."""
        ...

    def stretched_iter_s(
        self, members: Sequence[int], t: int, stretch: tuple[float, ...], model: str = ""
    ) -> float:
        """Iteration time of ``members`` on type ``t`` with stage s stretched by
        ``stretch[s]``, under interference ``model`` (empty: the ground truth's)."""
        ...


def node_capacities(caps: Sequence[NodeCapacity]) -> np.ndarray:
    """(nodes, 3) array of CPU cores, storage bytes/s and NIC bytes/s, one row per node."""
    return np.array([(c.cpu_cores, c.storage_Bps, c.nic_Bps) for c in caps], dtype=float)


class NodeContention:
    """Per-node expected loads of the resident groups and the stretch they cause."""

    def __init__(self, capacity: np.ndarray, jobs: JobTable, spec: Contention) -> None:
        """``capacity``: (nodes, 3) from :func:`node_capacities`."""
        self.cap = capacity
        self.load = np.zeros_like(capacity)
        self.resident: list[dict[int, None]] = [{} for _ in range(len(capacity))]
        self.contrib: dict[int, dict[int, np.ndarray]] = {}
        #: per node: (max(cpu, storage) load / capacity, NIC load / capacity), kept current
        self.ratio: list[tuple[float, float]] = [(0.0, 0.0)] * len(capacity)
        cores = [spec.cpu_cores_per_gpu_by_model.get(m, spec.cpu_cores_per_gpu) for m in jobs.model]
        #: per job and GPU: CPU core-seconds and storage bytes per iteration; gradient bytes
        self.cpu_work = np.asarray(cores) * jobs.stages_s[:, 0]
        self.storage_work = np.array(
            [spec.storage_bytes_per_gpu_iter.get(m, 0.0) for m in jobs.model]
        )
        self.grad_bytes = np.array(
            [spec.param_count.get(m, 0.0) * spec.grad_bytes_per_param for m in jobs.model]
        )
        self.gpus = jobs.gpus

    def group_loads(
        self, members: Sequence[int], gpus: int, parts: Sequence[tuple[int, int]], iter_s: float
    ) -> dict[int, np.ndarray]:
        """Expected load per node of one group (node -> [cores, storage B/s, NIC B/s])."""
        if iter_s <= 0:  # zero-length iterations: resident but no load
            return {node: np.zeros(3) for node, _ in parts}
        ms = list(members)
        share = self.gpus[ms] / gpus  # a member's GPUs per group GPU (1 unless cross-GPU)
        cpu = float(self.cpu_work[ms] @ share) / iter_s
        storage = float(self.storage_work[ms] @ share) / iter_s
        nodes = {node for node, _ in parts}
        n = len(nodes)
        nic = 2.0 * (n - 1) / n * float(self.grad_bytes[ms].sum()) / iter_s if n > 1 else 0.0
        out: dict[int, np.ndarray] = {}
        for node, k in parts:
            row = out.setdefault(node, np.zeros(3))
            row += (cpu * k, storage * k, 0.0)
        for row in out.values():
            row[2] = nic
        return out

    def place(self, gid: int, loads: dict[int, np.ndarray]) -> set[int]:
        """Set group ``gid``'s loads (replacing any earlier ones); returns the other groups
        resident on the nodes it left or now occupies."""
        touched = self._drop(gid)
        self.contrib[gid] = loads
        for node, row in loads.items():
            self.load[node] += row
            self.resident[node][gid] = None
            touched.add(node)
        self._update(touched)
        return self._neighbours(touched, gid)

    def remove(self, gid: int) -> set[int]:
        """Take group ``gid`` off its nodes; returns the groups left on those nodes."""
        touched = self._drop(gid)
        self._update(touched)
        return self._neighbours(touched, gid)

    def _update(self, nodes: set[int]) -> None:
        for node in nodes:
            r = (self.load[node] / self.cap[node]).tolist()
            self.ratio[node] = (max(r[0], r[1]), r[2])

    def _drop(self, gid: int) -> set[int]:
        old = self.contrib.pop(gid, {})
        for node, row in old.items():
            self.load[node] -= row
            del self.resident[node][gid]
            if not self.resident[node]:
                self.load[node] = 0.0  # no drift from repeated float add/subtract
        return set(old)

    def _neighbours(self, nodes: set[int], gid: int) -> set[int]:
        return {h for node in nodes for h in self.resident[node] if h != gid}

    def stretch(self, gid: int) -> Stretch:
        """Stage multipliers of group ``gid``: data by its worst node's max(cpu, storage)
        oversubscription, network by its worst node's NIC oversubscription (>= 1)."""
        data = net = 1.0
        for node in self.contrib.get(gid, ()):
            d, n = self.ratio[node]
            data, net = max(data, d), max(net, n)
        if data == 1.0 and net == 1.0:
            return NO_STRETCH
        return (round(data, 9), 1.0, round(net, 9))


class ShareEstimate:
    """Contention-aware iteration time for a packing policy (Cuckoo's, opt-in): the
    stage-grained estimate of a set of jobs on type t with its data and network stages
    stretched by the set's *own* expected load against the node capacity share of the GPUs
    it will hold.

    Rule: a group of g GPUs on nodes of G GPUs of type t is entitled to g / G of a node's
    cores and storage bandwidth (per-GPU capacity ``c_t`` = the type's total capacity /
    its GPUs). Its load is the contention mechanism's, ``sum_j work_j g_j / T_P`` with
    ``T_P`` the uncontended stage-grained estimate (one shot, as the mechanism), so the
    data stretch is ``max(1, load / (g c_t))`` per resource. The NIC: a group wider than a
    node spans ``n = ceil(g / G)`` nodes and sends ``2 (n - 1) / n x gradient bytes / T_P``
    per node against one node's NIC; 0 within a node. Why the share and not the actual
    node: the policy prices a merge before the pool picks nodes, and the neighbours change
    with every placement; if every group keeps within its share no node is oversubscribed,
    so the share is the condition under which the merge's estimate holds whoever the
    neighbours are. A lone job is priced the same way (at the default demand of 11.5 cores
    per GPU on 92-core 8-GPU nodes it never exceeds its share alone: its data stage is at
    most its whole iteration). Cached by (type, member profiles and GPUs).
    """

    def __init__(
        self, contention: NodeContention, est: StageEstimator, node_type: np.ndarray,
        node_gpus: np.ndarray, n_types: int,
    ) -> None:  # fmt: skip
        """``node_type``, ``node_gpus``: type index and GPUs of every node (the pool's)."""
        c = contention
        gpus = np.bincount(node_type, weights=node_gpus, minlength=n_types)
        nodes = np.bincount(node_type, minlength=n_types)
        caps = np.stack([np.bincount(node_type, weights=c.cap[:, r], minlength=n_types)
                         for r in range(3)], axis=1)  # fmt: skip
        with np.errstate(divide="ignore", invalid="ignore"):
            #: per type: cores and storage B/s per GPU, NIC B/s per node, GPUs per node
            self.per_gpu = caps / gpus[:, None]
            self.node_nic = caps[:, 2] / nodes
            self.gpus_per_node = gpus / nodes
        self.c = c
        self.est = est
        self._cache: dict[tuple[object, ...], float] = {}

    def iter_on(self, members: tuple[int, ...], t: int) -> float:
        """Contention-aware stage-grained iteration time of ``members`` on type ``t``
        (inf where a member may not run on t)."""
        est = self.est
        key = (t, tuple(sorted((int(est.profile[j]), int(self.c.gpus[j])) for j in members)))
        hit = self._cache.get(key)
        if hit is None:
            t_p = est.stage_iter_on(members, t)
            hit = t_p if not np.isfinite(t_p) else self._stretched(members, t, t_p)
            self._cache[key] = hit
        return hit

    def stretch_on(self, members: tuple[int, ...], t: int, t_p: float) -> Stretch:
        """(data, 1, network) multipliers of the set's own load against its share."""
        if t_p <= 0:
            return NO_STRETCH
        ms = list(members)
        g_j = self.c.gpus[ms]
        g = int(g_j.max())
        cpu = float(self.c.cpu_work[ms] @ g_j) / t_p / (g * self.per_gpu[t, 0])
        storage = float(self.c.storage_work[ms] @ g_j) / t_p / (g * self.per_gpu[t, 1])
        n = int(np.ceil(g / self.gpus_per_node[t]))
        nic = 0.0
        if n > 1:
            nic = 2.0 * (n - 1) / n * float(self.c.grad_bytes[ms].sum()) / t_p / self.node_nic[t]
        return (round(max(1.0, cpu, storage), 9), 1.0, round(max(1.0, nic), 9))

    def _stretched(self, members: tuple[int, ...], t: int, t_p: float) -> float:
        s = self.stretch_on(members, t, t_p)
        if s == NO_STRETCH:
            return t_p
        return self.est.stretched_iter_s(members, t, s, model="stage")
