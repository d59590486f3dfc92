"""Run a scenario: build the cluster, policies and workload, simulate, summarise."""

from __future__ import annotations

import csv
import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hetsim.simulator.boundary import csv_field_limit
from hetsim.simulator.colocate import Colocation, Member
from hetsim.simulator.engine import ClockLimit, InvariantViolation, Simulation
from hetsim.simulator.errors import FieldError, ScenarioError, TraceError
from hetsim.simulator.overload import METRICS as OVERLOAD_METRICS
from hetsim.simulator.overload import load_check
from hetsim.simulator.result import Result
from hetsim.simulator.scenario import Scenario, from_dict, load_scenario
from hetsim.simulator.time_check import check_times

PROGRESS_TICKS = 200


class RunWarning(UserWarning):
    """A run's figures need care: it was overloaded, or its prices mix providers."""


def as_scenario(
    scenario: Scenario | str | Path,
    overrides: dict[str, Any] | None = None,
    seed: int | None = None,
) -> Scenario:
    """A validated scenario from a path or an existing scenario, with overrides applied."""
    over = dict(overrides or {})
    if seed is not None:
        over["seed"] = seed
    if isinstance(scenario, Scenario):
        return scenario.with_overrides(over) if over else scenario
    return load_scenario(scenario, over)


def run(
    scenario: Scenario | str | Path,
    *,
    seed: int | None = None,
    overrides: dict[str, Any] | None = None,
    progress: bool = False,
    **dunder_overrides: Any,
) -> Result:
    """Run one scenario and return its :class:`Result`.

    ``overrides`` maps dotted paths to values (``{"workload.num_requests": 100}``);
    keyword arguments do the same with ``__`` for dots (``workload__num_requests=100``).
    """
    over = dict(overrides or {})
    over.update({k.replace("__", "."): v for k, v in dunder_overrides.items()})
    sc = as_scenario(scenario, over, seed)
    return simulate(sc, progress=progress, warn=True)


def run_nested(raw: dict[str, Any], base_dir: Path) -> Result:
    """Run a scenario given as a dict (a sub-simulation; paths resolve in ``base_dir``)."""
    return simulate(from_dict(raw, "<sub-simulation>", base_dir))


def build(sc: Scenario, sim: Simulation) -> Any:
    """Construct cluster, policies and workload for ``sc`` inside ``sim``."""
    from hetsim.devices.cluster import Cluster

    if sc.colocation is not None:  # several workloads on one cluster
        return build_colocated(sc, sim)

    sim.run_nested = run_nested
    try:
        cluster = Cluster(sim, sc.cluster)
    except (KeyError, ValueError) as e:
        raise ScenarioError(sc.file, "cluster", str(e).strip("'\"")) from None
    try:
        cluster.load_grid(sc.base_dir)
    except TraceError:
        raise  # names the intensity file and line itself
    except ValueError as e:
        raise ScenarioError(sc.file, "cluster.carbon.grid_intensity_file", _one_line(e)) from None
    policies = {
        point: choice.cls(choice.params, rng=sim.rng(f"policy.{point}"))
        for point, choice in sc.policies.items()
    }
    try:
        with csv_field_limit():
            return sc.workload_cls(sim, cluster, sc.workload, policies, sc.base_dir)
    except TraceError:
        raise  # names the trace file, line and column itself
    except FieldError as e:
        raise ScenarioError(sc.file, e.field, e.message) from None
    except BAD_INPUT_ERRORS as e:
        raise ScenarioError(sc.file, "workload", _one_line(e)) from None


BAD_INPUT_ERRORS = (KeyError, ValueError, OSError, OverflowError, RecursionError, csv.Error,
                    ZeroDivisionError)  # fmt: skip
"""What building a workload from validated parameters raises on input no schema can
check (a trace's contents, a catalogue entry, sizes past what numpy represents)."""


def _one_line(e: BaseException) -> str:
    text = str(e).strip("'\"").strip()
    if isinstance(e, OverflowError | RecursionError | ZeroDivisionError | csv.Error):
        text = f"out of range ({type(e).__name__}: {text})"
    return text.splitlines()[0] if text else type(e).__name__


def simulate(sc: Scenario, *, progress: bool = False, warn: bool = False) -> Result:
    """Simulate a validated scenario; ``warn``: issue the run's warnings (overload,
    mixed price providers) as :class:`RunWarning` too (they are always in
    ``Result.warnings``)."""
    if sc.colocation is not None:  # several workloads on one cluster
        return simulate_colocated(sc, progress=progress, warn=warn)
    t0 = time.perf_counter()
    sim = Simulation(sc.seed, record_spans=sc.outputs.spans)
    workload = build(sc, sim)
    bar = _progress(sim, workload.horizon_s()) if progress else None
    run_to_end(sim, sc, workload.start, workload.done, "the workload")
    if bar is not None:
        bar.close()
    end_s = sim.now
    finished = workload.done.triggered
    if finished:
        workload.check()
    else:  # until_s ended the run: what is in flight must still add up
        workload.check_partial()
    sim.check_invariants()
    problem = workload.warmup_problem(end_s)
    if problem is not None:
        raise ScenarioError(sc.file, *problem)
    summary: dict[str, Any] = {"scenario": sc.name, "seed": sc.seed}
    summary.update(workload.summary(end_s))
    metrics = dict(type(workload).metrics)
    notes = list(workload.run_warnings(end_s))
    times = workload.request_times()
    check = load_check(*times) if times is not None else None
    if check is not None:
        summary.update(check.summary())
        metrics.update(OVERLOAD_METRICS)
        if check.overloaded:
            notes.insert(0, check.message())
    _absent_if_not_finite(summary, finished)
    check_times(sim.recorder, summary)  # no negative or infinite time recorded
    if warn:
        for text in notes:
            warnings.warn(f"{sc.name}: {text}", RunWarning, stacklevel=4)
    return Result(
        scenario=sc.resolved(),
        summary_row=summary,
        recorder=sim.recorder,
        metrics=metrics,
        wall_s=time.perf_counter() - t0,
        warnings=notes,
    )


def run_to_end(sim: Simulation, sc: Scenario, start: Any, done: Any, what: str) -> None:
    """Start the run (``start()``) and run ``sim`` until ``done`` fires or ``sc.until_s``;
    a clock limit is one error line, and an event queue that empties before ``done`` (a
    stalled run) is an invariant violation naming ``what``."""
    stop = done
    try:
        start()
        if sc.until_s is not None:
            stop = sim.env.any_of([done, sim.env.timeout(sc.until_s)])
        sim.run(until=stop)
    except ClockLimit as e:
        raise ScenarioError(sc.file, "", f"run stopped: {e}") from None
    except RuntimeError as e:
        if stop.triggered or isinstance(e, InvariantViolation):
            raise
        raise InvariantViolation(f"{what} stalled at t={sim.now:.6g} s: {e}") from None


ABSENT = "absent_metrics"
"""Summary column naming the metrics a run could not compute, with the reason."""


def _absent_if_not_finite(summary: dict[str, Any], finished: bool) -> None:
    """A metric that came out NaN or infinite is absent (None) with a reason in
    :data:`ABSENT`, never a NaN in the table of a run that exited 0."""
    reasons = []
    for key, value in summary.items():
        if isinstance(value, float | np.floating) and not math.isfinite(value):
            cause = "until_s ended the run before it had a value" if not finished else (
                "not defined for this run")  # fmt: skip
            reasons.append(f"{key}: not computable ({cause}; got {value})")
            summary[key] = None
    if reasons:
        summary[ABSENT] = "; ".join(reasons)


def _progress(sim: Simulation, horizon_s: float | None) -> Any:
    """A tqdm bar over simulated time, advanced by a ticking process (stderr only)."""
    if not horizon_s or horizon_s <= 0:
        return None
    from tqdm import tqdm

    bar = tqdm(total=round(horizon_s, 3), unit="sim-s", file=sys.stderr, leave=False)
    step = horizon_s / PROGRESS_TICKS

    def tick() -> Any:
        for _ in range(PROGRESS_TICKS):
            yield sim.env.timeout(step)
            bar.update(round(step, 6))

    sim.env.process(tick())
    return bar


# ---- the workloads: form (several workloads on one cluster; simulator/colocate.py) ----
@dataclass
class Built:
    """A multi-workload scenario built in a simulation, ready to start."""

    cluster: Any
    members: dict[str, Any]
    kinds: dict[str, str]
    ledger: Any
    arbitration: Any
    #: the cluster fault injector (workloads.colocate.faults); None without ``faults:``
    faults: Any = None


def build_colocated(sc: Any, sim: Any) -> Built:
    """Build the cluster, every workload (each through its cluster view, with its own
    policies) and the arbitration of ``sc`` inside ``sim``."""
    from hetsim.devices.cluster import Cluster
    from hetsim.simulator.boundary import csv_field_limit
    from hetsim.workloads.colocate.arbitration import Arbitration
    from hetsim.workloads.colocate.cluster_view import ClusterView
    from hetsim.workloads.colocate.deferral import SharedDeferral
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
    serving = next((n for n, k in kinds.items() if k == "serving"), "")
    harvest = {n: members[n] for n, k in kinds.items() if k == "training-jobs"}
    deferral = SharedDeferral(sim, col.sharing.model, col.shared, factors, serving, harvest)
    arb = Arbitration(sim, ledger, members, kinds, arbiter, deferral)
    faults = None
    if col.faults is not None:
        from hetsim.workloads.colocate.faults import FaultInjector

        try:
            faults = FaultInjector(sim, col.faults, cluster, ledger, members, kinds, arb,
                                   sc.until_s, sc.base_dir)  # fmt: skip
        except ValueError as e:
            raise ScenarioError(sc.file, "faults", _one_line(e)) from None
    return Built(cluster, members, kinds, ledger, arb, faults)


def simulate_colocated(sc: Any, *, progress: bool = False, warn: bool = False) -> Any:
    """Run a ``workloads:`` scenario (see the module doc); returns a Result whose
    ``rows`` are the per-workload and cluster rows and whose ``summary_row`` is the same
    figures flattened as ``<workload>.<metric>`` (one row for sweeps)."""
    import warnings

    from hetsim.simulator.engine import Simulation
    from hetsim.simulator.result import Result
    from hetsim.workloads.colocate.energy_split import ATTRIBUTED_METRICS, EnergySplit
    from hetsim.workloads.colocate.report import attribute_energy, cluster_row, member_row

    t0 = time.perf_counter()
    col: Colocation = sc.colocation
    sim = Simulation(sc.seed, record_spans=sc.outputs.spans)
    built = build_colocated(sc, sim)
    members, kinds, ledger, arb = built.members, built.kinds, built.ledger, built.arbitration
    cluster = built.cluster
    split = EnergySplit(cluster)
    done = sim.env.all_of([w.done for w in members.values()])

    def start() -> None:
        for w in members.values():
            w.start()
        arb.start()
        if built.faults is not None:
            built.faults.start()

    try:
        run_to_end(sim, sc, start, done, "the workloads")
    except InvariantViolation:
        why = built.faults.stall_reason() if built.faults is not None else None
        if why is None:
            raise
        raise ScenarioError(sc.file, "faults", why) from None
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
    if built.faults is not None:
        from hetsim.workloads.colocate.faults import REPAIR

        built.faults.check()
        used[REPAIR] = []  # under repair: owned by no workload, used by none
    ledger.check(end_s, used)
    owner_table = sim.recorder.table("device_owners", ("device", "owner", "start_s", "end_s"))
    for interval in sorted(ledger.all_intervals(end_s)):
        owner_table.append(*interval)
    rows: list[dict[str, Any]] = []
    metrics: dict[str, str] = {}
    notes: list[str] = []
    for m in col.members:
        w = members[m.name]
        split.summary_starts()
        row, more, texts = member_row(sc, m.name, w, end_s)
        split.summary_done(m.name)
        _absent_if_not_finite(row, w.done.triggered)
        rows.append(row)
        metrics.update(more)
        notes += [f"{m.name}: {t}" for t in texts]
    crow, cmetrics = cluster_row(sc, cluster, ledger, used, end_s, arb)
    if built.faults is None:
        attribute_energy(split, ledger, end_s, rows, crow, cluster)
    else:  # a device under repair is owned by nobody
        from hetsim.workloads.colocate.faults import WithoutRepair

        attribute_energy(split, WithoutRepair(ledger), end_s, rows, crow, cluster)
    rows.append(crow)
    metrics.update(cmetrics)
    metrics.update(ATTRIBUTED_METRICS)
    if built.faults is not None:
        metrics.update(built.faults.report(rows, crow, end_s))
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
