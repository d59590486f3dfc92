"""Start-up time: ``hetsim --version``, ``import hetsim``, loading a scenario and building
its run (cluster, topology, workload, policies; nothing simulated).

Each command runs ``--repeat`` times in a fresh interpreter; prints the best and the
median wall seconds and CPU seconds (user + system of the child, from ``getrusage``) of
each, and which heavy libraries loading the scenario and building its run imported.
Targets (issue 21): ``hetsim --version`` < 0.3 s, ``import hetsim`` < 0.5 s.
Run: ``.venv/bin/python benchmarks/startup.py [--repeat 7] [--scenario vidur-workload]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("pandas", "scipy", "scipy.optimize", "scipy.stats", "networkx", "matplotlib")


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """(wall s, child CPU s, stdout) of one run of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out


def main() -> None:
    """Time each command and print a table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--scenario", default="vidur-workload")
    args = parser.parse_args()
    python = sys.executable
    hetsim_cli = str(Path(python).with_name("hetsim"))
    load = (
        f"import sys, hetsim; hetsim.load_scenario({args.scenario!r}); "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    build = (
        "import sys, hetsim; from hetsim.simulator.engine import Simulation; "
        "from hetsim.simulator.runner import build; "
        f"sc = hetsim.load_scenario({args.scenario!r}); build(sc, Simulation(sc.seed)); "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    commands = {
        "python -c pass": [python, "-c", "pass"],
        "hetsim --version": [hetsim_cli, "--version"],
        "import hetsim": [python, "-c", "import hetsim"],
        f"load_scenario({args.scenario})": [python, "-c", load],
        f"build({args.scenario})": [python, "-c", build],
    }
    env_note = os.environ.get("HETSIM_PLUGINS")
    if env_note:
        print(f"note: HETSIM_PLUGINS={env_note!r} is set")
    print(f"{'':>32} {'wall best':>10} {'wall med':>9} {'CPU best':>9} {'CPU med':>8}")
    heavy: dict[str, str] = {}
    for name, cmd in commands.items():
        runs = [timed(cmd) for _ in range(args.repeat)]
        walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
        print(
            f"{name:>32} {min(walls):>10.3f} {statistics.median(walls):>9.3f} "
            f"{min(cpus):>9.3f} {statistics.median(cpus):>8.3f}"
        )
        if name.startswith(("load_scenario", "build")):
            heavy[name] = runs[-1][2].strip()
    for name, mods in heavy.items():
        print(f"heavy libraries imported by {name}: {mods or '(none)'}")
    print("targets: hetsim --version < 0.3 s, import hetsim < 0.5 s")


if __name__ == "__main__":
    main()
