"""Engine speed: hetsim's mmc scenario against a bare-SimPy M/M/c of the same size.

Runs both in this process on the same arrival and service parameters and prints
customers per second, SimPy events per second, and the ratio hetsim / bare SimPy.
Target: ratio >= 0.5. Usage: ``python benchmarks/engine.py [--customers N]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import simpy

import hetsim

SERVERS = 4
RATE_PER_S = 3.6  # utilisation 0.9 with mu = 1


def bare_simpy(n: int, seed: int) -> tuple[float, int, float]:
    """Textbook SimPy M/M/c: a process per customer holding a Resource.

    Returns (wall seconds, events processed, mean wait)."""
    env = simpy.Environment()
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / RATE_PER_S, n).tolist()
    services = rng.exponential(1.0, n).tolist()
    servers = simpy.Resource(env, capacity=SERVERS)
    waits: list[float] = []

    def customer(i: int):  # type: ignore[no-untyped-def]
        arrived = env.now
        with servers.request() as req:
            yield req
            waits.append(env.now - arrived)
            yield env.timeout(services[i])

    def source():  # type: ignore[no-untyped-def]
        for i in range(n):
            yield env.timeout(gaps[i])
            env.process(customer(i))

    env.process(source())
    events = _count_events(env)
    t0 = time.perf_counter()
    env.run()
    return time.perf_counter() - t0, events[0], float(np.mean(waits))


def _count_events(env: simpy.Environment) -> list[int]:
    """Wrap env.step to count processed events (one list cell, updated in place)."""
    count = [0]
    step = env.step

    def counting_step() -> None:
        count[0] += 1
        step()

    env.step = counting_step  # type: ignore[method-assign]
    return count


def run_hetsim(n: int, seed: int) -> tuple[float, int, float]:
    """hetsim's mmc scenario with n customers. Returns (wall s, events, mean wait)."""
    from hetsim.simulator.engine import Simulation
    from hetsim.simulator.runner import build

    sc = hetsim.load_scenario(
        "scenarios/mmc.yaml",
        {"workload.num_requests": n, "workload.warmup_requests": 0, "seed": seed},
    )
    t0 = time.perf_counter()
    sim = Simulation(sc.seed, record_spans=sc.outputs.spans)
    workload = build(sc, sim)
    workload.start()
    events = _count_events(sim.env)
    sim.run(until=workload.done)
    summary = workload.summary(sim.now)
    wall = time.perf_counter() - t0
    return wall, events[0], float(summary["mean_wait_s"])


def main() -> None:
    """Print both runs' figures and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--customers", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    n = args.customers
    b_wall, b_events, b_wait = bare_simpy(n, args.seed)
    h_wall, h_events, h_wait = run_hetsim(n, args.seed)
    print(f"M/M/{SERVERS}, rho = {RATE_PER_S / SERVERS:.2f}, {n:,} customers")
    row = "{:>12} {:>8} {:>12} {:>11} {:>10} {:>9}"
    print(row.format("", "wall s", "customers/s", "events", "events/s", "mean wait"))
    runs = (("bare SimPy", b_wall, b_events, b_wait), ("hetsim", h_wall, h_events, h_wait))
    for name, wall, events, wait in runs:
        print(
            row.format(
                name, f"{wall:.2f}", f"{n / wall:,.0f}", f"{events:,}",
                f"{events / wall:,.0f}", f"{wait:.4f}",
            )
        )  # fmt: skip
    print(f"ratio hetsim / bare SimPy, customers per second: {b_wall / h_wall:.2f} (target >= 0.5)")
    events_ratio = (h_events / h_wall) / (b_events / b_wall)
    print(
        f"ratio hetsim / bare SimPy, events per second: {events_ratio:.2f} "
        "(hetsim uses fewer events per customer: callbacks, no process per customer)"
    )


if __name__ == "__main__":
    main()
