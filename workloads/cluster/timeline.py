"""Cluster jobs on the GPUs they occupy, for the trace.

The GPU pool (:class:`workloads.cluster.model.GpuPool`) counts free GPUs per node, not
which ones; a timeline needs GPU identities. :class:`GpuTimeline` gives each group of
jobs numbered GPU slots on the nodes the pool chose (the lowest free numbers of each
node, per part, in part order) and records, on one trace track per slot, a span per
stretch of time the group held that slot with one set of members (``j3+j7``): a
regroup closes the span and opens the next, a released GPU closes its span. A group
releases GPUs from the end of its part list, as the pool does, so the slot counts per
node always equal the pool's. Used only when spans are recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsim.simulator.recorder import Recorder


@dataclass
class _Held:
    """The slots a group holds (node, slot; part order) and its open spans' label."""

    slots: list[tuple[int, int]]
    label: str
    since_s: float


def members_label(members: list[int]) -> str:
    """A group's span name: its job numbers, ``j3+j7``."""
    return "+".join(f"j{j}" for j in members)


class GpuTimeline:
    """Numbered GPU slots per node and the spans of the groups on them."""

    def __init__(
        self, recorder: Recorder, types: list[str], node_type: list[int], capacity: list[int]
    ) -> None:
        self.rec = recorder
        self.types = types
        self.node_type = node_type
        self.free: list[list[int]] = [list(range(c)) for c in capacity]
        self.held: dict[int, _Held] = {}

    def track(self, node: int, slot: int) -> str:
        """Trace track of GPU ``slot`` of ``node`` (declared on first use)."""
        t = self.types[self.node_type[node]]
        return self.rec.track(f"node{node}/gpu{slot}", group=f"node{node} ({t})")

    def start(
        self, gid: int, parts: list[tuple[int, int]], members: list[int], now_s: float
    ) -> None:
        """Group ``gid`` took ``parts`` ((node, GPUs) from the pool) now."""
        slots = []
        for node, k in parts:
            free = self.free[node]
            free.sort()
            take, self.free[node] = free[:k], free[k:]
            slots += [(node, s) for s in take]
        self.held[gid] = _Held(slots, members_label(members), now_s)

    def sync(self, gid: int, members: list[int], gpus: int, now_s: float) -> None:
        """Group ``gid`` now holds ``gpus`` GPUs with ``members``: close the spans of the
        GPUs it released, and if its members changed, close every span and reopen."""
        h = self.held[gid]
        while len(h.slots) > gpus:
            node, slot = h.slots.pop()
            self._close(h, node, slot, now_s)
            self.free[node].append(slot)
        label = members_label(members)
        if label != h.label:
            for node, slot in h.slots:
                self._close(h, node, slot, now_s)
            h.label, h.since_s = label, now_s

    def stop(self, gid: int, now_s: float) -> None:
        """Group ``gid`` released all its GPUs now."""
        h = self.held.pop(gid)
        for node, slot in h.slots:
            self._close(h, node, slot, now_s)
            self.free[node].append(slot)

    def _close(self, h: _Held, node: int, slot: int, now_s: float) -> None:
        if now_s > h.since_s:
            self.rec.span(self.track(node, slot), h.label, h.since_s, now_s, None)
