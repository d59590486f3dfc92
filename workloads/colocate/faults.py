"""Cluster faults in a multi-workload run: nodes or GPUs fail, whatever runs on them.

The ``faults:`` block of a ``workloads:`` scenario (:class:`FaultsConfig`) names the
fail-stop faults: sampled at the rates of the observability domain's fault model
(:class:`~workloads.observability.faults.FailStopModel`: the Llama 3 405B table of
unexpected interruptions per GPU-day, scaled by ``rate_scale``, or explicit rates),
and/or listed at given times (``at``). A sampled fault strikes a GPU uniformly over
the cluster's accelerators; ``scope`` says whether it takes down that GPU or its whole
node. A failed device is lost to its owner for ``repair_s``: the
:class:`~workloads.colocate.ledger.Ledger` moves it to the pseudo-owner
:data:`REPAIR` (so no workload may use it meanwhile, checked at run end), then back
to its home workload (the one that owns it in the partition: a GPU lent by serving
goes back to serving).

What a failure costs each owner is its own mechanism's business:

* ``serving``: every instance on the device is lost and its requests are retried on
  the others (:mod:`workloads.serving.failover`); the autoscaler brings up
  replacements on free GPUs by its own policy, paying the cold start;
* ``training-jobs``: a job whose gang holds the device loses the steps since its last
  written checkpoint and restarts (a restore) when it gets a gang again
  (:meth:`~workloads.training_jobs.workload.TrainingJobsWorkload.fail`); a lent GPU's
  loan ends.

The arbiter sees a device under repair nowhere (not free, not lendable, not lent).
Table ``faults``: one row per fault and workload hit; the rows of the summary get the
fault columns (:data:`SERVING_METRICS`, :data:`TRAINING_METRICS`,
:data:`CLUSTER_METRICS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, model_validator

from hetsim.simulator.engine import InvariantViolation
from hetsim.simulator.limits import PositiveSeconds, Seconds
from hetsim.workloads.observability.faults import FailStopModel, sample_fail_stop

REPAIR = "<repair>"
"""The ledger owner of a device under repair."""

ACCELERATORS = ("gpu", "npu")
FAULT_AWARE = ("serving", "training-jobs")
"""Workload kinds that can lose a device mid-run."""

REPAIR_S = 73_440.0
"""Median time to repair a node, 20.4 h: StepFun's InfiniteHBD trace (584 node faults on
400 GPU servers over 348 days, fault start to end; arXiv:2502.03885)."""

FAULT_COLUMNS = ("time_s", "fault", "cause", "node", "devices", "workload", "lost",
                 "requests_retried", "steps_lost", "gpu_s_lost", "repaired_s")  # fmt: skip

SERVING_METRICS = {
    "fault_instances_lost": "serving instances lost to a failed device",
    "fault_requests_retried": "retries of the requests lost instances held (prefilled "
    "again over prompt and emitted tokens; a request retried twice counts twice)",
    "fault_recompute_tokens": "tokens the retried requests must prefill again",
    "fault_requests_waiting": "requests waiting at the end for an instance (every one "
    "lost, none ready yet); not completed",
    "fault_replica_s_lost": "seconds from each lost instance to the next instance "
    "serving made ready (or to the end)",
    "fault_gpu_s_repair": "GPU-seconds this workload's devices spent under repair",
}
TRAINING_METRICS = {
    "job_failures": "jobs stopped by a failed device in their gang",
    "fault_steps_lost": "optimizer steps thrown away (run since the last written checkpoint)",
    "fault_tokens_lost": "fault_steps_lost x tokens per step",
    "fault_gpu_s_lost": "GPU-seconds thrown away: the lost steps, the partial step, a "
    "restore or checkpoint in progress",
    "checkpoints_saved": "periodic checkpoints written (checkpoint.interval_steps)",
    "fault_gpu_s_repair": "GPU-seconds this workload's devices spent under repair",
}
CLUSTER_METRICS = {
    "faults": "faults that struck (sampled and listed) before the run ended",
    "faulted_gpus": "device failures (a node fault counts each accelerator of the node)",
    "repair_gpu_hours": "GPU-hours devices spent under repair (cut at the run end)",
}


class FaultAt(BaseModel):
    """One fault at a given time (tests and demonstrations)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    at_s: Seconds = Field(description="simulated time the fault strikes (s)")
    node: str = Field(description="cluster node it strikes (a node name of cluster.nodes)")
    gpu: NonNegativeInt | None = Field(
        default=None,
        description="index of the one accelerator it strikes among the node's (0-based, "
        "cluster order); null: every accelerator of the node",
    )
    repair_s: PositiveSeconds | None = Field(
        default=None, description="repair time of this fault (s); null: faults.repair_s"
    )


class FaultsConfig(BaseModel):
    """Fail-stop faults of nodes or GPUs in a multi-workload run.

    * ``fail_stop`` per GPU-day: the Llama 3 405B table (Meta, "The Llama 3 Herd of
      Models", 2024: 419 unexpected interruptions in 54 days on 16,384 H100, 4.74e-4
      per GPU-day; ``workloads.observability.faults``), scaled by ``rate_scale``, its
      hardware causes only unless ``include_software`` (356 of 419: 4.02e-4 per
      GPU-day); a node fails when any of its GPUs draws a fault (``scope: node``: a node
      of ``g`` GPUs fails at ``g`` times the per-GPU rate);
    * ``repair_s`` 73,440 s (20.4 h): the median time to repair of StepFun's
      InfiniteHBD node-fault trace (fault start to fault end, 584 faults on 400
      servers over 348 days; arXiv:2502.03885), swept in
      ``scenarios/colocate-faults.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    scope: Literal["node", "gpu"] = Field(
        default="node",
        description="what a sampled fault takes down: the struck GPU's whole node, or the GPU",
    )
    fail_stop: FailStopModel = Field(
        default_factory=FailStopModel,
        description="sampled faults: rates per GPU-day (kind llama3 scaled by rate_scale, "
        "or rates), or none (kind trace is not supported here)",
    )
    include_software: bool = Field(
        default=False,
        description="count the table's software causes (software-bug, nccl-watchdog-timeout, "
        "dependency: 63 of Llama 3's 419) as device failures; false: hardware causes only "
        "(a software fault stops a job but leaves the device usable)",
    )
    repair_s: PositiveSeconds = Field(
        default=REPAIR_S,
        description="seconds a failed device stays lost to its owner (repair or replace); "
        "default 20.4 h, the InfiniteHBD trace's median",
    )
    horizon_s: PositiveSeconds | None = Field(
        default=None,
        description="sampled faults fall in [0, horizon_s) s; null: until_s (required "
        "when faults are sampled and until_s is null)",
    )
    at: list[FaultAt] = Field(
        default_factory=list, description="faults at given times: at_s, node, gpu, repair_s"
    )

    @model_validator(mode="after")
    def _check(self) -> FaultsConfig:
        if self.fail_stop.kind == "trace":
            raise ValueError("fail_stop.kind trace is not supported for cluster faults; "
                             "list faults under at:")  # fmt: skip
        return self

    def sampled(self) -> bool:
        """Whether any fault is drawn at a rate."""
        return self.fail_stop.kind != "none" and sum(self.fail_stop.rates().values()) > 0


def check_faults(
    cfg: FaultsConfig, cluster: Any, kinds: dict[str, str], shared: dict[str, Any],
    until_s: float | None,
) -> tuple[str, str] | None:  # fmt: skip
    """The first problem of ``cfg`` in its scenario as (field, message), or None."""
    bad = {n: k for n, k in kinds.items() if k not in FAULT_AWARE}
    if bad:
        name = sorted(bad)[0]
        return "faults", (f"workload {name} ({bad[name]}) cannot lose a device; faults need "
                          f"every workload of kind {' or '.join(FAULT_AWARE)}")  # fmt: skip
    if shared:
        return "faults", "not with shared devices (sharing other than exclusive)"
    nodes = {e.node: 0 for e in cluster.topology().devices()}
    for e in _accelerator_entries(cluster):
        nodes[e.node] += 1
    for k, f in enumerate(cfg.at):
        if f.node not in nodes:
            return f"faults.at[{k}].node", (f"no node {f.node!r}; the cluster has "
                                            f"{', '.join(nodes)}")  # fmt: skip
        if f.gpu is not None and f.gpu >= nodes[f.node]:
            return f"faults.at[{k}].gpu", f"node {f.node} has {nodes[f.node]} accelerators"
    if cfg.sampled() and cfg.horizon_s is None and until_s is None:
        return "faults.horizon_s", (
            "required when faults are sampled (fail_stop kind llama3 "
            "by default) and until_s is null"
        )
    return None


def _accelerator_entries(cluster_cfg: Any) -> list[Any]:
    from hetsim.simulator import registry

    out = []
    for e in cluster_cfg.topology().devices():
        known = e.type_name in registry.device_types
        if known and registry.device_types.get(e.type_name).kind in ACCELERATORS:
            out.append(e)
    return out


@dataclass(frozen=True)
class PlannedFault:
    """A fault to strike: when, which devices, why, for how long."""

    number: int
    at_s: float
    node: str
    devices: tuple[str, ...]
    cause: str
    repair_s: float


def plan(
    cfg: FaultsConfig, cluster: Any, rng: Any, horizon_s: float | None, base: Path
) -> list[PlannedFault]:
    """The run's faults, in time order: the listed ones and those sampled over
    ``[0, horizon_s)`` (``sample_fail_stop`` over the cluster's accelerators)."""
    accel = cluster.device_names(ACCELERATORS)
    on_node: dict[str, list[str]] = {}
    for d in accel:
        on_node.setdefault(cluster.device(d).node, []).append(d)
    raw: list[tuple[float, int, str, tuple[str, ...], str, float]] = []
    for k, f in enumerate(cfg.at):
        devs = on_node[f.node] if f.gpu is None else [on_node[f.node][f.gpu]]
        raw.append((f.at_s, k, f.node, tuple(devs), "listed",
                    f.repair_s if f.repair_s is not None else cfg.repair_s))  # fmt: skip
    if cfg.sampled() and accel:
        span = cfg.horizon_s if cfg.horizon_s is not None else horizon_s
        assert span is not None  # check_faults refused it
        for s in sample_fail_stop(cfg.fail_stop, len(accel), float(span), rng, base):
            if s.cause == "software" and not cfg.include_software:
                continue  # thinning a Poisson process by cause: still Poisson
            d = accel[s.rank]
            node = cluster.device(d).node
            devs = on_node[node] if cfg.scope == "node" else [d]
            raw.append((s.start_s, len(cfg.at) + s.fault_id, node, tuple(devs), s.kind,
                        cfg.repair_s))  # fmt: skip
    raw.sort(key=lambda r: (r[0], r[1]))
    return [PlannedFault(n, t, node, devs, cause, rep)
            for n, (t, _, node, devs, cause, rep) in enumerate(raw)]  # fmt: skip


class WithoutRepair:
    """A ledger's ownership intervals less the repair ones: a device under repair is
    owned by no workload (the energy split charges its idle floor to nobody)."""

    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger

    def all_intervals(self, end_s: float) -> list[tuple[str, str, float, float]]:
        """Every ownership interval but the repairs, open ones cut at ``end_s``."""
        return [iv for iv in self._ledger.all_intervals(end_s) if iv[1] != REPAIR]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)


class FaultInjector:
    """Strikes the planned faults, hands each failed device to repair and back
    (module doc)."""

    def __init__(
        self, sim: Any, cfg: FaultsConfig, cluster: Any, ledger: Any, members: dict[str, Any],
        kinds: dict[str, str], arb: Any, horizon_s: float | None, base: Path,
    ) -> None:  # fmt: skip
        from hetsim.workloads.serving.failover import Failover

        self.sim, self.cfg, self.cluster, self.ledger = sim, cfg, cluster, ledger
        self.members, self.kinds, self.arb = members, kinds, arb
        self.failover = {n: Failover(members[n]) for n, k in kinds.items() if k == "serving"}
        self.planned = plan(cfg, cluster, sim.rng("colocate.faults"), horizon_s, base)
        self.rows = sim.recorder.table("faults", FAULT_COLUMNS)
        self.down: dict[str, tuple[float, str]] = {}  # device -> (since, home workload)
        self.until: dict[str, float] = {}  # device -> end of its repair
        self.repairs: list[tuple[str, str, float, float]] = []  # device, home, start, end
        self.struck = 0
        self.device_failures = 0
        self.moves = 0  # ledger releases to and from repair (not ownership changes)

    def start(self) -> None:
        """Schedule every planned fault."""
        env = self.sim.env
        for f in self.planned:
            env.timeout(f.at_s).callbacks.append(lambda _e, f=f: self._strike(f))

    # ---- a fault ---------------------------------------------------------------------
    def _strike(self, f: PlannedFault) -> None:
        now = self.sim.now
        self.struck += 1
        devs = [d for d in f.devices if d not in self.down]
        if not devs:
            self._row(f, "", "already under repair", 0, 0, 0.0)
            return
        by_owner: dict[str, list[str]] = {}
        for d in devs:
            owners = self.ledger.owners(d)
            if len(owners) != 1:
                raise InvariantViolation(f"faults: {d} has owners {owners}")
            by_owner.setdefault(owners[0], []).append(d)
        for owner, ds in by_owner.items():
            home = {d: owner for d in ds}
            if self.kinds[owner] == "serving":
                lost = self.failover[owner].fail(ds)
                what = "; ".join(f"instance {i} ({n} requests retried)" for i, n in lost)
                self._row(f, owner, what or "idle", sum(n for _, n in lost), 0, 0.0, ds)
            else:
                w = self.members[owner]
                lent = [d for d in ds if self.arb.lent.get(d) == owner]
                hits = w.fail(ds)
                for d in lent:  # the loan ends: back to serving once repaired
                    self.arb.lent.pop(d)
                    self.arb.returning.discard(d)
                    w.cluster.drop(d)
                    home[d] = self.arb.serving
                what = "; ".join(f"job {j} ({state}): {s} steps since checkpoint"
                                 for j, s, _, state in hits)  # fmt: skip
                self._row(f, owner, what or "idle", 0, sum(h[1] for h in hits),
                          sum(h[2] for h in hits), ds)  # fmt: skip
            for d in ds:
                self.ledger.move(d, owner, REPAIR)
                self.moves += 1
                self.down[d] = (now, home[d])
                self.until[d] = now + f.repair_s
                self.device_failures += 1
                self.sim.env.timeout(f.repair_s).callbacks.append(lambda _e, d=d: self._repaired(d))

    def _repaired(self, d: str) -> None:
        since, home = self.down.pop(d)
        del self.until[d]
        self.ledger.move(d, REPAIR, home)
        self.moves += 1
        self.repairs.append((d, home, since, float(self.sim.now)))
        if self.kinds[home] == "serving":
            self.failover[home].restore(d)
        else:
            self.members[home].grant([d])

    def _row(self, f: PlannedFault, owner: str, what: str, retried: int, steps: int,
             gpu_s: float, devs: list[str] | None = None) -> None:  # fmt: skip
        ends = [self.until[d] for d in (devs or f.devices) if d in self.until]
        end = self.sim.now + f.repair_s if devs else max(ends, default=self.sim.now)
        self.rows.append(self.sim.now, f.number, f.cause, f.node, "+".join(devs or f.devices),
                         owner, what, retried, steps, gpu_s, end)  # fmt: skip

    # ---- results ---------------------------------------------------------------------
    def check(self) -> None:
        """No device under repair is free, in an instance or granted to a workload."""
        for d in self.down:
            for name, w in self.members.items():
                if self.kinds[name] == "serving":
                    free = any(d in ds for nodes in w._free.values() for ds in nodes.values())
                    live = any(d in w.placement[i.number] for i in w.instances
                               if i.released_s is None)  # fmt: skip
                    if free or live:
                        raise InvariantViolation(
                            f"faults: {d} under repair is in {name}'s "
                            f"{'free pool' if free else 'instances'}"
                        )
                elif d in w.granted:
                    raise InvariantViolation(f"faults: {d} under repair is granted to {name}")

    def stall_reason(self) -> str | None:
        """Why the run stalled, if faults did it: a serving workload lost every instance
        and has no autoscaler to bring one up (its requests would wait forever)."""
        for name in self.failover:
            w = self.members[name]
            if w.parked and w.autoscaler.policy.period_s is None:
                return (f"{name} lost every instance and its scaling policy brings up no "
                        f"replacement ({len(w.parked)} requests wait): give "
                        f"workloads.{name}.policies.scaling a policy, or set until_s")  # fmt: skip
        return None

    def repair_spans(self, end_s: float) -> list[tuple[str, str, float, float]]:
        """(device, home, start, end) of every repair, open ones cut at ``end_s``."""
        return self.repairs + [(d, h, s, end_s) for d, (s, h) in self.down.items()]

    def report(self, rows: list[dict[str, Any]], crow: dict[str, Any], end_s: float
               ) -> dict[str, str]:  # fmt: skip
        """Add the fault columns to the workload rows and the cluster row ``crow``;
        returns their definitions."""
        spans = self.repair_spans(end_s)
        by_home: dict[str, float] = {}
        for _, h, a, b in spans:
            by_home[h] = by_home.get(h, 0.0) + max(0.0, min(b, end_s) - a)
        metrics: dict[str, str] = {}
        for row in rows:
            name = row["workload"]
            w = self.members.get(name)
            if w is None:
                continue
            if self.kinds[name] == "serving":
                fo = self.failover[name]
                row.update({
                    "fault_instances_lost": len(fo.lost),
                    "fault_requests_retried": fo.retried,
                    "fault_recompute_tokens": fo.recompute_tokens,
                    "fault_requests_waiting": len(w.parked),
                    "fault_replica_s_lost": fo.replica_s_lost(end_s),
                })  # fmt: skip
                metrics.update(SERVING_METRICS)
            else:
                row.update({
                    "job_failures": w.failures,
                    "fault_steps_lost": w.fault_steps_lost,
                    "fault_tokens_lost": w.fault_steps_lost * w.tokens_per_step,
                    "fault_gpu_s_lost": w.fault_gpu_s_lost,
                    "checkpoints_saved": w.checkpoints_saved,
                })  # fmt: skip
                metrics.update(TRAINING_METRICS)
            row["fault_gpu_s_repair"] = by_home.get(name, 0.0)
        crow["ownership_changes"] -= self.moves
        crow["faults"] = self.struck
        crow["faulted_gpus"] = self.device_failures
        crow["repair_gpu_hours"] = sum(max(0.0, min(b, end_s) - a) for *_, a, b in spans) / 3600
        metrics.update(CLUSTER_METRICS)
        return metrics
