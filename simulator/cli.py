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
from hetsim.simulator.engine import InvariantViolation
from hetsim.simulator.errors import ScenarioError
from hetsim.simulator.plugins import ENV_PLUGINS, PluginError, load_plugin, load_plugins
from hetsim.simulator.version import __version__

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
    out: dict[str, Any] = {}
    for item in items:
        path, sep, value = item.partition("=")
        if not sep or not path:
            raise ScenarioError("--set", item, "expected PATH=VALUE")
        out[path] = yaml.safe_load(value)
    return out


def _print_summary(summary: dict[str, Any], out: Any) -> None:
    width = max(len(k) for k in summary)
    for key, value in summary.items():
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
        print(f"  {key:<{width}}  {text}", file=out)


def cmd_run(args: argparse.Namespace) -> int:
    """Run one scenario, print its summary, write results and a trace if asked."""
    from hetsim.simulator.runner import as_scenario, simulate

    sc = as_scenario(args.file, _parse_set(args.set), args.seed)
    if args.format:
        sc = sc.with_overrides({"outputs.format": args.format})
    result = simulate(sc, progress=not args.quiet and sys.stderr.isatty())
    if not args.quiet:
        print(f"{sc.name} (seed {sc.seed}): {result.wall_s:.2f} s wall")
        _print_summary(result.summary_row, sys.stdout)
    if args.out:
        result.to_dir(args.out, sc.outputs.format)
        print(f"results: {args.out}")
    if args.trace:
        result.trace(args.trace)
        print(f"trace: {args.trace} (open in https://ui.perfetto.dev)")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run a scenario's sweep, streaming shards; exit code = number of failed runs."""
    from hetsim.simulator.atomic import atomic_write, atomic_write_text
    from hetsim.simulator.result import write_frame
    from hetsim.simulator.runner import as_scenario
    from hetsim.simulator.sweeps import sweep

    sc = as_scenario(args.file, _parse_set(args.set), args.seed)
    out = args.resume or args.out
    try:
        table = sweep(
            sc,
            workers=args.workers,
            executor=args.executor,
            address=args.address,
            out=out,
            resume=bool(args.resume),
            progress=not args.quiet and sys.stderr.isatty(),
        )
    except FileExistsError as e:
        raise ScenarioError(str(out), "", f"{e} with --resume {out}") from None
    failed = int(table["error"].notna().sum()) if "error" in table else 0
    if not args.quiet:
        shown = table.drop(columns=["traceback", "hetsim_version"], errors="ignore")
        print(shown.to_string(index=False))
    if out:
        fmt = args.format or sc.outputs.format
        atomic_write(Path(out) / f"sweep.{fmt}", lambda tmp: write_frame(table, tmp, fmt))
        atomic_write_text(Path(out) / "scenario.yaml", yaml.safe_dump(sc.raw, sort_keys=False))
        print(f"results: {out}")
    if failed:
        print(f"{failed} of {len(table)} runs failed (see the error column)", file=sys.stderr)
    return min(failed, 125)


def cmd_validate(args: argparse.Namespace) -> int:
    """Validate a scenario (and every sweep point) and build it, without running it."""
    from hetsim.simulator.engine import Simulation
    from hetsim.simulator.runner import as_scenario, build
    from hetsim.simulator.sweeps import plan

    sc = as_scenario(args.file)
    points = plan(sc) if sc.sweep else []
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
        for name, doc, params in _entries(kind):
            print(f"  {name:<28} {doc}")
            if params and args.kind:
                print(f"  {'':<28}   params: {params}")
    return 0


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

        return [(name, _scenario_doc(path), "") for name, path in shipped_scenarios().items()]
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
    return [(e.name, e.doc, fmt(e.params)) for e in reg]


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
        p.add_argument("--out", help="write results to this directory (atomically)")
        p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")

    p_run = sub.add_parser("run", help="run one scenario")
    scenario_args(p_run)
    p_run.add_argument("--trace", help="write a Chrome/Perfetto trace JSON here")
    p_run.set_defaults(func=cmd_run)

    p_sweep = sub.add_parser("sweep", help="run a scenario's sweep: design")
    scenario_args(p_sweep)
    p_sweep.add_argument("--workers", type=int, default=1, help="worker processes")
    p_sweep.add_argument("--executor", choices=["local", "dask"], default="local")
    p_sweep.add_argument("--address", help="dask scheduler address (default: a LocalCluster)")
    p_sweep.add_argument("--resume", metavar="DIR", help="continue the sweep stored in DIR")
    p_sweep.set_defaults(func=cmd_sweep)

    p_val = sub.add_parser("validate", help="check a scenario without running it")
    p_val.add_argument("file", help="scenario YAML file, or a shipped scenario's name")
    p_val.set_defaults(func=cmd_validate)

    p_list = sub.add_parser("list", help="list registered devices, models, policies...")
    p_list.add_argument("kind", nargs="?", choices=LIST_KINDS)
    p_list.set_defaults(func=cmd_list)
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
    if getattr(args, "workers", 1) < 1:
        print(f"hetsim: error: --workers must be >= 1, got {args.workers}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        _load_cli_plugins(args.plugin)
        return int(args.func(args))
    except PluginError as e:
        print(f"hetsim: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ScenarioError as e:
        print(str(e), file=sys.stderr)
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
