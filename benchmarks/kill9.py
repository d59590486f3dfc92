"""kill -9 at random moments of ``hetsim run --out`` and ``hetsim sweep --out``.

Run trials: the quickstart scenario writes into an absent folder, into its own earlier
results, or (``--force``) beside a user's file; SIGKILL lands at a uniformly random
moment of the process's life (start-up included). After each kill the folder must be
absent or complete (its marker lists every file, each present; the summary readable),
the earlier results intact if the new ones did not land, the user's file untouched, a
landed summary equal to the rerun's; the rerun must clean the dead writer's temporaries.

Sweep trials: a 12-point sweep is killed at a random moment and resumed with
``--resume``; the resumed table must equal an uninterrupted sweep's (wall times
aside): no point lost, none twice.

Usage: ``python benchmarks/kill9.py [--trials 20] [--seed 0]``; prints one line per
trial and the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parent.parent
MARKER = ".hetsim.json"
VOLATILE = ["wall_s"]
HETSIM = [sys.executable, "-m", "hetsim"]


def _run(args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HETSIM, *args], cwd=ROOT, capture_output=True, text=True,
                          check=check)  # fmt: skip


def _killed_at(args: list[str], delay_s: float) -> bool:
    """Start hetsim, SIGKILL it after ``delay_s``; True if it was still running."""
    proc = subprocess.Popen([*HETSIM, *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        proc.wait(timeout=delay_s)
        return False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return True


def complete(folder: Path) -> bool:
    """A result folder whose marker lists files that are all present and readable."""
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    files = marker.get("files", [])
    if not files or not all((folder / f).is_file() for f in files if not f.endswith("/")):
        return False
    pd.read_csv(folder / "summary.csv")
    return True


def run_trials(trials: int, rng: random.Random, scratch: Path) -> int:
    """The run trials; returns the number of failures."""
    scenario = ["run", "quickstart", "--set", "workload.num_requests=3000", "-q"]
    t0 = time.perf_counter()
    _run([*scenario, "--out", str(scratch / "reference")])
    life_s = time.perf_counter() - t0
    failures = 0
    for trial in range(trials):
        case = ("absent", "own", "force")[trial % 3]
        out = scratch / f"run{trial}"
        extra: list[str] = []
        if case == "own":
            shutil.copytree(scratch / "reference", out)
        elif case == "force":
            out.mkdir()
            (out / "notes.txt").write_text("mine")
            extra = ["--force"]
        delay = rng.uniform(0.0, 1.2 * life_s)
        killed = _killed_at([*scenario, "--out", str(out), *extra], delay)
        problems = []
        if case == "absent" and out.exists() and not complete(out):
            problems.append("incomplete folder")
        if case == "own" and not complete(out):
            problems.append("earlier results lost")
        if case == "force":
            if (out / "notes.txt").read_text() != "mine":
                problems.append("user file changed")
            if (out / MARKER).exists() and not complete(out):
                problems.append("marker lists missing files")
        landed = (out / "summary.csv").read_text() if out.exists() and complete(out) else None
        again = _run([*scenario, "--out", str(out), *extra], check=False)
        if landed is not None and landed != (out / "summary.csv").read_text():
            problems.append("the killed run's summary differs from the rerun's")
        leftovers = [p.name for p in scratch.iterdir() if p.name.startswith(f".run{trial}.")]
        if again.returncode != 0:
            problems.append(f"rerun failed: {again.stderr.strip()[:120]}")
        if leftovers:
            problems.append(f"temporaries left: {leftovers}")
        if case == "force" and (out / "notes.txt").read_text() != "mine":
            problems.append("user file changed by the rerun")
        failures += bool(problems)
        state = "killed" if killed else "finished"
        print(f"run trial {trial:2d} ({case:6s}, kill at {delay:5.2f} s, {state}): "
              f"{'; '.join(problems) or 'ok'}")  # fmt: skip
    return failures


def sweep_trials(trials: int, rng: random.Random, scratch: Path) -> int:
    """The sweep trials; returns the number of failures."""
    raw = yaml.safe_load((ROOT / "scenarios" / "mmc.yaml").read_text())
    raw["workload"]["num_requests"] = 2000
    raw["workload"]["warmup_requests"] = 0
    raw["outputs"] = {"spans": False}
    raw["sweep"] = {"seed": list(range(12))}
    path = scratch / "sweep.yaml"
    path.write_text(yaml.safe_dump(raw))
    t0 = time.perf_counter()
    _run(["sweep", str(path), "-q", "--out", str(scratch / "clean")])
    life_s = time.perf_counter() - t0
    clean = pd.read_csv(scratch / "clean" / "sweep.csv").drop(columns=VOLATILE)
    failures = 0
    for trial in range(trials):
        out = scratch / f"sweep{trial}"
        delay = rng.uniform(0.0, 1.1 * life_s)
        killed = _killed_at(["sweep", str(path), "-q", "--out", str(out)], delay)
        shards = len(list((out / "shards").glob("*.parquet"))) if out.exists() else 0
        problems = []
        flag = "--resume" if out.exists() and (out / MARKER).exists() else "--out"
        again = _run(["sweep", str(path), "-q", flag, str(out)], check=False)
        if again.returncode != 0:
            problems.append(f"resume failed: {again.stderr.strip()[:160]}")
        else:
            table = pd.read_csv(out / "sweep.csv").drop(columns=VOLATILE)
            if not table["point"].is_unique or len(table) != len(clean):
                problems.append(f"{len(table)} rows, points unique: {table['point'].is_unique}")
            else:
                try:
                    pd.testing.assert_frame_equal(table, clean)
                except AssertionError as e:
                    problems.append(f"differs: {str(e).splitlines()[0]}")
        failures += bool(problems)
        state = "killed" if killed else "finished"
        print(f"sweep trial {trial:2d} (kill at {delay:5.2f} s, {state}, {shards:2d} shards, "
              f"then {flag}): {'; '.join(problems) or 'ok'}")  # fmt: skip
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=["run", "sweep"], help="one kind of trial")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="hetsim-kill9-") as tmp:
        scratch = Path(tmp)
        run_failures = run_trials(args.trials, rng, scratch) if args.only != "sweep" else 0
        sweep_failures = sweep_trials(args.trials, rng, scratch) if args.only != "run" else 0
    print(f"run: {args.trials - run_failures} of {args.trials} trials ok; "
          f"sweep: {args.trials - sweep_failures} of {args.trials} trials ok")  # fmt: skip
    return 1 if run_failures or sweep_failures else 0


if __name__ == "__main__":
    sys.exit(main())
