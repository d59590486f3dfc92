"""The mechanism of the ``arbiter`` decision point: lending and reclaiming GPUs.

At start every workload owns the devices its ``devices:`` names (the static partition,
recorded in the :class:`~workloads.colocate.ledger.Ledger`). With a serving workload and
``training-jobs`` workloads, an arbiter with a ``period_s`` is asked every period for a
:class:`~workloads.colocate.view.ArbiterDecision`:

* **lend** ``n``: ``n`` of serving's free GPUs (of types a job can run on, whole nodes'
  worth first so gangs form) leave serving's free pool and are granted to the first
  harvesting workload with waiting jobs (the ledger moves their owner at that instant);
* **reclaim** ``n``: lent GPUs go back, idle ones first, then those of running gangs,
  whose jobs are checkpointed (:mod:`workloads.training_jobs.workload`); each returns
  to serving's free pool when released, and serving's own autoscaler may then scale out
  onto it (a cold start: the serving moving cost);
* **shared_train_gpus** ``n``: on GPUs serving shares with training (``sharing:``),
  training computes on the first ``n`` and is paused on the rest
  (:mod:`workloads.colocate.deferral`).
"""

from __future__ import annotations

from typing import Any

from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.workloads.colocate.estimators import LoadEstimate
from hetsim.workloads.colocate.ledger import Ledger
from hetsim.workloads.colocate.view import ArbiterView

ARBITER_COLUMNS = ("time_s", "rate_estimate_per_s", "serving_busy_gpus", "serving_free_gpus",
                   "lent_gpus", "lend", "reclaim")  # fmt: skip


class Arbitration:
    """Carries out an arbiter's decisions between one serving workload and harvesters."""

    def __init__(
        self, sim: Simulation, ledger: Ledger, members: dict[str, Any], kinds: dict[str, str],
        policy: Any, deferral: Any = None,
    ) -> None:  # fmt: skip
        self.sim, self.ledger, self.policy = sim, ledger, policy
        self.members, self.kinds = members, kinds
        self.deferral = deferral
        serving = [n for n, k in kinds.items() if k == "serving"]
        self.serving: str = serving[0] if serving else ""
        self.harvesters = [n for n, k in kinds.items() if k == "training-jobs"]
        self.lent: dict[str, str] = {}  # device -> harvesting workload
        self.returning: set[str] = set()
        self.estimate: LoadEstimate | None = None
        self.rows = sim.recorder.table("arbiter", ARBITER_COLUMNS)
        #: serving workload -> instance number -> when it was made
        self.created: dict[str, dict[int, float]] = {}
        for name in serving:
            self._watch_serving(name, members[name])

    def _watch_serving(self, name: str, w: Any) -> None:
        """Record when each serving instance is made (its GPUs are busy from then)."""
        made_s = self.created.setdefault(name, {})
        for inst in w.instances:
            made_s[inst.number] = 0.0
        make = w.make_instance

        def made(spec: Any) -> Any:
            inst = make(spec)
            made_s[inst.number] = self.sim.now
            return inst

        w.make_instance = made

    def start(self) -> None:
        """Run the policy every ``period_s`` (never when None or nothing to harvest)."""
        period = getattr(self.policy, "period_s", None)
        if period is None or not self.serving or not self.harvesters:
            return
        est = self.policy.estimator
        self.estimate = LoadEstimate(est.kind, est.window_s, est.alpha, est.forecast_error)
        self.sim.env.process(self._loop(float(period)))

    def _all_done(self) -> bool:
        return all(w.done.triggered for w in self.members.values())

    def _loop(self, period_s: float) -> Any:
        self.step()
        while True:
            yield self.sim.env.timeout(period_s)
            serving = self.members[self.serving]
            if self._all_done() or serving.done.triggered:
                return
            self.step()

    # ---- one decision --------------------------------------------------------------------
    def serving_free(self) -> list[str]:
        """Serving's free GPUs (not in an instance, not lent)."""
        w = self.members[self.serving]
        return [d for nodes in w._free.values() for ds in nodes.values() for d in ds]

    def _lendable(self) -> list[str]:
        types = set()
        for h in self.harvesters:
            types |= set(self.members[h].step_s)
        cl = self.members[self.serving].cluster
        return [d for d in self.serving_free()
                if cl.device(d).spec.name in types and d not in self.ledger.shared]  # fmt: skip

    def view(self) -> ArbiterView:
        """The frozen view the arbiter decides from."""
        w = self.members[self.serving]
        assert self.estimate is not None
        rate = self.estimate.update(w._arrival, self.sim.now)
        live = [i for i in w.instances if i.released_s is None]
        per = [i.goodput_rps / i.cost.tp for i in live if i.role != "decode"]
        waiting = sum(len(self.members[h].queue) for h in self.harvesters)
        h = self.members[next((h for h in self.harvesters if self.members[h].queue),
                              self.harvesters[0])]  # fmt: skip
        restore_s, checkpoint_s = h.predicted_move_s()
        d = self.deferral
        run, paused = d.slowdowns() if d is not None else (1.0, 1.0)
        return ArbiterView(
            self.sim.now, rate, w.autoscaler.gpus_now, len(self.serving_free()),
            sum(per) / len(per) if per else 0.0, len(self.lent), len(self.returning),
            len(self._lendable()), waiting, h.params.gpus_per_job, restore_s, checkpoint_s,
            len(d.devices) if d is not None else 0, d.allowed if d is not None else 0,
            run, paused,
        )  # fmt: skip

    def step(self) -> None:
        """Build the view, ask the arbiter, carry out its decision."""
        v = self.view()
        d = self.policy.decide(v)
        lend = max(0, min(int(d.lend), v.lendable_gpus))
        reclaim = max(0, min(int(d.reclaim), v.lent_gpus - v.returning_gpus))
        self.rows.append(v.now_s, v.serving_rate_per_s, v.serving_busy_gpus,
                         v.serving_free_gpus, v.lent_gpus, lend, reclaim)  # fmt: skip
        if reclaim:
            self.reclaim(reclaim)
        elif lend:
            self.lend(lend)
        if d.shared_train_gpus is not None and self.deferral is not None:
            self.deferral.set(d.shared_train_gpus)

    def lend(self, n: int) -> None:
        """Lend ``n`` of serving's free GPUs (nodes with most free first)."""
        w = self.members[self.serving]
        cl = w.cluster
        free = self._lendable()
        by_node: dict[tuple[str, str], list[str]] = {}
        for d in free:
            dev = cl.device(d)
            by_node.setdefault((dev.spec.name, dev.node), []).append(d)
        order = sorted(by_node.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        picked = [d for _, ds in order for d in sorted(ds)][:n]
        target = next((h for h in self.harvesters if self.members[h].queue), self.harvesters[0])
        for d in picked:
            dev = cl.device(d)
            w._free[dev.spec.name][dev.node].remove(d)
            self.ledger.move(d, self.serving, target)
            self.lent[d] = target
            self.members[target].cluster.admit(d)
        if picked:
            self.members[target].grant(picked)

    def reclaim(self, n: int) -> None:
        """Take back ``n`` lent GPUs: idle ones first, then gangs' (checkpointed)."""
        by_h: dict[str, list[str]] = {}
        chosen: list[str] = []
        for h in self.harvesters:
            for d in self.members[h].free_devices():
                if d in self.lent and d not in self.returning and len(chosen) < n:
                    chosen.append(d)
        rest = sorted(
            (d for d in self.lent if d not in self.returning and d not in chosen),
            key=lambda d: (self.members[self.lent[d]].granted.get(d) is None, d),
        )
        chosen += rest[: n - len(chosen)]
        for d in chosen:
            self.returning.add(d)
            by_h.setdefault(self.lent[d], []).append(d)
        for h, devs in by_h.items():
            self.members[h].reclaim(devs, lambda d, h=h: self._returned(d, h))

    def _returned(self, d: str, h: str) -> None:
        w = self.members[self.serving]
        if self.lent.pop(d, None) != h:
            raise InvariantViolation(f"arbiter: {d} returned by {h}, which did not borrow it")
        self.returning.discard(d)
        self.ledger.move(d, h, self.serving)
        self.members[h].cluster.drop(d)
        dev = w.cluster.device(d)
        w._free[dev.spec.name].setdefault(dev.node, []).append(d)

    # ---- usage ---------------------------------------------------------------------------
    def serving_spans(self, name: str, end_s: float) -> list[tuple[str, float, float]]:
        """(device, start, end) of every GPU of serving workload ``name``'s instances,
        from when each was made to its release (open ones cut at ``end_s``)."""
        w, made_s = self.members[name], self.created[name]
        out: list[tuple[str, float, float]] = []
        for inst in w.instances:
            end = inst.released_s if inst.released_s is not None else end_s
            out.extend((d, made_s.get(inst.number, 0.0), end)
                       for d in w.placement[inst.number])  # fmt: skip
        return out
