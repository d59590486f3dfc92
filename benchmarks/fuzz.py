"""Fuzz ``hetsim validate`` with mutated shipped scenarios and trace files.

Every shipped scenario is mutated (a key deleted or added; a value replaced by a wrong
type, a negative, zero, NaN, infinite or huge number, an empty, huge or unicode string;
the text truncated, cut with garbage, made non-UTF-8, nested deeply, a YAML alias bomb,
a duplicate key) and every shipped trace file the scenarios read is mutated the same
way at the text level (cells replaced by such values, rows truncated, deep JSON, huge
fields). Each case runs ``hetsim validate`` in a worker process (the scenario is built,
so trace files are read) and is classified:

``ok`` (exit 0), ``error`` (exit 1-3, one line naming the scenario or the trace file),
``unclear`` (an error that is not one line or names neither file), ``traceback`` (an
exception escaped), ``hang`` (over ``--timeout`` seconds, default 10).

Usage: ``python benchmarks/fuzz.py [--scenarios 10000] [--traces 1000] [--workers 2]
[--seed 0]``. Prints the counts per outcome and every case that is not ``ok``/``error``
(with its mutation, so it can be replayed with ``--replay N``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing as mp
import os
import queue
import random
import resource
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
DATA = ROOT / "workloads" / "data"
MEMORY_LIMIT_BYTES = 6 << 30  # per worker: a runaway allocation is a MemoryError, not a swap

# (name, scenario, overrides with "@" for the mutated trace, the shipped original)
TRACE_TARGETS: list[tuple[str, str, dict[str, Any], str]] = [
    ("azure", "cauchy", {}, "serving/azure_conv_2023_sample.csv"),
    ("mooncake", "prefix-cache", {}, "serving/mooncake_conversation_sample.jsonl"),
    ("muri", "muri", {}, "cluster/muri_trace1_head400.csv"),
    ("gavel-profiles", "gavel", {}, "cluster/gavel_job_profiles.csv"),
    ("gavel-speeds", "muri", {"workload.speeds.path": "@"}, "cluster/gavel_throughputs_sf1.csv"),
    ("philly", "muri", {"workload.jobs": {"kind": "philly", "runtime_path": "@",
                                           "num_jobs": 20}}, "cluster/philly_runtime_sample.csv"),
    ("helios", "muri", {"workload.jobs": {"kind": "helios", "summary_path": "@",
                                           "num_jobs": 20}}, "cluster/helios_cluster_summary.csv"),
    ("faults", "faults", {"workload.fail_stop": {"kind": "trace", "path": "@"}},
     "observability/infinitehbd_fault_trace_sample.json"),
]  # fmt: skip

HUGE_STR = "x" * 200_000
VALUES: list[Any] = [
    None, True, False, 0, -1, -1.5, 1, 0.0, float("nan"), float("inf"), float("-inf"),
    1e308, -1e308, 10**30, 2**64, 2**63, -(2**63) - 1, 10**400, "", HUGE_STR, "naïve ☃ 𝄞",
    "\x00", "fifty", [], [1, 2], {}, {"a": 1}, 1e-320, 5e-324, 3, 1000000000, 1e12,
]  # fmt: skip
CELLS = ["", "nan", "inf", "-inf", "1e999", "-1", "0", "18446744073709551616", "1e30",
         "1e308", "x", "1" * 5000, "naïve", "\x00", '"', "9" * 200_000, "0.5", "-0"]  # fmt: skip


# ---- scenario mutations -----------------------------------------------------------------
def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _parent(raw: Any, path: tuple[Any, ...]) -> Any:
    node = raw
    for part in path[:-1]:
        node = node[part]
    return node


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def mutate_data(raw: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any]]:
    """One structural mutation of a parsed scenario: (description, new raw)."""
    raw = json.loads(json.dumps(raw))  # a deep copy (shipped scenarios are JSON-able)
    paths = _paths(raw)
    path = rng.choice(paths)
    parent, key = _parent(raw, path), path[-1]
    op = rng.choice(["delete", "unknown", "value", "value", "value", "wrap"])
    if op == "delete":
        del parent[key]
        return f"delete {path}", raw
    if op == "unknown":
        target = parent if isinstance(parent, dict) else raw
        target[f"zz_{rng.randrange(1000)}"] = rng.choice(VALUES[:20])
        return f"unknown key near {path}", raw
    if op == "wrap":
        parent[key] = [parent[key]] if rng.random() < 0.5 else {"x": parent[key]}
        return f"wrap {path}", raw
    value = rng.choice(VALUES)
    parent[key] = value
    return f"set {path} = {str(value)[:40]!r}", raw


def _dump(raw: dict[str, Any]) -> str:
    return yaml.safe_dump(raw, sort_keys=False, allow_unicode=True, width=10**9)


def mutate_text(text: str, rng: random.Random) -> tuple[str, bytes]:
    """One text-level mutation of a scenario file: (description, bytes)."""
    data = text.encode()
    op = rng.choice(["truncate", "garbage", "latin1", "deep", "bomb", "duplicate",
                     "bigint", "nul", "empty", "tab"])  # fmt: skip
    if op == "truncate":
        cut = rng.randrange(len(data))
        return f"truncate at {cut}", data[:cut]
    if op == "garbage":
        at = rng.randrange(len(data))
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        return f"garbage at {at}", data[:at] + junk + data[at:]
    if op == "latin1":
        return "non-UTF-8 description", b"description: caf\xe9\n" + data
    if op == "deep":
        depth = rng.choice([100, 1000, 10_000, 100_000])
        return f"nesting {depth}", data + f"\nzz: {_deep(depth)}\n".encode()
    if op == "bomb":
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
        lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
                  f"*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 9)]  # fmt: skip
        return "alias bomb", ("\n".join(lines) + "\n").encode() + data
    if op == "duplicate":
        return "duplicate key", data + b"\nname: again\n"
    if op == "bigint":
        return "5000-digit seed", data + b"\nseed: " + b"7" * 5000 + b"\n"
    if op == "nul":
        return "NUL byte", data.replace(b"\n", b"\n\x00", 1)
    if op == "tab":
        return "tab indent", data.replace(b"\n  ", b"\n\t", 1)
    return "empty file", b""


def scenario_case(i: int, seed: int) -> tuple[str, str, bytes]:
    """Case ``i``: (scenario name, description, file bytes)."""
    rng = random.Random(seed * 1_000_003 + i)
    files = sorted(SCENARIOS.glob("*.yaml"))
    src = files[i % len(files)]
    text = src.read_text()
    if rng.random() < 0.25:
        desc, data = mutate_text(text, rng)
        return src.stem, desc, data
    raw = yaml.safe_load(text)
    descs = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        desc, raw = mutate_data(raw, rng)
        descs.append(desc)
    return src.stem, "; ".join(descs), _dump(raw).encode()


# ---- trace mutations --------------------------------------------------------------------
def mutate_trace(data: bytes, suffix: str, rng: random.Random) -> tuple[str, bytes]:
    """One mutation of a trace file's bytes: (description, bytes)."""
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines(keepends=True)
    op = rng.choice(["cell", "cell", "cell", "truncate", "latin1", "deep", "huge",
                     "empty", "header", "blank"])  # fmt: skip
    if op == "truncate":
        cut = rng.randrange(len(data))
        return f"truncate at {cut}", data[:cut]
    if op == "latin1":
        at = rng.randrange(len(data))
        return f"byte 0xff at {at}", data[:at] + b"\xff" + data[at:]
    if op == "empty":
        return "empty", b""
    if op == "header":
        return "header only", lines[0].encode() if lines else b""
    if op == "blank":
        k = rng.randrange(1, max(2, len(lines)))
        return f"blank line {k + 1}", "".join([*lines[:k], "\n", *lines[k:]]).encode()
    if op == "deep":
        depth = rng.choice([1000, 100_000])
        k = rng.randrange(len(lines)) if lines else 0
        junk = _deep(depth) + "\n"
        return f"nesting {depth} at line {k + 1}", "".join([*lines[:k], junk, *lines[k:]]).encode()
    if op == "huge":
        k = rng.randrange(1, max(2, len(lines)))
        huge = "9" * 200_000 + "\n"
        return f"200 KiB line {k + 1}", "".join([*lines[:k], huge, *lines[k:]]).encode()
    cell = rng.choice(CELLS)
    k = rng.randrange(1, len(lines)) if len(lines) > 1 else 0
    line = lines[k] if lines else ""
    if suffix == ".jsonl" or suffix == ".json":
        return _json_cell(text, rng, cell)
    parts = line.rstrip("\n").split(",")
    j = rng.randrange(len(parts))
    parts[j] = cell
    lines[k] = ",".join(parts) + "\n"
    return f"line {k + 1} column {j + 1} = {cell[:20]!r}", "".join(lines).encode()


def _json_cell(text: str, rng: random.Random, cell: str) -> tuple[str, bytes]:
    """Replace one number in a JSON text by a JSON-ish token (or a nested array)."""
    import re

    numbers = list(re.finditer(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", text))
    if not numbers:
        return "no numbers", text.encode()
    m = rng.choice(numbers)
    token = rng.choice(["1e999", "-1", "18446744073709551616", "NaN", "Infinity", '"x"',
                        "null", "[[[[1]]]]", "1e30", "0", "9" * 5000, "true", "{}"])  # fmt: skip
    return f"number at {m.start()} = {token[:20]}", (text[: m.start()] + token
                                                     + text[m.end():]).encode()  # fmt: skip


def _set_dotted(raw: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node = raw
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def _replace_pkg(node: Any, original: str, new: str) -> Any:
    if isinstance(node, dict):
        return {k: _replace_pkg(v, original, new) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace_pkg(v, original, new) for v in node]
    return new if node == f"pkg:{original}" else node


def _fill(value: Any, path: str) -> Any:
    if value == "@":
        return path
    if isinstance(value, dict):
        return {k: _fill(v, path) for k, v in value.items()}
    return value


def trace_case(i: int, seed: int, folder: Path) -> tuple[str, str, bytes, Path]:
    """Trace case ``i``: (target, description, scenario bytes, trace path written)."""
    rng = random.Random(seed * 7_000_003 + i)
    name, scen, overrides, original = TRACE_TARGETS[i % len(TRACE_TARGETS)]
    src = DATA / original
    desc, data = mutate_trace(src.read_bytes(), src.suffix, rng)
    trace = folder / f"trace-{i}{src.suffix}"
    trace.write_bytes(data)
    raw = yaml.safe_load((SCENARIOS / f"{scen}.yaml").read_text())
    raw = _replace_pkg(raw, original, str(trace))
    for path, value in overrides.items():
        _set_dotted(raw, path, _fill(value, str(trace)))
    raw.pop("sweep", None)
    return name, desc, _dump(raw).encode(), trace


# ---- running ------------------------------------------------------------------------------
class Hang(Exception):
    """The case ran past the time limit."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise Hang


def classify(path: Path, names: tuple[str, ...], timeout_s: float) -> tuple[str, str]:
    """Run ``hetsim validate path`` here: (outcome, detail)."""
    from hetsim.simulator.cli import main

    err, out = io.StringIO(), io.StringIO()
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = main(["validate", str(path)])
    except Hang:
        return "hang", ""
    except SystemExit as e:
        code = int(e.code or 0)
    except BaseException as e:
        tb = traceback.format_exc().splitlines()
        return "traceback", f"{type(e).__name__}: {str(e)[:200]} at {tb[-3].strip()[:200]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if code == 0:
        return "ok", ""
    message = err.getvalue().strip()
    if len(message.splitlines()) != 1 or not any(message.startswith(n) for n in names):
        return "unclear", f"exit {code}: {message[:300]!r}"
    return "error", message[:300]


def _worker(tasks: mp.Queue, results: mp.Queue, timeout_s: float) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    sys.setrecursionlimit(3000)
    # warm up (imports, catalogues, plugins) so the first case's time is its own
    for name in ("quickstart", "cauchy", "muri", "faults"):
        classify(SCENARIOS / f"{name}.yaml", (), 600.0)

    while True:
        item = tasks.get()
        if item is None:
            return
        key, path, names = item
        results.put(("start", key, os.getpid()))
        t0, c0 = time.perf_counter(), time.process_time()
        outcome, detail = classify(Path(path), tuple(names), timeout_s)
        if outcome == "hang":
            detail = f"{time.process_time() - c0:.1f} s CPU in {timeout_s:g} s wall"
        results.put(("done", key, (outcome, detail, time.perf_counter() - t0)))


def run_cases(
    cases: list[tuple[str, str, list[str]]], workers: int, timeout_s: float
) -> dict[str, tuple[str, str, float]]:
    """(key, file, names) cases -> key: (outcome, detail, seconds), on ``workers``."""
    ctx = mp.get_context("fork")
    tasks: mp.Queue = ctx.Queue()
    results: mp.Queue = ctx.Queue()
    for case in cases:
        tasks.put(case)
    procs = {}

    def spawn() -> None:
        p = ctx.Process(target=_worker, args=(tasks, results, timeout_s), daemon=True)
        p.start()
        procs[p.pid] = p

    for _ in range(workers):
        spawn()
    out: dict[str, tuple[str, str, float]] = {}
    started: dict[str, tuple[int, float]] = {}
    while len(out) < len(cases):
        try:
            kind, key, info = results.get(timeout=1.0)
        except queue.Empty:
            kind = ""
        if kind == "start":
            started[key] = (info, time.monotonic())
        elif kind == "done":
            out[key] = info
            started.pop(key, None)
        now = time.monotonic()
        for key, (pid, t0) in list(started.items()):
            p = procs.get(pid)
            dead = p is not None and not p.is_alive()
            if now - t0 > 3 * timeout_s + 10 or dead:  # stuck in C code, or crashed
                if p is not None and p.is_alive():
                    os.kill(pid, signal.SIGKILL)
                    p.join()
                code = p.exitcode if p is not None else None
                out[key] = ("hang", "killed by the watchdog", now - t0) if not dead else (
                    "traceback", f"worker died (exit {code})", now - t0)  # fmt: skip
                started.pop(key)
                procs.pop(pid, None)
                spawn()
    for _ in procs:
        tasks.put(None)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=10_000)
    ap.add_argument("--traces", type=int, default=1_000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--replay", type=str, help="run one case here: s<N> or t<N>")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hetsim-fuzz-") as tmp:
        folder = Path(tmp)
        cases: list[tuple[str, str, list[str]]] = []
        descs: dict[str, str] = {}
        wanted: Callable[[str], bool] = (lambda k: k == args.replay) if args.replay else (
            lambda k: True)  # fmt: skip
        for i in range(args.scenarios):
            if not wanted(f"s{i}"):
                continue
            name, desc, data = scenario_case(i, args.seed)
            path = folder / f"s{i}-{name}.yaml"
            path.write_bytes(data)
            cases.append((f"s{i}", str(path), [str(path)]))
            descs[f"s{i}"] = f"{name}: {desc}"
        for i in range(args.traces):
            if not wanted(f"t{i}"):
                continue
            name, desc, data, trace = trace_case(i, args.seed, folder)
            path = folder / f"t{i}-{name}.yaml"
            path.write_bytes(data)
            cases.append((f"t{i}", str(path), [str(path), str(trace)]))
            descs[f"t{i}"] = f"{name}: {desc}"
        t0 = time.perf_counter()
        if args.replay:
            key, path, names = cases[0]
            print(descs[key], classify(Path(path), tuple(names), args.timeout))
            return 0
        results = run_cases(cases, max(1, args.workers), args.timeout)
        wall = time.perf_counter() - t0
    for group, prefix in (("scenarios", "s"), ("traces", "t")):
        counts = Counter(o for k, (o, _, _) in results.items() if k.startswith(prefix))
        total = sum(counts.values())
        slowest = max((s for k, (_, _, s) in results.items() if k.startswith(prefix)),
                      default=0.0)  # fmt: skip
        shown = ", ".join(f"{o} {counts.get(o, 0)}" for o in
                          ("ok", "error", "unclear", "traceback", "hang"))  # fmt: skip
        print(f"{group}: {total} cases: {shown}; slowest {slowest:.2f} s")
    bad = {k: v for k, v in results.items() if v[0] not in ("ok", "error")}
    groups: dict[str, list[str]] = {}
    for key in sorted(bad, key=lambda k: (k[0], int(k[1:]))):
        outcome, detail, _ = bad[key]
        groups.setdefault(f"{outcome}: {detail.split(' at ')[-1][:160]}", []).append(key)
    for group, keys in sorted(groups.items(), key=lambda g: -len(g[1])):
        print(f"  {len(keys)} x {group}")
        for key in keys[:3]:
            print(f"      {key} {descs[key][:150]} -> {bad[key][1][:200]}")
    slow = sorted(results, key=lambda k: -results[k][2])[:3]
    print("slowest: " + "; ".join(f"{k} {results[k][2]:.1f} s ({descs[k][:80]})" for k in slow))
    print(f"wall {wall:.0f} s on {args.workers} workers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
