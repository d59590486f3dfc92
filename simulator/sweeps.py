"""Sweeps: every point of a scenario's ``sweep:`` design, streamed to Parquet shards.

Each point is the scenario with dotted paths overridden (see
:mod:`simulator.sweep_design`). Its run key is a stable hash of the resolved scenario,
so a point never runs twice. Each finished run writes one row (inputs, summary metrics,
run key, seed, hetsim version, wall time, error and traceback if it failed) to its own
Parquet shard, atomically; the sweep's table is the union of the shards. The parent
keeps only keys and counters, so memory stays flat however long the sweep, and a sweep
killed at any moment resumes by running only the points without a shard.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from hetsim.simulator.atomic import atomic_write
from hetsim.simulator.budget import Budgets, budget, check_estimate
from hetsim.simulator.errors import ScenarioError
from hetsim.simulator.outdir import content_key, open_sweep_dir
from hetsim.simulator.plugins import load_plugins
from hetsim.simulator.runner import as_scenario, simulate
from hetsim.simulator.scenario import Scenario
from hetsim.simulator.sweep_design import design_size, parse_sweep, points

Executor = Literal["local", "dask"]
SHARDS = "shards"
PROVENANCE = ("run_key", "hetsim_version", "wall_s", "error", "traceback", "absent_metrics")
IN_FLIGHT_PER_WORKER = 4
READ_CHUNK = 256
READ_THREADS = 4
DEFAULT_MAX_POINTS = 10_000
"""Sweeps larger than this need ``--max-points`` (each point is validated up front)."""
DASK_BATCH = 256  # dask tasks submitted at once
MAX_DASK_CHUNK = 16  # sweep points per dask task

T = TypeVar("T")


def _batches(items: list[T], size: int) -> Iterable[list[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def run_key(sc: Scenario) -> str:
    """Stable 16-hex-digit hash of the resolved scenario (seed included)."""
    return content_key(sc.resolved())


def sweep_hash(sc: Scenario) -> str:
    """Stable hash of the resolved base scenario and its sweep design (what ``--resume``
    checks against the folder's marker)."""
    return content_key({"resolved": sc.resolved(), "sweep": sc.sweep})


@dataclass(frozen=True)
class Task:
    """One point to run: its design position, overrides and run key."""

    point: int
    overrides: dict[str, Any]
    key: str


@dataclass(frozen=True)
class Outcome:
    """What a worker reports back: no table data, just the key and status."""

    key: str
    failed: bool


def plan(sc: Scenario, max_points: int | None = DEFAULT_MAX_POINTS) -> list[Task]:
    """Validate every point of the design; one task per distinct run key.

    A design of more than ``max_points`` points is refused before any is built.
    """
    spec = parse_sweep(sc.sweep)
    if max_points is not None:
        n = design_size(spec)
        if n > max_points:
            raise ScenarioError(
                sc.file, "sweep", f"{n:.4g} points exceed the limit of {max_points}; "
                "raise it with --max-points N if you mean it",
            )  # fmt: skip
    reserved = set(sc.workload_cls.metrics) | set(PROVENANCE) | {"scenario", "point"}
    clash = sorted(set(spec.parameters) & reserved)
    if clash:
        raise ScenarioError(
            sc.file,
            f"sweep.{clash[0]}",
            "a swept path may not share its name with an output column",
        )
    base = sc.with_overrides({}, keep_sweep=False)
    tasks, seen = [], set()
    for i, over in enumerate(points(spec, sc.seed) or [{}]):
        key = run_key(base.with_overrides(over))
        if key not in seen:
            seen.add(key)
            tasks.append(Task(i, over, key))
    return tasks


def _cell(value: Any) -> Any:
    """A swept value as a table cell (dicts and lists become JSON text, keys sorted, so
    the cell reads back with ``json.loads``)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def portable_traceback() -> str:
    """The current exception's traceback with this install's folders replaced by
    ``<hetsim>`` and ``<python>``, so a sweep's rows do not depend on where hetsim or
    Python is installed (the same scenario gives the same table on any machine)."""
    text = traceback.format_exc()
    hetsim_root = str(Path(__file__).resolve().parents[1])
    roots = [(hetsim_root, "<hetsim>"), (str(Path(__file__).parents[1]), "<hetsim>")]
    roots += [(sys.prefix, "<python>"), (sys.base_prefix, "<python>")]
    for root, name in sorted(roots, key=lambda r: -len(r[0])):
        text = text.replace(root, name)
    return text


def run_task(sc: Scenario, task: Task, shard_dir: str, budgets: Budgets | None = None) -> Outcome:
    """Run one point and write its row to ``<shard_dir>/<key>.parquet`` atomically.

    ``budgets``: the point's own limits (estimate, memory, CPU time), as ``hetsim run``
    applies them to one run; a point past them fails alone, its error in its row."""
    from hetsim.simulator.version import __version__

    row: dict[str, Any] = {"point": task.point}
    row.update({path: _cell(v) for path, v in task.overrides.items()})
    t0 = time.perf_counter()
    error = tb = None
    b = budgets or Budgets(max_events=None)
    try:
        point = sc.with_overrides(task.overrides, keep_sweep=False)
        check_estimate(point, b.max_events, b.memory_bytes)
        with budget(b.memory_bytes, b.cpu_s, f"point {task.point}"):
            result = simulate(point)
        row.update(result.summary_row)
    except Exception as e:  # a failed run is a row, not the end of the sweep
        error, tb = f"{type(e).__name__}: {e}", portable_traceback()
    row.update(
        run_key=task.key,
        hetsim_version=__version__,
        wall_s=time.perf_counter() - t0,
        error=error,
        traceback=tb,
    )
    write_shard(Path(shard_dir), task.key, row)
    return Outcome(task.key, error is not None)


def run_chunk(
    sc: Scenario, tasks: list[Task], shard_dir: str, budgets: Budgets | None = None
) -> list[Outcome]:
    """:func:`run_task` for several points (one Dask task; amortises its overhead)."""
    return [run_task(sc, t, shard_dir, budgets) for t in tasks]


def write_shard(shard_dir: Path, key: str, row: dict[str, Any]) -> None:
    """One row as a Parquet file, written to a temporary name then renamed."""
    atomic_write(
        shard_dir / f"{key}.parquet", lambda tmp: pq.write_table(pa.Table.from_pylist([row]), tmp)
    )


def done_keys(shard_dir: Path, keys: set[str] | None = None) -> set[str]:
    """Run keys that already have a readable shard (of ``keys``, if given).

    A shard of ``keys`` whose Parquet footer cannot be read (a disk error, a copy cut
    short) is removed, so its point runs again.
    """
    done = set()
    for p in shard_dir.glob("*.parquet"):
        if p.name.startswith(".") or (keys is not None and p.stem not in keys):
            continue
        if keys is not None:
            try:
                pq.read_metadata(p)
            except (OSError, pa.ArrowException):
                p.unlink(missing_ok=True)
                continue
        done.add(p.stem)
    return done


def _read_shard(path: Path) -> pa.Table:
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException) as e:
        raise ScenarioError(
            str(path), "", f"unreadable shard ({e}); run the sweep with --resume to re-run it"
        ) from None


def read_shards(shard_dir: Path, keys: Iterable[str]) -> pd.DataFrame:
    """The union of the shards of ``keys``, one row each, in design order."""
    files = [shard_dir / f"{k}.parquet" for k in keys]
    if not files:
        return pd.DataFrame()
    parts = []
    with ThreadPoolExecutor(max_workers=READ_THREADS) as readers:  # Arrow reads drop the GIL
        for i in range(0, len(files), READ_CHUNK):  # bounded Arrow memory: chunks to pandas
            tables = list(readers.map(_read_shard, files[i : i + READ_CHUNK]))
            try:
                parts.append(pa.concat_tables(tables, promote_options="permissive").to_pandas())
            except (pa.ArrowTypeError, pa.ArrowInvalid):  # an axis mixing types (4, "auto")
                parts.append(pd.concat([t.to_pandas() for t in tables], ignore_index=True))
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    order = ["point", *[c for c in frame.columns if c != "point"]]
    return frame[order].sort_values("point", kind="stable").reset_index(drop=True)


def sweep(
    scenario: Scenario | str | Path,
    *,
    workers: int = 1,
    executor: Executor = "local",
    address: str | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    progress: bool = False,
    overrides: dict[str, Any] | None = None,
    force: bool = False,
    max_points: int | None = DEFAULT_MAX_POINTS,
    budgets: Budgets | None = None,
    warn: bool = True,
) -> pd.DataFrame:
    """Run every point not yet done; return the sweep's table (one row per point).

    ``out``: directory for the shards (a temporary one if None); it must be absent,
    empty or a hetsim sweep folder (see :func:`simulator.outdir.open_sweep_dir`). An
    ``out`` that holds shards needs ``resume=True``, which runs only the points without
    a readable shard, and only for the same scenario (``force``: any). A design of more
    than ``max_points`` points is refused (None: no limit). ``budgets``: each point's
    own limits (:func:`run_task`; None: none).
    The table always has an ``overloaded`` column (None where a point's workload has no
    overload check or it failed); ``warn``: issue :func:`overload_warning` as a
    :class:`~simulator.runner.RunWarning` when a point was overloaded.
    ``executor``: ``local`` (a process pool of ``workers``; 1 runs in this process) or
    ``dask`` (a LocalCluster of ``workers`` on loopback, or the scheduler at ``address``).
    """
    sc = as_scenario(scenario, overrides)
    tasks = plan(sc, max_points)
    with tempfile.TemporaryDirectory(prefix="hetsim-sweep-") as scratch:
        folder = Path(scratch)
        if out is not None:
            folder = open_sweep_dir(out, sweep_hash(sc), resume=resume, force=force)
        shard_dir = folder / SHARDS
        shard_dir.mkdir(parents=True, exist_ok=True)
        finished = done_keys(shard_dir, {t.key for t in tasks})
        todo = [t for t in tasks if t.key not in finished]
        bar = _Progress(len(tasks), len(tasks) - len(todo), progress)
        run = _run_dask if executor == "dask" else _run_local
        base = sc.with_overrides({}, keep_sweep=False)  # what workers need, without the design
        run(base, todo, str(shard_dir), workers, address, bar.update, budgets)
        bar.close()
        table = read_shards(shard_dir, [t.key for t in tasks])
        table.attrs["swept"] = list(parse_sweep(sc.sweep).parameters) if sc.sweep else []
        if "overloaded" not in table:
            table["overloaded"] = None
        text = overload_warning(table)
        if warn and text:
            import warnings

            from hetsim.simulator.runner import RunWarning

            warnings.warn(f"{sc.name}: {text}", RunWarning, stacklevel=3)
        return table


def overloaded_points(table: pd.DataFrame) -> int:
    """How many points of a sweep table were overloaded."""
    if "overloaded" not in table:
        return 0
    flags = table["overloaded"].map(lambda v: v is True or v == True or str(v) == "True")  # noqa: E712
    return int(flags.sum())


def overload_warning(table: pd.DataFrame) -> str | None:
    """One line counting a sweep's overloaded points (None: none was)."""
    n = overloaded_points(table)
    if not n:
        return None
    return (
        f"{n} of {len(table)} points overloaded (sojourn times or the backlog grow while "
        "requests arrive; see the overloaded, sojourn_growth and backlog_growth columns): "
        "their latency and cost figures are not steady-state figures"
    )


def _run_local(
    sc: Scenario,
    todo: list[Task],
    shard_dir: str,
    workers: int,
    address: str | None,
    report: Callable[[Outcome], None],
    budgets: Budgets | None = None,
) -> None:
    if workers <= 1:
        for task in todo:
            report(run_task(sc, task, shard_dir, budgets))
        return
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

    pending = iter(todo)
    with ProcessPoolExecutor(
        max_workers=workers, initializer=_init_worker, initargs=(sc, shard_dir, budgets)
    ) as pool:
        running: set[Future[Outcome]] = set()
        while True:  # keep a bounded window in flight: memory stays flat
            for task in pending:
                running.add(pool.submit(_run_in_worker, task))
                if len(running) >= IN_FLIGHT_PER_WORKER * workers:
                    break
            if not running:
                return
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                report(fut.result())


_WORKER: dict[str, Any] = {}
"""Per worker process of the local pool: the scenario and shard folder, sent once by the
pool's initializer instead of pickled with every task (never used in the parent)."""


def _init_worker(sc: Scenario, shard_dir: str, budgets: Budgets | None = None) -> None:
    _WORKER["scenario"] = sc
    _WORKER["shard_dir"] = shard_dir
    _WORKER["budgets"] = budgets


def _run_in_worker(task: Task) -> Outcome:
    return run_task(_WORKER["scenario"], task, _WORKER["shard_dir"], _WORKER["budgets"])


def _run_dask(
    sc: Scenario,
    todo: list[Task],
    shard_dir: str,
    workers: int,
    address: str | None,
    report: Callable[[Outcome], None],
    budgets: Budgets | None = None,
) -> None:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise ImportError("the dask executor needs: pip install 'hetsim[dask]'") from None
    cluster = None
    if address is None:
        cluster = LocalCluster(
            n_workers=max(1, workers),
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        )
    client = Client(address or cluster)
    try:
        client.run(load_plugins)  # import hetsim in every worker once, before timing tasks
        scenario = client.scatter(sc, broadcast=True)  # sent once, not once per task
        n_workers = max(1, len(client.scheduler_info()["workers"]))
        chunk = max(1, min(MAX_DASK_CHUNK, len(todo) // (12 * n_workers)))
        chunks = list(_batches(todo, chunk))  # several points per task: less per-task cost
        for group in _batches(chunks, DASK_BATCH):  # bounded: memory flat for any length
            futures = client.map(run_chunk, [scenario] * len(group), group,
                                 [shard_dir] * len(group), [budgets] * len(group),
                                 pure=False)  # fmt: skip
            for _, outcomes in as_completed(futures, with_results=True):
                for outcome in outcomes:
                    report(outcome)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


class _Progress:
    """Counts done and failed runs; draws a tqdm bar (done/failed/remaining, ETA)."""

    def __init__(self, total: int, already: int, show: bool) -> None:
        self.failed = 0
        self._bar = None
        if show:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=already, unit="run", file=sys.stderr)
            self._bar.set_postfix(failed=0, remaining=total - already)

    def update(self, outcome: Outcome) -> None:
        self.failed += outcome.failed
        if self._bar is not None:
            self._bar.update()
            remaining = int(self._bar.total or 0) - self._bar.n
            self._bar.set_postfix(failed=self.failed, remaining=remaining)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
