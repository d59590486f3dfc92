"""The ``hetsim`` command line: run, sweep, validate, list.

Bad input (a scenario, a CLI argument) prints one line naming the file and field and
exits 2; nothing is written. Exit 1: the run failed (e.g. out of memory); exit 3: a
run broke one of its own invariants (a bug: please report it with the scenario).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml

from hetsim.simulator import registry
from hetsim.simulator.budget import (
    DEFAULT_MAX_EVENTS,
    GIB,
    BudgetExceeded,
    Budgets,
    WorkTooLarge,
    budget,
    check_estimate,
)
from hetsim.simulator.errors import InvariantViolation, ScenarioError, TraceError
from hetsim.simulator.plugins import ENV_PLUGINS, PluginError, load_plugin, load_plugins
from hetsim.simulator.version import __version__

VALIDATE_MEMORY_GIB = 4.0
VALIDATE_CPU_S = 60.0
"""``validate`` builds the scenario within these (``--max-memory-gib``, ``--max-cpu-s``):
a scenario too large to build in them is refused, so validating never runs away. The CPU
budget is a guard against a runaway build, not a speed requirement: the slowest shipped
scenario builds in about 3.4 s of CPU on the 2-core development machine, and a loaded or
slower machine must never see a shipped scenario refused (``--max-cpu-s 0``: no limit)."""
EXIT_BAD_INPUT = 2
EXIT_RUN_FAILED = 1
EXIT_INVARIANT = 3
LIST_KINDS = ("devices", "links", "fabrics", "models", "workloads", "policies", "metrics",
              "scenarios")  # fmt: skip


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _parse_set(items: Sequence[str]) -> dict[str, Any]:
    from hetsim.simulator.boundary import yaml_value

    out: dict[str, Any] = {}
    for item in items:
        path, sep, value = item.partition("=")
        if not sep or not path:
            raise ScenarioError("--set", item, "expected PATH=VALUE")
        out[path] = yaml_value(value, f"--set {path}")
    return out


def _print_summary(summary: dict[str, Any], out: Any) -> None:
    width = max(len(k) for k in summary)
    for key, value in summary.items():
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
        print(f"  {key:<{width}}  {text}", file=out)


def cmd_run(args: argparse.Namespace) -> int:
    """Run one scenario, print its summary, write results and a trace if asked."""
    from hetsim.simulator.outdir import check_dirs_within, check_output_dir, check_trace_target
    from hetsim.simulator.runner import as_scenario, simulate

    sc = as_scenario(args.file, _parse_set(args.set), args.seed)
    if args.format:
        sc = sc.with_overrides({"outputs.format": args.format})
    if args.plots and args.out is None:
        raise ScenarioError("--plots", "", "needs --out DIR (the figures go to DIR/figures)")
    if args.out is not None:  # refuse before running, not after
        check_output_dir(args.out, "run", force=args.force)
        if args.plots:
            check_dirs_within(Path(args.out), "figures", "--plots")
    if args.trace is not None:
        check_trace_target(args.trace)
        if not sc.outputs.spans:  # a trace needs the spans the scenario turned off
            sc = sc.with_overrides({"outputs.spans": True})
    check_estimate(sc, args.max_events, _gib(args.max_memory_gib))  # before building
    with budget(_gib(args.max_memory_gib), args.max_cpu_s, "the run"):
        result = simulate(sc, progress=not args.quiet and sys.stderr.isatty())
    if not args.quiet:
        print(f"{sc.name} (seed {sc.seed}): {result.wall_s:.2f} s wall")
        _print_summary(result.summary_row, sys.stdout)
    for text in result.warnings:  # even with -q: they change what the figures mean
        print(f"{args.file}: warning: {text}", file=sys.stderr)
    if args.out is not None:
        result.to_dir(args.out, sc.outputs.format, force=args.force)
        _say(args, f"results: {args.out}")
    if args.trace is not None:
        result.trace(args.trace)
        _say(args, f"trace: {args.trace} (open in https://ui.perfetto.dev)")
    if args.plots:
        from hetsim.simulator.figures import write_figures

        files = write_figures(args.out)
        _say(args, f"figures: {len(files)} files in {Path(args.out) / 'figures'}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    """Draw a result folder's standard figures (PNG and SVG) into RESULT_DIR/figures."""
    from hetsim.simulator.figures import write_figures

    files = write_figures(args.result_dir, args.out, force=args.force)
    if not files:
        print(f"{args.result_dir}: no standard figure for this workload's tables",
              file=sys.stderr)  # fmt: skip
        return EXIT_RUN_FAILED
    if not args.quiet:
        for path in files:
            print(path)
    return 0


def _say(args: argparse.Namespace, text: str) -> None:
    """Print ``text`` unless ``-q``."""
    if not args.quiet:
        print(text)


SWEEP_SHOWN_ROWS = 20
SWEEP_SHOWN_METRICS = 4


def sweep_digest(table: Any, metrics: Sequence[str]) -> str:
    """A short view of a sweep table: its swept columns and the first few metrics of
    the workload, at most :data:`SWEEP_SHOWN_ROWS` rows (the full table is the file)."""
    import pandas as pd

    swept = list(table.attrs.get("swept", []))
    varying = [c for c in table.columns if c in metrics and c != "overloaded"
               and pd.api.types.is_numeric_dtype(table[c]) and table[c].nunique() > 1]  # fmt: skip
    shown = varying[:SWEEP_SHOWN_METRICS]
    extra = [c for c in ("seed", "overloaded") if c in table and table[c].nunique() > 1]
    extra += ["error"] if "error" in table and table["error"].notna().any() else []
    cols = list(dict.fromkeys(["point", *swept, *extra, *shown]))
    part = table[[c for c in cols if c in table.columns]].head(SWEEP_SHOWN_ROWS)
    text = part.to_string(index=False, float_format=lambda v: f"{v:.4g}",
                          formatters={c: _short for c in swept})  # fmt: skip
    if len(table) > SWEEP_SHOWN_ROWS:
        text += f"\n... {len(table) - SWEEP_SHOWN_ROWS} more rows"
    return text


def _short(value: Any) -> str:
    from hetsim.plotting import value_label

    text = value_label(value)
    return text if len(text) <= 40 else text[:37] + "..."


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run a scenario's sweep, streaming shards; exit code = number of failed runs."""
    from hetsim.simulator.atomic import atomic_write, atomic_write_text
    from hetsim.simulator.outdir import check_sweep_file, finish_sweep_dir
    from hetsim.simulator.result import write_frame
    from hetsim.simulator.runner import as_scenario
    from hetsim.simulator.sweeps import overload_warning, sweep, sweep_hash

    if args.resume and args.out:
        raise ScenarioError("--out", "", "give --out or --resume, not both")
    sc = as_scenario(args.file, _parse_set(args.set), args.seed)
    out = args.resume or args.out
    table = sweep(
        sc,
        workers=args.workers,
        executor=args.executor,
        address=args.address,
        out=out,
        resume=bool(args.resume),
        progress=not args.quiet and sys.stderr.isatty(),
        force=args.force,
        max_points=_max_points(args),
        budgets=Budgets(_gib(args.max_memory_gib), args.max_cpu_s, args.max_events),
        warn=False,
    )
    failed = int(table["error"].notna().sum()) if "error" in table else 0
    if not args.quiet:
        print(f"{sc.name}: {len(table)} points, {failed} failed")
        print(sweep_digest(table, [*sc.workload_cls.metrics, "overloaded"]))
        if not out:
            print("(a digest; --out DIR writes every column to DIR/sweep.csv)")
    warning = overload_warning(table)
    if warning:
        print(f"{args.file}: warning: {warning}", file=sys.stderr)
    if out:
        fmt = args.format or sc.outputs.format
        folder, files = Path(out), [f"sweep.{fmt}", "scenario.yaml"]
        for name in files:
            check_sweep_file(folder, name)
        atomic_write(folder / files[0], lambda tmp: write_frame(table, tmp, fmt), "--out")
        atomic_write_text(folder / files[1], yaml.safe_dump(sc.raw, sort_keys=False), "--out")
        finish_sweep_dir(folder, sweep_hash(sc), files)
        _say(args, f"results: {out} (the full table: {out}/{files[0]})")
    if failed:
        print(f"{failed} of {len(table)} runs failed (see the error column)", file=sys.stderr)
    return min(failed, 125)


def _max_points(args: argparse.Namespace) -> int:
    from hetsim.simulator.sweeps import DEFAULT_MAX_POINTS

    return DEFAULT_MAX_POINTS if args.max_points is None else int(args.max_points)


def _gib(value: float | None) -> int | None:
    return None if value is None else int(value * GIB)


def _default_run_memory_gib() -> float | None:
    """Three quarters of the machine's memory (None where it cannot be read)."""
    import os

    try:
        return 0.75 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    except (ValueError, OSError, AttributeError):
        return None


def cmd_validate(args: argparse.Namespace) -> int:
    """Validate a scenario (and every sweep point) and build it, without running it."""
    from hetsim.simulator.engine import Simulation
    from hetsim.simulator.runner import as_scenario, build
    from hetsim.simulator.sweeps import plan

    sc = as_scenario(args.file)
    points = plan(sc, _max_points(args)) if sc.sweep else []
    with budget(_gib(args.max_memory_gib), args.max_cpu_s, "building it"):
        build(sc, Simulation(sc.seed, record_spans=False))  # what only building can check
    cluster = sc.cluster
    ndev = sum(d.count for n in cluster.nodes for d in n.devices.values())
    extra = f", {len(points)} sweep points" if points else ""
    print(f"{args.file}: ok (workload {sc.workload.kind}, {ndev} devices{extra})")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """Print every registered entry of one kind (or all kinds) with its doc and params."""
    load_plugins()
    kinds = [args.kind] if args.kind else list(LIST_KINDS)
    for kind in kinds:
        print(f"{kind}:")
        if args.kind in ("workloads", "policies"):
            _list_with_fields(kind)
            continue
        for name, doc, params in _entries(kind):
            print(f"  {name:<28} {doc}")
            if params and args.kind:
                print(f"  {'':<28}   params: {params}")
    return 0


def _first_paragraph(obj: Any) -> str:
    """An object's docstring up to its first blank line, as one line (never cut)."""
    text = (getattr(obj, "__doc__", None) or "").strip().split("\n\n")[0]
    return " ".join(text.split())


def _list_with_fields(kind: str) -> None:
    """Workloads or policies: each with its whole summary paragraph, then every field
    with type, default, unit and doc (:mod:`simulator.reference`)."""
    import textwrap

    from hetsim.simulator.reference import field_rows, format_rows

    if kind == "workloads":
        entries = [(e.name, e.obj) for e in registry.workloads]
    else:
        entries = [(f"{point}/{e.name}", e.obj) for point in registry.policies.decision_points()
                   for e in registry.policies.point(point)]  # fmt: skip
    for name, obj in entries:
        print(f"  {name}")
        for line in textwrap.wrap(_first_paragraph(obj), 88):
            print(f"      {line}")
        for line in format_rows(field_rows(obj), indent="    "):
            print(line)


def cmd_fidelity(args: argparse.Namespace) -> int:
    """Run every expressed validation row and report its error (simulator/fidelity.py)."""
    from hetsim.simulator.fidelity import main as fidelity_main

    return fidelity_main(
        rows_path=Path(args.rows) if args.rows else None,
        calibration_dir=Path(args.calibration_dir) if args.calibration_dir else None,
        out_dir=Path(args.out) if args.out else None,
        fast=args.fast,
        quiet=args.quiet,
        cv=args.cv,
        groups=args.group or (),
        ids=[i for part in (args.ids or []) for i in part.split(",") if i],
        force=args.force,
    )


def _entries(kind: str) -> list[tuple[str, str, str]]:
    def fmt(p: dict[str, str]) -> str:
        return ", ".join(f"{k}: {v}" for k, v in p.items())

    if kind == "policies":
        return [
            (f"{point}/{e.name}", e.doc, fmt(e.params))
            for point in registry.policies.decision_points()
            for e in registry.policies.point(point)
        ]
    if kind == "scenarios":
        from hetsim.simulator.scenario import shipped_scenarios

        return [(name, _data_mark(path) + _scenario_doc(path), "")
                for name, path in shipped_scenarios().items()]  # fmt: skip
    if kind == "metrics":
        return [
            (f"{e.name}/{metric}", text, "")
            for e in registry.workloads
            for metric, text in e.obj.metrics.items()
        ]
    reg = {
        "devices": registry.device_types,
        "links": registry.link_types,
        "fabrics": registry.fabrics,
        "models": registry.models,
        "workloads": registry.workloads,
    }[kind]
    rows = [(e.name, e.doc, fmt(e.params)) for e in reg]
    if kind == "models":  # the moe workload's catalogue (workloads/models/moe.yaml) too
        from hetsim.workloads.models.moe import moe_models

        listed = {r[0] for r in rows}
        for name, m in moe_models().items():
            if name not in listed:
                doc = (f"{m.display_name or name}: {m.layers} layers, {m.routed_experts} "
                       f"routed experts (top-{m.top_k}), MoE (moe workload)")  # fmt: skip
                rows.append((name, doc, ""))
        rows.sort()
    return rows


def _data_mark(path: Path) -> str:
    """``[needs data: ...]`` for a scenario whose ``data:`` hetsim does not ship
    (``absent`` when it is not where the scenario reads it)."""
    from hetsim.simulator.scenario import DataNeed, missing_data

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        needs = [DataNeed.model_validate(d) for d in (raw.get("data") or [])]
    except (OSError, yaml.YAMLError, AttributeError, ValueError):
        return ""
    if not needs:
        return ""
    absent = missing_data(needs, path.parent)
    state = "absent, see `hetsim validate`" if absent else "present"
    return f"[needs unshipped data, {state}] "


def _scenario_doc(path: Path) -> str:
    """The first line of a scenario file's ``description:`` (or its first comment)."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return ""
    text = str(raw.get("description") or "") if isinstance(raw, dict) else ""
    if not text:
        comments = [ln.lstrip("# ").strip() for ln in path.read_text().splitlines()
                    if ln.startswith("#")]  # fmt: skip
        text = comments[0] if comments else ""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= 100 else first.split(". ")[0][:97].rstrip(".") + "..."


def build_parser() -> argparse.ArgumentParser:
    """The ``hetsim`` argument parser."""
    parser = _Parser(prog="hetsim", description="Discrete-event simulator of AI clusters.")
    parser.add_argument("--version", action="version", version=f"hetsim {__version__}")
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE",
                        help="import a module or .py file that registers workloads, policies "
                        "or devices (repeatable; also HETSIM_PLUGINS)")  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def scenario_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("file", help="scenario YAML file, or a shipped scenario's name")
        p.add_argument("--seed", type=int, help="override the scenario's seed")
        p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                       help="override a field by dotted path (repeatable)")  # fmt: skip
        p.add_argument("--format", choices=["csv", "parquet"], help="output table format")
        p.add_argument("--out", help="write results to this directory (atomically); it must "
                       "be new, empty or made by hetsim")  # fmt: skip
        p.add_argument("--force", action="store_true", help="write into a folder that holds "
                       "other files (they are kept; a name clash is still refused)")  # fmt: skip
        p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")

    def budget_args(p: argparse.ArgumentParser, memory_gib: float | None, cpu_s: float | None,
                    what: str, events: bool = True) -> None:  # fmt: skip
        shown = "none" if memory_gib is None else f"{memory_gib:.3g}"
        p.add_argument(
            "--max-memory-gib",
            type=float,
            default=memory_gib,
            metavar="GIB",
            help=f"refuse {what} past this much more memory (default {shown})",
        )
        p.add_argument(
            "--max-cpu-s",
            type=float,
            default=cpu_s,
            metavar="S",
            help=f"refuse {what} past this much CPU time, 0 for no limit "
            f"(default {cpu_s or 'none'})",
        )
        if events:
            p.add_argument(
                "--max-events",
                type=float,
                default=DEFAULT_MAX_EVENTS,
                metavar="N",
                help=f"refuse {what} whose up-front work estimate (requests x output tokens, "
                f"jobs x rounds, ranks x microbatches, tokens x layers) exceeds N "
                f"(default {DEFAULT_MAX_EVENTS:.0e})",
            )

    p_run = sub.add_parser("run", help="run one scenario")
    scenario_args(p_run)
    p_run.add_argument("--trace", help="write a Chrome/Perfetto trace JSON here (turns span "
                       "recording on)")  # fmt: skip
    p_run.add_argument("--plots", action="store_true", help="also draw the domain's standard "
                       "figures into OUT/figures (PNG and SVG; needs --out)")  # fmt: skip
    budget_args(p_run, _default_run_memory_gib(), None, "a run")
    p_run.set_defaults(func=cmd_run)

    p_sweep = sub.add_parser("sweep", help="run a scenario's sweep: design")
    scenario_args(p_sweep)
    p_sweep.add_argument("--workers", type=int, default=1, help="worker processes")
    p_sweep.add_argument("--executor", choices=["local", "dask"], default="local")
    p_sweep.add_argument("--address", help="dask scheduler address (default: a LocalCluster)")
    p_sweep.add_argument("--resume", metavar="DIR", help="continue the sweep stored in DIR")
    p_sweep.add_argument("--max-points", type=int, metavar="N", help="refuse sweep designs of "
                         "more points (default 10000)")  # fmt: skip
    budget_args(p_sweep, _default_run_memory_gib(), None, "each sweep point")
    p_sweep.set_defaults(func=cmd_sweep)

    p_val = sub.add_parser("validate", help="check a scenario without running it")
    p_val.add_argument("file", help="scenario YAML file, or a shipped scenario's name")
    p_val.add_argument("--max-points", type=int, metavar="N", help="refuse sweep designs of "
                       "more points (default 10000)")  # fmt: skip
    budget_args(p_val, VALIDATE_MEMORY_GIB, VALIDATE_CPU_S, "building the scenario", False)
    p_val.set_defaults(func=cmd_validate)

    p_plot = sub.add_parser("plot", help="draw a result folder's standard figures")
    p_plot.add_argument("result_dir", help="a folder written by hetsim run --out")
    p_plot.add_argument("--out", help="write the figures here (default RESULT_DIR/figures); "
                        "it must be new, empty or made by hetsim")  # fmt: skip
    p_plot.add_argument("--force", action="store_true", help="write into an --out folder "
                        "of other files (kept; a name clash is refused)")  # fmt: skip
    p_plot.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    p_plot.set_defaults(func=cmd_plot)

    p_list = sub.add_parser("list", help="list registered devices, models, policies...")
    p_list.add_argument("kind", nargs="?", choices=LIST_KINDS)
    p_list.set_defaults(func=cmd_list)

    p_fid = sub.add_parser("fidelity", help="predicted vs published end-to-end measurements")
    p_fid.add_argument("--fast", action="store_true", help="only the rows marked fast: true")
    p_fid.add_argument("--out", help="write report.md and report.csv to this directory "
                       "(atomically); it must be new, empty or made by hetsim")  # fmt: skip
    p_fid.add_argument("--force", action="store_true", help="write into an --out folder "
                       "of other files (kept; a name clash is refused)")  # fmt: skip
    p_fid.add_argument("--rows", help="rows file (default: the repository's validation/rows.yaml)")
    p_fid.add_argument("--calibration-dir", help="folder holding endtoend.csv "
                       "(default: the shipped validation/data)")  # fmt: skip
    p_fid.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    p_fid.add_argument(
        "--cv",
        action="store_true",
        help="also cross-validate: refit the parts each row reads without "
        "one calibration source or platform at a time, re-run the row",
    )
    p_fid.add_argument(
        "--group",
        action="append",
        help="only the rows of this group (repeatable): training, decode, "
        "serving, cpu, offload, collective, tee",
    )
    p_fid.add_argument("--ids", action="append", help="only these rows (V51,V52; repeatable)")
    p_fid.set_defaults(func=cmd_fidelity)
    for p in sub.choices.values():  # --plugin also after the subcommand
        p.add_argument("--plugin", action="append", default=[], dest="sub_plugin",
                       metavar="MODULE_OR_FILE", help="as hetsim --plugin")  # fmt: skip
    return parser


def _load_cli_plugins(refs: list[str]) -> None:
    """Import ``--plugin`` modules, and pass them on to worker processes through
    ``HETSIM_PLUGINS`` (files as absolute paths, so workers find them anywhere)."""
    if not refs:
        return
    import os

    absolute = [str(Path(r).resolve()) if r.endswith(".py") else r for r in refs]
    for ref in absolute:
        load_plugin(ref, origin="--plugin")
    earlier = [p for p in os.environ.get(ENV_PLUGINS, "").split(os.pathsep) if p]
    os.environ[ENV_PLUGINS] = os.pathsep.join(dict.fromkeys([*earlier, *absolute]))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hetsim`` console script."""
    args = build_parser().parse_args(argv)
    if getattr(args, "seed", None) is not None and args.seed < 0:
        print(f"hetsim: error: --seed must be >= 0, got {args.seed}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if (getattr(args, "max_points", None) or 1) < 1:
        print(f"hetsim: error: --max-points must be >= 1, got {args.max_points}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if getattr(args, "workers", 1) < 1:
        print(f"hetsim: error: --workers must be >= 1, got {args.workers}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        _load_cli_plugins([*args.plugin, *getattr(args, "sub_plugin", [])])
        return int(args.func(args))
    except PluginError as e:
        print(f"hetsim: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (ScenarioError, TraceError) as e:
        print(str(e).splitlines()[0] if str(e) else type(e).__name__, file=sys.stderr)
        return EXIT_BAD_INPUT
    except WorkTooLarge as e:  # names the option that raises the budget itself
        print(f"{getattr(args, 'file', 'hetsim')}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BudgetExceeded as e:
        print(f"{getattr(args, 'file', 'hetsim')}: {e}; raise it with --max-memory-gib or "
              "--max-cpu-s", file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    except InvariantViolation as e:
        print(f"{getattr(args, 'file', 'hetsim')}: invariant violated: {e}", file=sys.stderr)
        return EXIT_INVARIANT
    except Exception as e:
        from hetsim.devices.memory import OutOfMemory

        if isinstance(e, OutOfMemory):
            print(f"{getattr(args, 'file', 'hetsim')}: run failed: {e}", file=sys.stderr)
            return EXIT_RUN_FAILED
        raise


if __name__ == "__main__":
    sys.exit(main())
