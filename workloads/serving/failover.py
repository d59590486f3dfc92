"""Serving instances lost to a device failure: their requests retried, replacements.

A device failure (the cluster fault injector, :mod:`workloads.colocate.faults`) loses
every serving instance placed on the device (a TP group stops with any of its GPUs).
:class:`Failover` carries it out on a :class:`~workloads.serving.workload.ServingWorkload`
with the workload's own mechanisms:

* the instance leaves the routing pool, its iteration in flight is void, its weights and
  KV cache are freed and its healthy GPUs return to the free pool (the failed ones go to
  repair); the autoscaler stops counting it (its unit shrinks, or goes);
* every request it held (queued, prefilling, decoding) is retried on another instance:
  its KV cache is lost, so it is prefilled again over its prompt and the tokens it had
  already emitted (what a recompute preemption does, vLLM), with its first-token time
  kept; with no instance left it waits (``parked``) for the next one to become ready,
  as do requests arriving meanwhile;
* recovery is the autoscaler's: it scales out onto free GPUs when its policy sees the
  lost capacity, each new instance paying its cold start.

Only colocated (``mixed``) instances without a prefix cache are handled: a
disaggregated unit would also lose KV transfers in flight, which is not modelled.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from hetsim.simulator.engine import InvariantViolation
from hetsim.workloads.serving.instance import NO_SEQUENCE, Instance

PARKED = -2
"""``entry_of`` of a request that arrived while no instance could take it."""


class Failover:
    """Losing instances of one serving workload to failed devices (module doc)."""

    def __init__(self, w: Any) -> None:
        if w.params.prefix_cache:
            raise ValueError("faults: a serving workload with prefix_cache is not supported")
        roles = sorted({i.role for i in w.instances if i.role != "mixed"})
        if roles:
            raise ValueError(f"faults: serving with {'/'.join(roles)} instances (disaggregated) "
                             "is not supported; only colocated instances")  # fmt: skip
        self.w = w
        self.lost: dict[int, float] = {}  # instance number -> when it was lost
        self.retried = 0
        self.recompute_tokens = 0
        self._waiting_since: deque[float] = deque()  # losses not yet replaced
        self.replica_s = 0.0
        self._install()

    def _install(self) -> None:
        """Wrap arrivals (park them with no instance) and loads (void a lost instance's
        pending readiness; a new instance ready replaces the oldest loss and takes the
        parked requests)."""
        w, arrive, load = self.w, self.w._arrive, self.w.load

        def arrive_or_park(i: int) -> None:
            if w.entry:
                arrive(i)
                return
            if i + 1 < len(w._arrival):
                w._schedule(i + 1)
            w.entry_of[i] = PARKED
            w.parked.append(i)

        def guarded_load(inst: Instance, devs: list[str], on_ready: Any = None) -> None:
            if on_ready is None:
                load(inst, devs)
                return

            def ready() -> None:
                if inst.number in self.lost:
                    return
                on_ready()
                if self._waiting_since:
                    self.replica_s += w.sim.now - self._waiting_since.popleft()
                self.flush()

            load(inst, devs, ready)

        w._arrive = arrive_or_park
        w.load = guarded_load

    # ---- a failure -------------------------------------------------------------------
    def fail(self, devices: list[str]) -> list[tuple[int, int]]:
        """``devices`` failed now: they leave the free pool; every live instance on one
        is lost and its requests retried. Returns (instance, requests retried) per loss."""
        w, bad = self.w, set(devices)
        for nodes in w._free.values():
            for node, ds in nodes.items():
                nodes[node] = [d for d in ds if d not in bad]
        hit = [i for i in w.instances
               if i.released_s is None and bad & set(w.placement[i.number])]  # fmt: skip
        held: list[int] = []
        out = []
        for inst in hit:
            ids = self._lose(inst, bad)
            out.append((inst.number, len(ids)))
            held += ids
        self.retried += len(held)
        self.resubmit(sorted(held))
        return out

    def _lose(self, inst: Instance, bad: set[str]) -> list[int]:
        """Stop ``inst`` now; returns the requests it held, reset for a retry."""
        w, now = self.w, float(self.w.sim.now)
        if inst.role != "mixed":
            raise InvariantViolation(f"serving: lost instance {inst.number} is {inst.role}")
        run = inst._run
        if run is not None:  # the decode-run iterations that ended before now
            inst._sync()
            if run.alarm is not None:
                run.alarm.cancel()
            inst._run = None
        reqs = inst.reqs
        for k, i in enumerate(inst.ids):
            reqs.left[i] = inst._left0[k] - inst._steps
        taken = inst._it[1] if inst.busy else []
        ids = sorted({*inst.ids, *inst.waiting, *inst.pending, *taken})
        if len(ids) != inst.outstanding:
            raise InvariantViolation(
                f"serving: lost instance {inst.number} holds {len(ids)} requests, "
                f"{inst.outstanding} counted"
            )
        for i in ids:
            reqs.done.pop(i, None)
            emitted = int(w.times.output[i]) - reqs.left[i]
            reqs.prefill_len[i] = w._prompt[i] + emitted
            self.recompute_tokens += reqs.prefill_len[i]
        inst.waiting.clear()
        inst.pending.clear()
        inst.ids, inst._ctx0, inst._left0 = [], [], []
        inst._ctx0_sum, inst._min_left0, inst._steps = 0, NO_SEQUENCE, 0
        inst._residues = [0] * inst.block_tokens
        inst._set_used(0)
        inst.queued_tokens = 0
        inst._add_outstanding(-inst.outstanding)
        inst._it = (now, [], 0, None)
        inst.ready, inst.busy = False, True  # never starts an iteration again
        inst.set_ready = _never  # type: ignore[method-assign]
        inst._finish = _void  # type: ignore[method-assign,assignment]  # iteration in flight
        inst.draining, inst.on_drained = False, None
        inst.released_s = now
        self.lost[inst.number] = now
        self._waiting_since.append(now)
        w.entry[:] = [s for s in w.entry if s is not inst]
        w.decode[:] = [s for s in w.decode if s is not inst]
        for d in w.placement[inst.number]:
            mem = w.cluster.memory(d)
            mem.free("weights")
            mem.free("kv-cache")
            if d not in bad:
                w._free[inst.cost.spec.name].setdefault(w.cluster.device(d).node, []).append(d)
        self._unit_lost(inst)
        return ids

    def _unit_lost(self, inst: Instance) -> None:
        """The autoscaler's books: the instance leaves its unit (a unit left empty goes;
        a warming one whose other members are ready becomes active)."""
        a = self.w.autoscaler
        a.gpus_now -= inst.cost.tp
        unit = a.units.get(inst.group)
        if unit is None:
            return
        if unit.state == "warming" and inst.ready:
            unit.ready -= 1
        unit.members.remove(inst)
        a._event("lost", unit.group, ())
        if not unit.members or (unit.state == "draining" and unit.released == len(unit.members)):
            del a.units[unit.group]
            return
        if unit.state == "warming" and unit.ready == len(unit.members):
            unit.ready -= 1
            a._ready(unit)  # counts the last ready member again and activates the unit
            self.flush()

    def resubmit(self, ids: list[int]) -> None:
        """Route each of ``ids`` to an entry instance, or park them with none."""
        w = self.w
        for i in ids:
            if not w.entry:
                w.parked.append(i)
                continue
            inst = w._route(i, "entry", w.entry, -1)
            w.entry_of[i] = inst.number
            inst.submit(i)

    def flush(self) -> None:
        """An instance joined the routing pool: the parked requests go to it."""
        w = self.w
        if w.parked and w.entry:
            ids, w.parked[:] = list(w.parked), []
            self.resubmit(ids)

    def restore(self, device: str) -> None:
        """``device`` is repaired: it joins the free pool (the autoscaler may use it)."""
        w = self.w
        dev = w.cluster.device(device)
        w._free.setdefault(dev.spec.name, {}).setdefault(dev.node, []).append(device)

    def replica_s_lost(self, end_s: float) -> float:
        """Seconds from each lost instance to the next instance serving made ready (its
        replacement, whatever the trigger), or to ``end_s`` when none came."""
        return self.replica_s + sum(end_s - t for t in self._waiting_since)


def _never() -> None:
    """A lost instance's weights finished loading: it never serves."""


def _void(*_args: Any) -> None:
    """A lost instance's iteration in flight ends: nothing it computed is kept."""
