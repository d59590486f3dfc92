"""Start-up time: what a run costs before its first event, per domain.

For one shipped scenario per domain this prints the CPU seconds (user + system, the
best of ``--repeat``) of

- ``load``: a fresh interpreter from its start to the end of ``load_scenario`` (Python,
  ``import hetsim``, the engine, the domain's modules, parsing and validating the file);
- ``build``: ``runner.build`` after that (cluster, policies, workload; nothing simulated);
- ``fixed``: the two together, the run's fixed cost (target <= 0.5 s on a 2-core box);
- ``first``: ``fixed`` with an empty disk cache (``simulator.diskcache``): the first run
  on a machine, or after an edit of a file a cached result comes from;
- ``warm load`` / ``warm build``: the same calls again in one process (what each point
  of a sweep pays in its worker once the first point has loaded everything).

Then ``hetsim --version``, ``import hetsim``, the wall time of ``hetsim run
scenarios/quickstart.yaml`` (target < 1 s), and a sweep's per-point overhead: the
points of ``quickstart``'s sweep cut to ``--sweep-requests`` requests, run by
``hetsim.sweep(workers=1)``; ``per point`` is its CPU time over the points, ``fixed per
point`` the part that is not simulating (point validation + build, measured apart).

``--baseline DIR`` runs the cold figures against another checkout too (``git worktree
add /tmp/main main``): its code is put first on ``PYTHONPATH`` of the children.

Children run with bytecode cached (``PYTHONPYCACHEPREFIX`` in a temporary folder,
``PYTHONDONTWRITEBYTECODE`` unset, one run discarded first), as an installed package
runs; ``--as-is`` keeps the environment unchanged instead.

Figures before this change (2026-12-02, load average 1.1-1.2, ``--baseline`` on the
previous main, best of 3; CPU s; ``load`` includes the interpreter and the imports)::

    domain         scenario         load  build  fixed  heavy imports
    serving        vidur-workload   0.366  0.132  0.503
    queueing       quickstart       0.352  0.085  0.437
    cluster        cuckoo           0.423  0.008  0.431  networkx
    elastic        kale             0.553  0.011  0.563  pandas, pyarrow
    moe            adapmoe          0.367  0.280  0.647
    offload        flexgen          0.357  0.169  0.526
    tee            tensortee        0.352  0.332  0.684
    training       chameleon        0.367  0.023  0.390
    observability  kair             0.356  0.006  0.363
    collective     v64              0.337  0.000  0.338
    hetsim run scenarios/quickstart.yaml: 0.58-0.61 s wall

After it, same conditions (load average 1.7): fixed 0.26-0.35 s for every domain; with
an empty disk cache (``first``) 0.27-0.51 s; quickstart run 0.44 s wall.

Run: ``.venv/bin/python benchmarks/startup.py [--repeat 5] [--baseline DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

DOMAINS: dict[str, str] = {
    "serving": "scenarios/vidur-workload.yaml",
    "queueing": "scenarios/quickstart.yaml",
    "cluster": "scenarios/cuckoo.yaml",
    "elastic": "scenarios/kale.yaml",
    "moe": "scenarios/adapmoe.yaml",
    "offload": "scenarios/flexgen.yaml",
    "tee": "scenarios/tensortee.yaml",
    "training": "scenarios/chameleon.yaml",
    "observability": "scenarios/kair.yaml",
    "collective": "validation/v64.yaml",  # no scenarios/ file: the V64 validation run
}

HEAVY = ("pandas", "scipy", "matplotlib", "networkx", "pyarrow")

CHILD = f"""
import json, resource, sys
HEAVY = {HEAVY!r}
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
import hetsim
from hetsim.simulator.engine import Simulation
from hetsim.simulator.runner import build
sc = hetsim.load_scenario(sys.argv[1])
loaded = cpu()
build(sc, Simulation(sc.seed))
built = cpu()
heavy = [m for m in HEAVY if m in sys.modules]
print(json.dumps(dict(load=loaded, build=built - loaded, heavy=heavy)))
"""


def child_env(code: Path, base: dict[str, str], cache_dir: str | None) -> dict[str, str]:
    """The environment of a child running ``code``'s hetsim (``cache_dir``: its disk
    cache; None: the user's)."""
    env = dict(base)
    env["PYTHONPATH"] = os.pathsep.join([str(code), *filter(None, [base.get("PYTHONPATH")])])
    if cache_dir is not None:
        env["HETSIM_CACHE_DIR"] = cache_dir
    return env


def cold(code: Path, scenario: str, env: dict[str, str], fresh_cache: bool) -> dict[str, Any]:
    """One fresh-interpreter load and build of ``scenario`` (CPU seconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        e = child_env(code, env, tmp if fresh_cache else None)
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(code / scenario)],
            check=True, capture_output=True, text=True, env=e, cwd=code,
        ).stdout  # fmt: skip
    data: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return data


def best_cold(
    code: Path, scenario: str, env: dict[str, str], repeat: int, fresh: bool
) -> dict[str, Any]:
    """Best of ``repeat`` cold runs (after one discarded run that writes bytecode)."""
    cold(code, scenario, env, fresh)
    runs = [cold(code, scenario, env, fresh) for _ in range(repeat)]
    return {
        "load": min(r["load"] for r in runs),
        "build": min(r["build"] for r in runs),
        "fixed": min(r["load"] + r["build"] for r in runs),
        "heavy": runs[-1]["heavy"],
    }


def warm(scenario: str, repeat: int) -> tuple[float, float]:
    """(load, build) CPU seconds in this process, the best of ``repeat`` after a first."""
    import hetsim
    from hetsim.simulator.engine import Simulation
    from hetsim.simulator.runner import build

    loads, builds = [], []
    for _ in range(repeat + 1):
        t0 = time.process_time()
        sc = hetsim.load_scenario(ROOT / scenario)
        t1 = time.process_time()
        build(sc, Simulation(sc.seed))
        t2 = time.process_time()
        loads.append(t1 - t0)
        builds.append(t2 - t1)
    return min(loads[1:]), min(builds[1:])


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def sweep_overhead(requests: int, repeat: int) -> tuple[int, float, float]:
    """(points, CPU s per point of ``hetsim.sweep``, fixed CPU s per point) of
    quickstart's sweep at ``requests`` requests per point, in this process."""
    import hetsim
    from hetsim.simulator.engine import Simulation
    from hetsim.simulator.runner import build
    from hetsim.simulator.sweeps import plan

    over = {"workload.num_requests": requests}
    sc = hetsim.load_scenario(ROOT / "scenarios/quickstart.yaml", over)
    tasks = plan(sc)
    per_point, fixed = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.process_time()
            hetsim.sweep(sc, workers=1, out=Path(tmp) / "out")
            per_point.append((time.process_time() - t0) / len(tasks))
        t0 = time.process_time()
        for task in tasks:
            point = sc.with_overrides(task.overrides, keep_sweep=False)
            build(point, Simulation(point.seed))
        fixed.append((time.process_time() - t0) / len(tasks))
    return len(tasks), min(per_point), min(fixed)


def main() -> None:
    """Measure and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another checkout to time cold too")
    parser.add_argument("--sweep-requests", type=int, default=20)
    parser.add_argument("--as-is", action="store_true", help="keep the environment as it is")
    args = parser.parse_args()
    env = dict(os.environ)
    pyc = tempfile.TemporaryDirectory()
    if not args.as_is:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pyc.name
    if env.get("HETSIM_PLUGINS"):
        print(f"note: HETSIM_PLUGINS={env['HETSIM_PLUGINS']!r} is set")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"CPU seconds, best of {args.repeat}")  # fmt: skip
    trees = [("this tree", ROOT)]
    if args.baseline is not None:
        trees.append((f"baseline {args.baseline}", args.baseline.resolve()))
    for label, code in trees:
        new = code == ROOT
        print(f"\n{label}: cold (fresh interpreter)" + (", warm (same process)" if new else ""))
        head = f"{'domain':<14} {'scenario':<22} {'load':>6} {'build':>6} {'fixed':>6}"
        if new:
            head += f" {'first':>6} {'warm load':>10} {'warm build':>11}"
        print(head + "  heavy imports")
        for domain, scenario in DOMAINS.items():
            c = best_cold(code, scenario, env, args.repeat, fresh=False)
            line = f"{domain:<14} {Path(scenario).stem:<22} {c['load']:>6.3f} {c['build']:>6.3f} "
            line += f"{c['fixed']:>6.3f}"
            if new:
                first = best_cold(code, scenario, env, max(1, args.repeat // 2), fresh=True)
                wl, wb = warm(scenario, args.repeat)
                line += f" {first['fixed']:>6.3f} {wl:>10.3f} {wb:>11.3f}"
            print(line + "  " + (",".join(c["heavy"]) or "-"))
    cli = [sys.executable, "-m", "hetsim.simulator.cli"]
    run_env = child_env(ROOT, env, None)
    print()
    for name, cmd in {
        "hetsim --version": [*cli, "--version"],
        "import hetsim": [sys.executable, "-c", "import hetsim"],
    }.items():
        runs = [timed(cmd, run_env) for _ in range(args.repeat + 1)][1:]
        print(
            f"{name:<40} wall {min(r[0] for r in runs):.3f} s, CPU {min(r[1] for r in runs):.3f} s"
        )
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [*cli, "run", "scenarios/quickstart.yaml", "--out", f"{tmp}/o", "-q", "--force"]
        runs = [timed(cmd, run_env) for _ in range(args.repeat + 1)][1:]
    print(f"{'hetsim run scenarios/quickstart.yaml':<40} wall {min(r[0] for r in runs):.3f} s, "
          f"CPU {min(r[1] for r in runs):.3f} s")  # fmt: skip
    n, per_point, fixed = sweep_overhead(args.sweep_requests, max(1, args.repeat // 2))
    print(
        f"sweep of quickstart ({n} points, {args.sweep_requests} requests each, workers=1): "
        f"{per_point:.3f} s CPU per point, of which {fixed:.3f} s point validation + build"
    )
    print("targets: fixed <= 0.5 s CPU per domain; quickstart run < 1 s wall")
    pyc.cleanup()


if __name__ == "__main__":
    main()
