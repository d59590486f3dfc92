"""Run a scenario: build the cluster, policies and workload, simulate, summarise."""

from __future__ import annotations

import csv
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from hetsim.simulator.boundary import csv_field_limit
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
        from hetsim.simulator.colocate import build_colocated

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
        from hetsim.simulator.colocate import simulate_colocated

        return simulate_colocated(sc, progress=progress, warn=warn)
    t0 = time.perf_counter()
    sim = Simulation(sc.seed, record_spans=sc.outputs.spans)
    workload = build(sc, sim)
    bar = _progress(sim, workload.horizon_s()) if progress else None
    stop = workload.done
    try:
        workload.start()
        if sc.until_s is not None:
            stop = sim.env.any_of([workload.done, sim.env.timeout(sc.until_s)])
        sim.run(until=stop)
    except ClockLimit as e:
        raise ScenarioError(sc.file, "", f"run stopped: {e}") from None
    except RuntimeError as e:
        if stop.triggered or isinstance(e, InvariantViolation):
            raise
        raise InvariantViolation(f"the workload stalled at t={sim.now:.6g} s: {e}") from None
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
