"""Engine speed: hetsim's mmc scenario against two bare-SimPy M/M/c models of its size.

- *textbook*: the SimPy tutorial's model, a process per customer holding a Resource
  (about 6 events per customer);
- *callbacks*: bare SimPy written the way hetsim's workloads are, plain callbacks on
  timeouts and one FIFO queue, no process per customer (2 events per customer).

All three run in this process on the same arrival rate and service law. Times are CPU
seconds (``time.process_time``) of the simulation loop only (scenario loading and table
building excluded). Events are counted without instrumenting either loop: SimPy numbers
every scheduled event (``Environment._eid``), so the count is read once the run is over.
Prints customers and events per CPU second, the ratios hetsim / bare SimPy, and hetsim's
overhead per event (CPU per event minus the callback model's). Target: hetsim >= 0.5x the
callback model per customer. Usage: ``python benchmarks/engine.py [--customers N]``.
"""

from __future__ import annotations

import argparse
import time
from collections import deque
from collections.abc import Callable

import numpy as np
import simpy

import hetsim

SERVERS = 4
RATE_PER_S = 3.6  # utilisation 0.9 with mu = 1


def events_scheduled(env: simpy.Environment) -> int:
    """Events ``env`` has scheduled so far (SimPy's event id counter; reading it
    consumes one id, after the run, so the run itself is untouched)."""
    return int(next(env._eid))  # type: ignore[attr-defined]


def _draws(n: int, seed: int) -> tuple[list[float], list[float]]:
    rng = np.random.default_rng(seed)
    return rng.exponential(1.0 / RATE_PER_S, n).tolist(), rng.exponential(1.0, n).tolist()


def textbook_simpy(n: int, seed: int) -> tuple[float, int, float]:
    """Textbook SimPy M/M/c: a process per customer holding a Resource.

    Returns (CPU seconds, events scheduled, mean wait)."""
    env = simpy.Environment()
    gaps, services = _draws(n, seed)
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

    t0 = time.process_time()
    env.process(source())
    env.run()
    cpu = time.process_time() - t0
    return cpu, events_scheduled(env), float(np.mean(waits))


def callback_simpy(n: int, seed: int) -> tuple[float, int, float]:
    """Bare SimPy M/M/c with callbacks: a timeout per arrival and per service, one FIFO
    queue of waiting customers, a count of idle servers.

    Returns (CPU seconds, events scheduled, mean wait)."""
    env = simpy.Environment()
    gaps, services = _draws(n, seed)
    arrived_s = [0.0] * n
    waits: list[float] = []
    queue: deque[int] = deque()
    idle = [SERVERS]

    def serve(i: int) -> None:
        waits.append(env.now - arrived_s[i])
        env.timeout(services[i]).callbacks.append(departed)

    def departed(_ev: simpy.Event) -> None:
        if queue:
            serve(queue.popleft())
        else:
            idle[0] += 1

    def arrival_after(i: int) -> Callable[[simpy.Event], None]:
        def arrived(_ev: simpy.Event) -> None:
            arrived_s[i] = env.now
            if idle[0]:
                idle[0] -= 1
                serve(i)
            else:
                queue.append(i)
            if i + 1 < n:
                env.timeout(gaps[i + 1]).callbacks.append(arrival_after(i + 1))

        return arrived

    t0 = time.process_time()
    env.timeout(gaps[0]).callbacks.append(arrival_after(0))
    env.run()
    cpu = time.process_time() - t0
    return cpu, events_scheduled(env), float(np.mean(waits))


def run_hetsim(n: int, seed: int) -> tuple[float, int, float]:
    """hetsim's mmc scenario with n customers. Returns (CPU s, events, mean wait)."""
    from hetsim.simulator.engine import Simulation
    from hetsim.simulator.runner import build

    sc = hetsim.load_scenario(
        "scenarios/mmc.yaml",
        {"workload.num_requests": n, "workload.warmup_requests": 0, "seed": seed},
    )
    sim = Simulation(sc.seed, record_spans=sc.outputs.spans)
    workload = build(sc, sim)
    t0 = time.process_time()
    workload.start()
    sim.run(until=workload.done)
    cpu = time.process_time() - t0
    events = events_scheduled(sim.env)
    summary = workload.summary(sim.now)
    return cpu, events, float(summary["mean_wait_s"])


def main() -> None:
    """Print the three runs' figures and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--customers", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    n = args.customers
    runs = {
        "textbook SimPy": textbook_simpy(n, args.seed),
        "callback SimPy": callback_simpy(n, args.seed),
        "hetsim": run_hetsim(n, args.seed),
    }
    print(f"M/M/{SERVERS}, rho = {RATE_PER_S / SERVERS:.2f}, {n:,} customers, CPU seconds")
    row = "{:>15} {:>7} {:>12} {:>11} {:>8} {:>10} {:>10} {:>9}"
    print(row.format("", "CPU s", "customers/s", "events", "ev/cust", "events/s", "us/event",
                     "mean wait"))  # fmt: skip
    for name, (cpu, events, wait) in runs.items():
        print(
            row.format(
                name, f"{cpu:.2f}", f"{n / cpu:,.0f}", f"{events:,}", f"{events / n:.2f}",
                f"{events / cpu:,.0f}", f"{1e6 * cpu / events:.2f}", f"{wait:.4f}",
            )
        )  # fmt: skip
    h_cpu, h_events, _ = runs["hetsim"]
    for name in ("textbook SimPy", "callback SimPy"):
        b_cpu = runs[name][0]
        print(f"hetsim / {name}, customers per CPU second: {b_cpu / h_cpu:.2f}")
    cb_cpu, cb_events, _ = runs["callback SimPy"]
    overhead_us = 1e6 * (h_cpu / h_events - cb_cpu / cb_events)
    print(
        f"hetsim overhead per event over callback SimPy: {overhead_us:.2f} us "
        f"({1e6 * h_cpu / h_events:.2f} vs {1e6 * cb_cpu / cb_events:.2f} us per event); "
        "target: >= 0.50x callback SimPy per customer"
    )


if __name__ == "__main__":
    main()
