"""Several workloads on one cluster: the ``workloads:`` form of a scenario.

``workloads:`` maps a name to a workload block of any kind, each with its own
``policies:`` and ``devices:`` (fnmatch patterns over device names, e.g.
``h100*/gpu*``; omitted: the accelerators no other workload names). Every workload is
built on one :class:`~devices.cluster.Cluster` in one SimPy environment, through a
:class:`~workloads.colocate.cluster_view.ClusterView` (its own accelerators; the links
and memory pools are shared). ``policies.arbiter`` (decision point
``colocate.arbiter``, ``schedulers/arbiter/``) may move GPUs between a serving workload
and ``training-jobs`` workloads over time (:mod:`workloads.colocate.arbitration`).
The run ends when every workload is done (or at ``until_s``); the summary has one row
per workload (column ``workload``) and a ``cluster`` row (:mod:`workloads.colocate.report`).
"""

from __future__ import annotations

import copy
import fnmatch
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hetsim.simulator import registry
from hetsim.simulator.errors import FieldError, ScenarioError, TraceError, from_validation

ACCELERATORS = ("gpu", "npu")
ARBITER_POINT = "colocate.arbiter"


class SharingConfig(BaseModel):
    """How a GPU that two or more workloads name in ``devices:`` is shared
    (workloads.colocate.sharing). ``exclusive``: never (such a device is an error; at
    most one owner at any time, checked at run end). ``partition`` (MIG/MPS-style):
    each owner gets ``fractions[name]`` of the compute and memory (default an equal
    split). ``time-sliced``: turns of ``slice_s`` on the whole GPU, each switch costing
    ``context_switch_s``; memory is limited per owner by the same fractions (as an
    operator caps each process: vLLM's gpu_memory_utilization, PyTorch's per-process
    memory fraction), not isolated by hardware.

    * ``slice_s`` 2 ms: NVIDIA's short compute time slice (``nvidia-smi compute-policy
      --set-timeslice``; Red Hat AI services, "GPU Timeslicing", etx-serving-at-scale
      module 2);
    * ``context_switch_s`` 40 us: a labelled reconstruction, the time to save and
      restore the on-chip state of an H100 (132 SMs x (256 KiB registers + 228 KiB
      shared memory) = 62 MiB, each way at 3.35 TB/s HBM); swept in
      ``scenarios/colocate-robustness.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: Literal["exclusive", "time-sliced", "partition"] = Field(
        default="exclusive", description="sharing model of a GPU several workloads hold"
    )
    fractions: dict[str, float] = Field(
        default_factory=dict,
        description="workload name -> its fraction of a shared GPU (0-1]: compute and "
        "memory under partition, memory under time-sliced; the owners not named split the "
        "rest equally",
    )
    slice_s: float = Field(default=0.002, gt=0.0, description="time-sliced: slice length (s)")
    context_switch_s: float = Field(
        default=40e-6, ge=0.0, description="time-sliced: cost of one context switch (s)"
    )

    @model_validator(mode="after")
    def _check(self) -> SharingConfig:
        if self.context_switch_s >= self.slice_s:
            raise ValueError("context_switch_s must be shorter than slice_s")
        bad = {k: v for k, v in self.fractions.items() if not 0.0 < v <= 1.0}
        if bad:
            raise ValueError(f"fractions must be in (0, 1]: {bad}")
        return self


@dataclass(frozen=True)
class Member:
    """One workload of a multi-workload scenario, validated."""

    name: str
    cls: Any
    params: Any
    policies: dict[str, Any]
    devices: tuple[str, ...]
    patterns: tuple[str, ...] | None


@dataclass(frozen=True)
class Colocation:
    """The validated ``workloads:``, ``sharing:`` and ``policies.arbiter``."""

    members: tuple[Member, ...]
    arbiter: Any
    sharing: SharingConfig
    #: device -> the workloads naming it (only devices with two or more)
    shared: dict[str, tuple[str, ...]]

    @property
    def kind(self) -> str:
        """The members' kinds, ``+``-joined (what ``hetsim validate`` prints)."""
        return "+".join(m.params.kind for m in self.members)


class ColocatedWorkloads:
    """Stands where a single-form scenario has its workload class (``workload_cls``): the
    flattened metric names (``<workload>.<metric>``) a sweep and the CLI read, and the
    summed work estimate the budget check reads; its ``workload`` is the
    :class:`Colocation`. Built per scenario by :func:`_stand_in`."""

    metrics: ClassVar[dict[str, str]] = {}

    @classmethod
    def estimate_work(cls, col: Colocation) -> Any:
        """The members' estimates summed (None when no member has one)."""
        from hetsim.simulator.budget import WorkEstimate

        parts = [m.cls.estimate_work(m.params) for m in col.members]
        parts = [e for e in parts if e is not None]
        if not parts:
            return None
        mem = sum(e.memory_bytes or 0 for e in parts) or None
        return WorkEstimate(sum(e.events for e in parts), mem, "; ".join(e.basis for e in parts))


def _stand_in(members: list[Member]) -> type[ColocatedWorkloads]:
    from hetsim.workloads.colocate.report import CLUSTER_METRICS

    metrics = {f"{m.name}.{k}": v for m in members for k, v in m.cls.metrics.items()}
    metrics.update({f"cluster.{k}": v for k, v in CLUSTER_METRICS.items()})
    return type("ColocatedWorkloads", (ColocatedWorkloads,), {"metrics": metrics})


def colocated_scenario(file: str, base: Path, raw: dict[str, Any], top: Any, cluster: Any) -> Any:
    """The :class:`~simulator.scenario.Scenario` of a ``workloads:`` scenario."""
    from hetsim.simulator.scenario import (
        Scenario,
        _validate_policies,
        _validate_sweep,
        _validate_workload,
    )

    if top.workload is not None:
        raise ScenarioError(file, "workloads", "give workload: or workloads:, not both")
    if not top.workloads:
        raise ScenarioError(file, "workload", "required field is missing")
    try:
        sharing = SharingConfig.model_validate(top.sharing)
    except ValidationError as e:
        raise from_validation(file, "sharing", e, top.sharing) from None
    accels = _accelerators(cluster)
    members: list[list[Any]] = []
    claimed: dict[str, list[str]] = {}
    for name, block in top.workloads.items():
        where = f"workloads.{name}"
        if not isinstance(block, dict):
            raise ScenarioError(file, where, "must be a workload block (a mapping with kind:)")
        body = {k: v for k, v in block.items() if k not in ("policies", "devices")}
        cls, params = _validate_workload(file, body, base, where)
        pols = block.get("policies") or {}
        if not isinstance(pols, dict):
            raise ScenarioError(file, f"{where}.policies", "must be a mapping")
        choices = _validate_policies(file, cls, pols, f"{where}.policies")
        patterns = block.get("devices")
        if patterns is not None:
            if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
                raise ScenarioError(file, f"{where}.devices", "must be a list of device names "
                                    "or patterns")  # fmt: skip
            devs = [d for d in accels if any(fnmatch.fnmatchcase(d, p) for p in patterns)]
            if not devs:
                raise ScenarioError(file, f"{where}.devices", f"matches no accelerator; the "
                                    f"cluster has {', '.join(accels)}")  # fmt: skip
            for d in devs:
                if d in claimed and sharing.model == "exclusive":
                    raise ScenarioError(file, f"{where}.devices", f"{d} is also assigned to "
                                        f"{claimed[d][0]} (sharing: exclusive)")  # fmt: skip
                claimed.setdefault(d, []).append(name)
            patterns = tuple(patterns)
        members.append([name, cls, params, choices, tuple(devs) if patterns else (), patterns])
    rest = tuple(d for d in accels if d not in claimed)
    unnamed = [m for m in members if m[5] is None]
    if len(unnamed) > 1:
        raise ScenarioError(file, f"workloads.{unnamed[1][0]}.devices",
                            "required when another workload also omits it")  # fmt: skip
    for m in unnamed:
        m[4] = rest
    extra = sorted(set(top.policies) - {"arbiter"})
    if extra:
        raise ScenarioError(file, f"policies.{extra[0]}", "with workloads:, the top-level "
                            "policies: holds only arbiter (each workload has its own)")  # fmt: skip
    shared = {d: tuple(o) for d, o in claimed.items() if len(o) > 1}
    _check_sharing(file, sharing, shared, {m[0]: m[2].kind for m in members})
    arbiter = _arbiter_choice(file, top.policies.get("arbiter", "static"))
    _validate_sweep(file, top.sweep)
    col = Colocation(tuple(Member(*m) for m in members), arbiter, sharing, shared)
    return Scenario(
        file=file, base_dir=base, raw=copy.deepcopy(raw), name=top.name, seed=top.seed,
        until_s=top.until_s, cluster=cluster, workload_cls=_stand_in(list(col.members)),
        workload=col, policies={},
        outputs=top.outputs, sweep=top.sweep, plugins=tuple(top.plugins),
        catalogue=tuple(top.catalogue), colocation=col,
    )  # fmt: skip


def _check_sharing(
    file: str, sharing: SharingConfig, shared: dict[str, tuple[str, ...]], kinds: dict[str, str]
) -> None:
    from hetsim.workloads.colocate.sharing import SHARE_AWARE

    for name in sharing.fractions:
        if name not in kinds:
            raise ScenarioError(file, f"sharing.fractions.{name}", "not a workload; valid: "
                                + ", ".join(kinds))  # fmt: skip
    for d, owners in shared.items():
        for o in owners:
            if kinds[o] not in SHARE_AWARE:
                raise ScenarioError(file, f"workloads.{o}.devices", f"{d} is shared, and a "
                                    f"{kinds[o]} workload cannot price a shared GPU "
                                    f"(only {', '.join(SHARE_AWARE)})")  # fmt: skip
        if sharing.model != "exclusive":
            given = sum(sharing.fractions.get(o, 0.0) for o in owners)
            rest = [o for o in owners if o not in sharing.fractions]
            if given > 1.0 + 1e-9 or (rest and given >= 1.0):
                raise ScenarioError(file, "sharing.fractions", f"the fractions of {d}'s "
                                    f"owners ({', '.join(owners)}) exceed 1")  # fmt: skip


def _accelerators(cluster: Any) -> list[str]:
    out = []
    for entry in cluster.topology().devices():
        known = entry.type_name in registry.device_types
        if known and registry.device_types.get(entry.type_name).kind in ACCELERATORS:
            out.append(entry.name)
    return out


def _arbiter_choice(file: str, spec: Any) -> Any:
    from hetsim.simulator.scenario import PolicyChoice

    where = "policies.arbiter"
    if isinstance(spec, str):
        name, params = spec, {}
    elif isinstance(spec, dict) and isinstance(spec.get("name"), str):
        params = {k: v for k, v in spec.items() if k not in ("name", "label")}
        name = spec["name"]
    else:
        raise ScenarioError(file, where, "must be a policy name or {name: ..., <params>}")
    try:
        cls = registry.policies.get(ARBITER_POINT, name)
    except registry.UnknownName as e:
        raise ScenarioError(file, where, str(e)) from None
    try:
        validated = cls.Params.model_validate(params)
    except ValidationError as e:
        raise from_validation(file, where, e, params) from None
    return PolicyChoice("arbiter", name, cls, validated)


def resolved_colocation(col: Colocation) -> dict[str, Any]:
    """The ``workloads:``, ``sharing:`` and ``policies:`` blocks with defaults filled."""
    wl = {}
    for m in col.members:
        wl[m.name] = {
            **m.params.model_dump(mode="json"),
            "devices": list(m.devices),
            "policies": {p: {"name": c.name, **c.params.model_dump(mode="json")}
                         for p, c in sorted(m.policies.items())},
        }  # fmt: skip
    a = col.arbiter
    arbiter = {"name": a.name, **a.params.model_dump(mode="json")}
    return {"workloads": wl, "sharing": col.sharing.model_dump(mode="json"),
            "policies": {"arbiter": arbiter}}  # fmt: skip


@dataclass
class Built:
    """A multi-workload scenario built in a simulation, ready to start."""

    cluster: Any
    members: dict[str, Any]
    kinds: dict[str, str]
    ledger: Any
    arbitration: Any


def build_colocated(sc: Any, sim: Any) -> Built:
    """Build the cluster, every workload (each through its cluster view, with its own
    policies) and the arbitration of ``sc`` inside ``sim``."""
    from hetsim.devices.cluster import Cluster
    from hetsim.simulator.boundary import csv_field_limit
    from hetsim.simulator.runner import BAD_INPUT_ERRORS, _one_line, run_nested
    from hetsim.workloads.colocate.arbitration import Arbitration
    from hetsim.workloads.colocate.cluster_view import ClusterView
    from hetsim.workloads.colocate.ledger import Ledger
    from hetsim.workloads.colocate.sharing import PoolShare, fraction, share_serving, slowdowns
    from hetsim.workloads.colocate.sim_view import SimulationView

    col: Colocation = sc.colocation
    sim.run_nested = run_nested
    try:
        cluster = Cluster(sim, sc.cluster)
    except (KeyError, ValueError) as e:
        raise ScenarioError(sc.file, "cluster", str(e).strip("'\"")) from None
    ledger = Ledger(sim, shared=set(col.shared))
    factors = slowdowns(col)
    kind_count: dict[str, int] = {}
    for m in col.members:
        kind_count[m.params.kind] = kind_count.get(m.params.kind, 0) + 1

    def wsim(m: Member) -> Any:  # own streams and tables only beside one of its kind
        return SimulationView(sim, m.name) if kind_count[m.params.kind] > 1 else sim

    members: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    for m in col.members:
        where = f"workloads.{m.name}"
        pols = {p: c.cls(c.params, rng=sim.rng(f"{m.name}.policy.{p}"))
                for p, c in m.policies.items()}  # fmt: skip
        for d in m.devices:
            ledger.assign(d, m.name)
        pools = {}
        for d, owners in col.shared.items():
            if m.name in owners:
                pools[d] = PoolShare(cluster.memory(d), m.name, fraction(col, m.name, owners))
        view = ClusterView(cluster, m.devices, pools)
        try:
            with csv_field_limit():
                members[m.name] = m.cls(wsim(m), view, m.params, pols, sc.base_dir)
        except TraceError:
            raise
        except FieldError as e:
            raise ScenarioError(sc.file, f"{where}.{e.field}", e.message) from None
        except BAD_INPUT_ERRORS as e:
            raise ScenarioError(sc.file, where, _one_line(e)) from None
        kinds[m.name] = m.params.kind
        if kinds[m.name] == "serving":
            share_serving(members[m.name], factors[m.name])
        elif kinds[m.name] == "training-jobs":
            members[m.name].slowdown = factors[m.name]
    arbiter = col.arbiter.cls(col.arbiter.params, rng=sim.rng("policy.arbiter"))
    arb = Arbitration(sim, ledger, members, kinds, arbiter)
    return Built(cluster, members, kinds, ledger, arb)


def simulate_colocated(sc: Any, *, progress: bool = False, warn: bool = False) -> Any:
    """Run a ``workloads:`` scenario (see the module doc); returns a Result whose
    ``rows`` are the per-workload and cluster rows and whose ``summary_row`` is the same
    figures flattened as ``<workload>.<metric>`` (one row for sweeps)."""
    import warnings

    from hetsim.simulator.engine import ClockLimit, InvariantViolation, Simulation
    from hetsim.simulator.result import Result
    from hetsim.simulator.runner import RunWarning, _absent_if_not_finite
    from hetsim.workloads.colocate.report import cluster_row, member_row

    t0 = time.perf_counter()
    col: Colocation = sc.colocation
    sim = Simulation(sc.seed, record_spans=sc.outputs.spans)
    built = build_colocated(sc, sim)
    members, kinds, ledger, arb = built.members, built.kinds, built.ledger, built.arbitration
    cluster = built.cluster
    done = sim.env.all_of([w.done for w in members.values()])
    stop: Any = done
    try:
        for w in members.values():
            w.start()
        arb.start()
        if sc.until_s is not None:
            stop = sim.env.any_of([done, sim.env.timeout(sc.until_s)])
        sim.run(until=stop)
    except ClockLimit as e:
        raise ScenarioError(sc.file, "", f"run stopped: {e}") from None
    except RuntimeError as e:
        if stop.triggered or isinstance(e, InvariantViolation):
            raise
        raise InvariantViolation(f"the workloads stalled at t={sim.now:.6g} s: {e}") from None
    end_s = sim.now
    for w in members.values():
        if w.done.triggered:
            w.check()
        else:
            w.check_partial()
    sim.check_invariants()
    used: dict[str, list[tuple[str, float, float]]] = {}
    for name, w in members.items():
        if kinds[name] == "serving":
            used[name] = arb.serving_spans(name, end_s)
        elif hasattr(w, "busy_spans"):
            used[name] = w.busy_spans(end_s)
    ledger.check(end_s, used)
    owner_table = sim.recorder.table("device_owners", ("device", "owner", "start_s", "end_s"))
    for interval in sorted(ledger.all_intervals(end_s)):
        owner_table.append(*interval)
    rows: list[dict[str, Any]] = []
    metrics: dict[str, str] = {}
    notes: list[str] = []
    for m in col.members:
        w = members[m.name]
        row, more, texts = member_row(sc, m.name, w, end_s)
        _absent_if_not_finite(row, w.done.triggered)
        rows.append(row)
        metrics.update(more)
        notes += [f"{m.name}: {t}" for t in texts]
    crow, cmetrics = cluster_row(sc, cluster, ledger, used, end_s, arb)
    rows.append(crow)
    metrics.update(cmetrics)
    flat: dict[str, Any] = {"scenario": sc.name, "seed": sc.seed}
    for row in rows:
        for k, v in row.items():
            if k not in ("scenario", "seed", "workload", "kind"):
                flat[f"{row['workload']}.{k}"] = v
    if warn:
        for text in notes:
            warnings.warn(f"{sc.name}: {text}", RunWarning, stacklevel=4)
    return Result(
        scenario=sc.resolved(), summary_row=flat, recorder=sim.recorder, metrics=metrics,
        wall_s=time.perf_counter() - t0, warnings=notes, rows=rows,
    )  # fmt: skip
