"""Each workload's share of a multi-workload run's energy and carbon.

The cluster row's ``energy_J`` is every device's meter (idle floor plus busy draw), host
DRAM and NICs (:mod:`hetsim.devices.energy`). Split among the workloads:

* **busy draw of an accelerator** goes to the workload that booked it: a draw booked
  during the run with its time (``EnergyMeter.busy``) to the device's owner at that time
  in the :class:`~workloads.colocate.ledger.Ledger` (a workload uses a device only while
  it owns it, checked at run end); a draw booked while a workload's summary is made
  (serving books its instances' iterations then) to that workload;
* **idle floor of an accelerator** to its owner over each interval it is owned; on a
  shared device (a sharing model other than exclusive) owned by several at once, in equal
  parts (an approximation: the sharing models split compute and memory, not the floor);
  while nobody owns it, to ``unowned``;
* **a node's host energy** (its CPUs' meters, their DRAM, the node's NIC) in proportion to
  the accelerator-seconds each workload owned on that node (a node without accelerators:
  in proportion to the whole cluster's).

The parts add up to the cluster row's ``energy_J`` (checked at run end). Carbon per
workload applies :func:`hetsim.devices.carbon.carbon_columns` to its energy and to the
accelerator-seconds it owned, by type (embodied carbon).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from typing import Any

from hetsim.devices.carbon import carbon_columns
from hetsim.devices.power import dram_W, nic_W
from hetsim.simulator.engine import InvariantViolation

ACCELERATORS = ("gpu", "npu")
UNOWNED = "unowned"

ATTRIBUTED_METRICS: dict[str, str] = {
    "energy_attributed_J": "this workload's share of the cluster row's energy_J, J: the busy "
    "draw it booked, the idle floor of the accelerators while it owned them (split equally "
    "on a shared device) and its share of each node's host energy by accelerator-seconds "
    "owned there (workloads/colocate/energy_split.py); the workloads' shares and the "
    "cluster row's energy_unowned_J add up to the cluster's energy_J",
    "energy_attributed_accelerator_J": "the accelerator part of energy_attributed_J, J",
    "energy_attributed_host_J": "the host part (CPUs, DRAM, NICs) of energy_attributed_J, J",
    "carbon_attributed_g": "operational carbon of energy_attributed_J plus the embodied "
    "carbon of the accelerator-seconds this workload owned, gCO2e",
}
UNOWNED_METRICS: dict[str, str] = {
    "energy_unowned_J": "energy no workload is charged: the idle floor of accelerators while "
    "nobody owned them and the matching share of host energy, J",
}


class EnergySplit:
    """Collects the timed busy draws of a multi-workload run's accelerators and splits the
    run's energy among the workloads (module doc)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.accelerators = list(cluster.device_names(ACCELERATORS))
        for name in self.accelerators:
            cluster.device(name).energy.log = []
        #: workload -> device -> busy draw above idle booked during its summary (J)
        self.at_summary: dict[str, dict[str, float]] = defaultdict(dict)
        self._before: dict[str, float] = {}
        self._logged: dict[str, int] = {}

    def summary_starts(self) -> None:
        """A workload's summary is about to be made: note every meter's booked draw."""
        self._before = {d: self.cluster.device(d).energy.active_J for d in self.accelerators}
        self._logged = {d: len(self.cluster.device(d).energy.log or ()) for d in self.accelerators}

    def summary_done(self, workload: str) -> None:
        """Charge ``workload`` with what its summary booked since :meth:`summary_starts`
        (timed draws booked then are dropped from the log: charged here, once)."""
        for d in self.accelerators:
            meter = self.cluster.device(d).energy
            if meter.log is not None:
                del meter.log[self._logged.get(d, len(meter.log)) :]
            extra = meter.active_J - self._before.get(d, meter.active_J)
            if extra:
                self.at_summary[workload][d] = self.at_summary[workload].get(d, 0.0) + extra

    def split(
        self, ledger: Any, end_s: float, workloads: list[str]
    ) -> tuple[dict[str, dict[str, float]], float]:
        """Per workload its :data:`ATTRIBUTED_METRICS` energy columns (no carbon yet), and
        the unowned energy (J)."""
        by_dev: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
        for d, o, a, b in ledger.all_intervals(end_s):
            by_dev[d].append((o, a, min(b, end_s)))
        accel: dict[str, float] = defaultdict(float)
        owned_s: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # node
        for d in self.accelerators:
            dev = self.cluster.device(d)
            meter = dev.energy
            segments = _segments(by_dev.get(d, []), end_s)
            for a, b, owners in segments:
                share = (b - a) / max(len(owners), 1)
                for o in owners or (UNOWNED,):
                    accel[o] += meter.model.idle_W * share
                    owned_s[dev.node][o] += share
            booked_at_summary = sum(s.get(d, 0.0) for s in self.at_summary.values())
            timed = 0.0
            for t, joules in meter.log or ():
                if not math.isfinite(t):
                    continue  # booked without a time: below
                owners = _owners_at(segments, t)
                timed += joules
                for o in owners or (UNOWNED,):
                    accel[o] += joules / max(len(owners), 1)
            untimed = meter.active_J - timed - booked_at_summary
            if abs(untimed) > 1e-9 * max(1.0, meter.active_J):  # booked without a time
                owners_total: dict[str, float] = defaultdict(float)
                for a, b, owners in segments:
                    for o in owners:
                        owners_total[o] += (b - a) / len(owners)
                total = sum(owners_total.values())
                for o, s in owners_total.items() if total > 0 else [(UNOWNED, 1.0)]:
                    accel[o] += untimed * (s / total if total > 0 else 1.0)
        for w, booked in self.at_summary.items():
            accel[w] += sum(booked.values())
        host = self._host(end_s, owned_s)
        out: dict[str, dict[str, float]] = {}
        for w in workloads:
            a, h = accel.get(w, 0.0), host.get(w, 0.0)
            out[w] = {"energy_attributed_J": a + h, "energy_attributed_accelerator_J": a,
                      "energy_attributed_host_J": h}  # fmt: skip
        unowned = accel.get(UNOWNED, 0.0) + host.get(UNOWNED, 0.0)
        strays = set(accel) | set(host)
        strays -= {*workloads, UNOWNED}
        if strays:
            raise InvariantViolation(f"energy charged to unknown owners {sorted(strays)}")
        return out, unowned

    def _host(self, end_s: float, owned_s: dict[str, dict[str, float]]) -> dict[str, float]:
        """Each node's host energy split by accelerator-seconds owned on it."""
        cl = self.cluster
        per_node: dict[str, float] = defaultdict(float)
        for name in cl.device_names(("cpu",)):
            dev = cl.device(name)
            per_node[dev.node] += dev.energy.energy_J(end_s)
            per_node[dev.node] += dram_W(cl.memory(name).capacity_bytes) * max(end_s, 0.0)
        if cl.config.network is not None:
            for node in cl.config.nodes:
                per_node[node.name] += nic_W() * max(end_s, 0.0)
        everyone: dict[str, float] = defaultdict(float)
        for shares in owned_s.values():
            for o, s in shares.items():
                everyone[o] += s
        out: dict[str, float] = defaultdict(float)
        for node, joules in per_node.items():
            weights = owned_s.get(node) or everyone or {UNOWNED: 1.0}
            total = sum(weights.values())
            for o, s in weights.items():
                out[o] += joules * s / total if total > 0 else 0.0
        return out

    def owned_type_s(self, ledger: Any, end_s: float) -> dict[str, dict[str, float]]:
        """Workload -> accelerator type -> seconds owned (shared devices split equally)."""
        by_dev: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
        for d, o, a, b in ledger.all_intervals(end_s):
            by_dev[d].append((o, a, min(b, end_s)))
        out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for d in self.accelerators:
            t = self.cluster.device(d).spec.name
            for a, b, owners in _segments(by_dev.get(d, []), end_s):
                for o in owners:
                    out[o][t] += (b - a) / len(owners)
        return out


def carbon_of(energy_J: float, end_s: float, type_s: dict[str, float], cluster: Any) -> float:
    """Operational plus embodied carbon (g) of ``energy_J`` and the accelerator-seconds
    ``type_s`` over a run of ``end_s`` seconds."""
    row = carbon_columns(energy_J, end_s, type_s, cluster.config.carbon, cluster.load_grid())
    return float(row["carbon_g"])


def _segments(
    intervals: list[tuple[str, float, float]], end_s: float
) -> list[tuple[float, float, tuple[str, ...]]]:
    """[0, end_s] cut at every ownership change: (start, end, owners) per piece."""
    cuts = sorted({0.0, end_s, *(x for _, a, b in intervals for x in (a, b) if 0 <= x <= end_s)})
    out = []
    for a, b in itertools.pairwise(cuts):
        if b <= a:
            continue
        mid = (a + b) / 2
        owners = tuple(sorted({o for o, s, e in intervals if s <= mid < e}))
        out.append((a, b, owners))
    return out


def _owners_at(segments: list[tuple[float, float, tuple[str, ...]]], t: float) -> tuple[str, ...]:
    """Owners of the piece holding time ``t`` (a piece starting at ``t`` wins a tie)."""
    if not math.isfinite(t):
        return ()
    lo, hi = 0, len(segments)
    while lo < hi:  # first piece whose end is after t
        mid = (lo + hi) // 2
        if segments[mid][1] <= t:
            lo = mid + 1
        else:
            hi = mid
    if lo < len(segments) and segments[lo][0] <= t:
        return segments[lo][2]
    return segments[-1][2] if segments and t >= segments[-1][1] else ()
