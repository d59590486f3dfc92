"""Invariants on every run (issue 22): conservation when ``until_s`` ends a run early, for
every workload kind; no negative or infinite recorded time; duration fields bounded in
every schema; up-front work estimates and per-point sweep budgets; figures registered
as hetsim's own files."""

from __future__ import annotations

import re
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from pydantic import BaseModel

import hetsim
from hetsim.simulator import registry
from hetsim.simulator.engine import InvariantViolation
from hetsim.simulator.scenario import Scenario, from_dict, load_scenario
from hetsim.workloads.base import Workload
from tests.cli_helpers import TINY
from tests.conftest import SCENARIOS

COLLECTIVE = """\
name: tiny-collective
seed: 1
cluster:
  nodes:
    - name: box
      devices:
        gpu: {type: h100-sxm, count: 4}
workload:
  kind: collective
  op: all_reduce
  nbytes: 67108864
  fabric: h100-nvswitch
  repetitions: 11
  gap_s: 0.001
"""

#: kind -> (scenario, overrides, until_s): each run is cut while work is in flight
CUT_RUNS: dict[str, tuple[str, dict[str, Any], float]] = {
    "queueing": ("mmc", {"workload.num_requests": 200, "workload.warmup_requests": 0}, 20.0),
    "serving": ("lud", {}, 1.0),
    "cluster": ("cuckoo", {}, 20_000.0),
    "elastic": ("kale", {}, 3600.0),
    "moe": ("hybrimoe", {}, 0.2),
    "observability": ("kair", {}, 30.0),
    "observability-faults": ("faults", {}, 86_400.0),
    "tee-collab": ("tensortee", {}, 0.2),
    "tee-nna": ("tee_nna", {}, 0.01),
    "tee-verify": ("tee_verify", {}, 1.0),
    "offload": ("flexgen", {}, 5.0),
    "training": ("chameleon", {}, 1.0),
    "training-pipeline": ("slimpipe", {}, 0.05),
    "training-parallel": ("megatron-gpt", {}, 0.05),
    "collective": ("", {}, 0.005),
    "training-jobs": ("", {}, 100.0),
}

TRAINING_JOBS = """\
name: jobs
cluster:
  nodes:
    - name: n
      devices:
        gpu: {type: h100-sxm, count: 4}
        cpu: {type: xeon-8480}
      links:
        - {type: pcie5-x16, between: [gpu, cpu]}
workload: {kind: training-jobs, num_jobs: 2, steps_per_job: 50, gpus_per_job: 4}
"""


def _scenario(kind: str) -> Scenario:
    name, over, until_s = CUT_RUNS[kind]
    over = {**over, "until_s": until_s, "outputs.spans": False}
    if kind == "collective":
        return from_dict(yaml.safe_load(COLLECTIVE)).with_overrides(over)
    if kind == "training-jobs":
        return from_dict(yaml.safe_load(TRAINING_JOBS)).with_overrides(over)
    return load_scenario(SCENARIOS / f"{name}.yaml", over)


@contextmanager
def _patched(cls: type[Workload], before: Callable[[Any], None] | None) -> Iterator[list[str]]:
    """Count calls of ``cls.check_partial`` (after ``before`` mutates the workload)."""
    calls: list[str] = []
    original = cls.check_partial

    def spy(self: Any) -> None:
        calls.append(type(self).__name__)
        if before is not None:
            before(self)
        original(self)

    cls.check_partial = spy  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        cls.check_partial = original  # type: ignore[method-assign]


def test_every_workload_kind_checks_partial_runs() -> None:
    """No kind relies on the base class's empty hook, and each has a cut run below."""
    kinds = {
        e.name: e.obj
        for e in registry.workloads
        if e.obj.__module__.startswith("hetsim.workloads.")
    }  # not a test's plugin
    assert set(kinds) == set(CUT_RUNS)
    for kind, cls in kinds.items():
        assert cls.check_partial is not Workload.check_partial, kind


@pytest.mark.parametrize("kind", sorted(CUT_RUNS))
def test_a_run_cut_by_until_s_passes_its_partial_check(kind: str) -> None:
    """Each kind's shipped (or tiny) scenario cut early: check_partial runs and passes."""
    sc = _scenario(kind)
    with _patched(sc.workload_cls, None) as calls:
        result = hetsim.run(sc)
    assert calls == [sc.workload_cls.__name__], "the run finished before until_s"
    assert result.summary_row["scenario"] == sc.name


def _drop_job(w: Any) -> None:
    w._next_arrival -= 1  # a job that arrived is no longer counted anywhere


def _training_row(w: Any) -> None:
    w.stats.append(None)  # an iteration counted without its row


def _pipeline_bytes(w: Any) -> None:
    w.pools[0].allocate("activations", 1)  # one byte held by no microbatch


def _parallel_row(w: Any) -> None:
    w.rows.append(0, "F", 0, 0, 0.0, 0.0)  # a unit recorded twice


#: kind -> (corruption of one counter, what the error says)
BROKEN: dict[str, tuple[Callable[[Any], None], str]] = {
    "serving": (lambda w: setattr(w, "_finished", w._finished + 1), "counted finished"),
    "cluster": (_drop_job, "cluster jobs: .* do not add up"),
    "elastic": (lambda w: setattr(w, "lag", w.lag + 1e6), "arrived .* != consumed"),
    "moe": (
        lambda w: setattr(w.counters, "computed_pairs", w.counters.computed_pairs + 1),
        "moe: .* activations",
    ),
    "observability": (lambda w: setattr(w, "iteration", w.iteration + 1), "iterations run"),
    "observability-faults": (
        lambda w: setattr(w.timeline, "work_s", w.timeline.run_s + 1.0),
        "of work kept",
    ),
    "tee-collab": (lambda w: setattr(w, "_steps_done", w._steps_done + 1), "tee-collab steps"),
    "tee-nna": (lambda w: setattr(w, "_done_steps", w._done_steps + 3), "tee-nna"),
    "tee-verify": (lambda w: setattr(w, "_done", w._done + 1), "tee-verify batches"),
    "offload": (lambda w: w.decode_steps.append(0.1), "decode steps recorded"),
    "collective": (lambda w: w.durations_s.append(1e6), "collective repetitions: step"),
    "training": (_training_row, "training: .* recorded"),
    "training-pipeline": (_pipeline_bytes, "stage 0 holds"),
    "training-parallel": (_parallel_row, "units recorded of"),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_counter_fails_the_partial_check(kind: str) -> None:
    """The same cut run with one counter corrupted: an InvariantViolation naming it."""
    corrupt, message = BROKEN[kind]
    sc = _scenario(kind)
    with _patched(sc.workload_cls, corrupt), pytest.raises(InvariantViolation, match=message):
        hetsim.run(sc)


# ---- no negative or infinite time ------------------------------------------------------
def _tiny() -> Scenario:
    return from_dict(yaml.safe_load(TINY))


def test_a_negative_recorded_time_names_table_row_and_column(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A table cell, a span and a summary metric each checked (a corrupted copy of a
    real run's tables: the check runs after every run)."""
    from hetsim.simulator import runner
    from hetsim.simulator.time_check import check_times

    seen: list[Any] = []

    def capture(recorder: Any, summary: Any) -> None:
        seen.append((recorder, dict(summary)))
        check_times(recorder, summary)

    monkeypatch.setattr(runner, "check_times", capture)
    hetsim.run(_tiny())
    recorder, summary = seen[0]
    table = recorder._tables["requests"]
    column = table.columns.index("end_s")
    width = len(table.columns)
    table._flat[3 * width + column] = -1.0
    with pytest.raises(InvariantViolation) as info:
        check_times(recorder, summary)
    assert str(info.value) == (
        "table 'requests', row 3, column 'end_s': -1.0 is not a finite time >= 0"
    )
    table._flat[3 * width + column] = float("inf")
    with pytest.raises(InvariantViolation, match=r"row 3, column 'end_s': inf is not"):
        check_times(recorder, summary)
    table._flat[3 * width + column] = float("nan")  # not reached: allowed
    check_times(recorder, summary)
    recorder.spans.start_s[0] = float("-inf")
    with pytest.raises(InvariantViolation, match=r"spans, row 0 \(track .*\), column start_s"):
        check_times(recorder, summary)
    recorder.spans.start_s[0] = 0.0
    with pytest.raises(InvariantViolation, match=r"summary, column 'mean_wait_s': -2\.0"):
        check_times(recorder, {**summary, "mean_wait_s": -2.0})


def test_time_check_runs_on_every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A workload that records a negative duration fails its run with exit code 3."""
    from hetsim.workloads.queueing.workload import QueueingWorkload

    original = QueueingWorkload.summary

    def summary(self: QueueingWorkload, end_s: float) -> dict[str, Any]:
        return {**original(self, end_s), "mean_wait_s": -1.0}

    monkeypatch.setattr(QueueingWorkload, "summary", summary)
    with pytest.raises(InvariantViolation, match=r"'mean_wait_s': -1\.0"):
        hetsim.run(_tiny())


# ---- bounded duration fields -----------------------------------------------------------
DURATION = re.compile(r"(?<!_per)(_s|_ms|_us|_h|_days)$|duration|time|delay")


def _schema_models() -> list[type[BaseModel]]:
    """Every pydantic model a scenario can reach: the top level, the cluster, each
    workload kind's parameters and each policy's, and every model nested in them."""
    from hetsim.devices.cluster import ClusterConfig
    from hetsim.simulator import discovery
    from hetsim.simulator.scenario import ScenarioModel

    discovery.load_everything()
    roots: list[Any] = [ScenarioModel, ClusterConfig]
    roots += [e.obj.Params for e in registry.workloads]
    for point in registry.policies.decision_points():
        roots += [getattr(e.obj, "Params", None) for e in registry.policies.point(point)]
    seen: list[type[BaseModel]] = []

    def walk(t: Any) -> None:
        if isinstance(t, type) and issubclass(t, BaseModel):
            if t not in seen:
                seen.append(t)
                for f in t.model_fields.values():
                    walk(f.annotation)
            return
        for arg in typing.get_args(t):
            walk(arg)

    for root in roots:
        walk(root)
    return seen


def _floats(t: Any) -> Iterator[list[Any]]:
    """The constraint lists of every float inside annotation ``t``."""
    if t is float:
        yield []
        return
    args = typing.get_args(t)
    if typing.get_origin(t) is typing.Annotated and args[0] is float:
        yield [m for a in args[1:] for m in (getattr(a, "metadata", None) or [a])]
        return
    for arg in args:
        yield from _floats(arg)


def test_every_duration_field_has_bounds() -> None:
    """Every float field named as a duration, delay or time, in every schema model, is
    finite-bounded: a lower bound (>= 0 or > 0) and an upper bound (simulator.limits)."""
    missing, checked = [], 0
    for model in _schema_models():
        for name, field in model.model_fields.items():
            if not DURATION.search(name):
                continue
            for constraints in _floats(field.annotation):
                checked += 1
                metas = [*field.metadata, *constraints]
                upper = any(getattr(m, k, None) is not None for m in metas for k in ("le", "lt"))
                lower = any(getattr(m, k, None) is not None for m in metas for k in ("ge", "gt"))
                if not (upper and lower):
                    missing.append(f"{model.__module__}.{model.__name__}.{name}")
    assert checked >= 80  # the walk reaches the workloads' and policies' models
    assert not missing, missing


# ---- up-front estimates and per-point budgets ----------------------------------------
def test_a_run_past_its_event_estimate_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """lud: 16 requests x 512 output tokens = 8,192 events, against --max-events 1000."""
    from hetsim.simulator.cli import main

    path = SCENARIOS / "lud.yaml"
    assert main(["run", str(path), "--max-events", "1000", "-q"]) == 2
    assert capsys.readouterr().err == (
        f"{path}: the run is estimated at 8.19e+03 events (16 requests x 512 mean output "
        "tokens), past the budget of 1e+03; raise it with --max-events N\n"
    )


def test_estimates_of_the_big_kinds() -> None:
    """Closed forms: cluster jobs x (2 + mean length / round), training-parallel ranks x
    microbatches, moe tokens x layers; no shipped scenario near the default budget."""
    import math

    from hetsim.simulator.budget import DEFAULT_MAX_EVENTS
    from hetsim.workloads.models.moe import moe_models

    cuckoo = load_scenario(SCENARIOS / "cuckoo.yaml")
    est = cuckoo.workload_cls.estimate_work(cuckoo.workload)
    jobs = cuckoo.workload.jobs
    mean_s = jobs.duration_median_s * math.exp(jobs.duration_sigma**2 / 2)
    assert est.events == pytest.approx(
        jobs.num_jobs * (2 + mean_s / cuckoo.workload.execution.round_s)
    )
    mg = load_scenario(SCENARIOS / "megatron-gpt.yaml")
    p = mg.workload
    est = mg.workload_cls.estimate_work(p)
    assert est.events == p.tp * p.cp * p.dp * p.pp * (p.global_batch // (p.dp * p.micro_batch))
    moe = load_scenario(SCENARIOS / "hybrimoe.yaml")
    q = moe.workload
    est = moe.workload_cls.estimate_work(q)
    tokens = q.warmup_tokens + q.prompt_tokens + q.output_tokens * q.batch
    layers = moe_models()[q.model].layers  # DeepSeek-V2-Lite: 27
    assert est.basis == f"{tokens} tokens x {layers} layers" and est.events == tokens * layers
    from tests.conftest import missing_shared_data

    for path in SCENARIOS.glob("*.yaml"):
        if missing_shared_data(path):
            continue  # replays a trace that is not shipped and not present here
        sc = load_scenario(path)
        got = sc.workload_cls.estimate_work(sc.workload)
        assert got is None or got.events < DEFAULT_MAX_EVENTS / 1000, path.name


def test_a_sweep_point_over_its_budget_fails_alone() -> None:
    """lud's sweep of 1..256 requests x 512 tokens under 20,000 events: the points of 64
    and 256 requests fail with the estimate in their error; the others run."""
    from hetsim.simulator.budget import Budgets

    sc = load_scenario(SCENARIOS / "lud.yaml", {"outputs.spans": False})
    table = hetsim.sweep(sc, budgets=Budgets(max_events=20_000))
    n = table["workload.requests.num_requests"]
    failed = table["error"].notna()
    assert (failed == (n * 512 > 20_000)).all() and failed.any() and (~failed).any()
    assert table.loc[failed, "error"].str.startswith("WorkTooLarge: the run is estimated").all()
    assert table.loc[~failed, "requests"].notna().all()


@pytest.mark.slow
def test_a_sweep_point_over_its_cpu_budget_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A point that spins past its CPU budget is stopped with its error recorded."""
    import time

    from hetsim.simulator import sweeps
    from hetsim.simulator.budget import Budgets

    original = sweeps.simulate

    def slow(sc: Scenario, **kw: Any) -> Any:
        if sc.workload.num_requests == 100:
            # spins until the budget stops it, however fast the machine (the wall-clock
            # guard only keeps a broken budget from hanging the suite)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 600.0:
                pass
            raise AssertionError("the CPU-time budget never fired")
        return original(sc, **kw)

    monkeypatch.setattr(sweeps, "simulate", slow)
    raw = yaml.safe_load(TINY)
    raw["sweep"] = {"workload.num_requests": [10, 100, 20]}
    table = hetsim.sweep(from_dict(raw), budgets=Budgets(cpu_s=2.0, max_events=None))
    errors = table.set_index("workload.num_requests")["error"]
    assert pd.isna(errors[10]) and pd.isna(errors[20])
    assert errors[100] == "BudgetExceeded: point 1 needs more than its 2 s CPU-time budget"


# ---- figures are hetsim's own files ----------------------------------------------------
@pytest.mark.slow
def test_figures_are_registered_and_replaced_by_a_later_run(tmp_path: Path) -> None:
    """run --plots and plot list their figures in the marker; a later run into the same
    folder removes them (they are hetsim's), and a figures folder elsewhere gets its own
    marker, refusing a folder of the user's files."""
    from hetsim.simulator.cli import main
    from hetsim.simulator.outdir import read_marker

    path = tmp_path / "s.yaml"
    path.write_text(TINY)
    out = tmp_path / "r"
    assert main(["run", str(path), "--out", str(out), "--plots", "-q"]) == 0
    marker = read_marker(out)
    assert marker is not None
    figures = sorted(f for f in marker["files"] if f.startswith("figures/"))
    assert figures and all((out / f).is_file() for f in figures)
    assert main(["run", str(path), "--out", str(out), "-q"]) == 0
    assert not any((out / f).exists() for f in figures)
    assert main(["plot", str(out), "--out", str(tmp_path / "p"), "-q"]) == 0
    plot_marker = read_marker(tmp_path / "p")
    assert plot_marker is not None and plot_marker["kind"] == "plot"
    assert sorted(plot_marker["files"]) == sorted(f.removeprefix("figures/") for f in figures)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert main(["plot", str(out), "--out", str(mine), "-q"]) == 2
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert main(["plot", str(out), "--out", str(mine), "--force", "-q"]) == 0
    assert (mine / "notes.txt").read_text() == "mine"  # beside the user's file, kept
    assert "notes.txt" not in (read_marker(mine) or {})["files"]
