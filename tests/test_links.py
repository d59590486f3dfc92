"""FIFO copy engines on a link: exact completion logs worked out by hand."""

from collections.abc import Generator
from typing import Any

import pytest
import simpy

from hetsim.devices.link import DuplexLink, Link, hold_links
from hetsim.devices.spec import EfficiencyCurve, LinkSpec
from hetsim.simulator.engine import Simulation

# PCIe Gen4 x16: 31.5e9 B/s per direction, efficiency 0.8 (constant), latency 2 us.
PCIE4 = LinkSpec("pcie4-test", "PCIe 4.0 x16", "pcie", 31.5e9, 2e-6, EfficiencyCurve(0.8))
# t = 2e-6 + 1e9 / (0.8 * 31.5e9) = 2e-6 + 1e9 / 25.2e9 = 2e-6 + 0.0396825396825...
T_1GB = 0.0396845396825397


def _run_copies(
    engines: int, n_copies: int = 2, nbytes: int = 10**9
) -> tuple[Simulation, Link, list[tuple[str, float]]]:
    sim = Simulation()
    link = Link(sim, PCIE4, "h2d", engines=engines)
    log: list[tuple[str, float]] = []

    def copy(name: str) -> Generator[simpy.Event, Any, None]:
        yield link.transfer(nbytes, name)
        log.append((name, sim.now))

    for i in range(n_copies):
        sim.env.process(copy(f"c{i}"))
    sim.run()
    return sim, link, log


def test_fifo_single_engine_exact_log() -> None:
    sim, link, log = _run_copies(engines=1)
    assert [n for n, _ in log] == ["c0", "c1"]
    assert log[0][1] == pytest.approx(T_1GB, rel=1e-12)
    assert log[1][1] == pytest.approx(2 * T_1GB, rel=1e-12)
    assert link.busy_s == pytest.approx(2 * T_1GB, rel=1e-12)
    assert link.bytes_moved == 2 * 10**9
    rows = sim.recorder.tables()["copies"]
    assert list(rows["name"]) == ["c0", "c1"]
    assert list(rows["queued_s"]) == [0.0, 0.0]  # both asked at t=0
    assert rows["start_s"].iloc[1] == pytest.approx(T_1GB, rel=1e-12)  # c1 waited


def test_two_engines_run_in_parallel() -> None:
    _, link, log = _run_copies(engines=2)
    assert [t for _, t in log] == pytest.approx([T_1GB, T_1GB], rel=1e-12)
    # 2 engine-busy periods of T over a horizon T with 2 engines: utilisation 1
    assert link.utilisation(T_1GB) == pytest.approx(1.0)


def test_three_copies_two_engines() -> None:
    # c0, c1 start at 0 on engines 0 and 1; c2 waits for the first free engine: ends 2T
    sim, _, log = _run_copies(engines=2, n_copies=3)
    assert [t for _, t in log] == pytest.approx([T_1GB, T_1GB, 2 * T_1GB], rel=1e-12)
    assert set(sim.recorder.tracks) >= {"h2d#0", "h2d#1"}


def test_zero_byte_copy_pays_latency() -> None:
    _, _, log = _run_copies(engines=1, n_copies=1, nbytes=0)
    assert log == [("c0", 2e-6)]


def test_duplex_directions_are_independent() -> None:
    sim = Simulation()
    duplex = DuplexLink(sim, PCIE4, "pcie", "cpu", "gpu")
    ends: list[tuple[str, float]] = []

    def go(src: str, dst: str) -> Generator[simpy.Event, Any, None]:
        yield duplex.transfer(src, dst, 10**9)
        ends.append((src, sim.now))

    sim.env.process(go("cpu", "gpu"))
    sim.env.process(go("gpu", "cpu"))
    sim.run()
    # full duplex: each direction has its own bandwidth, both finish at T
    assert [t for _, t in ends] == pytest.approx([T_1GB, T_1GB], rel=1e-12)
    assert duplex.direction("cpu", "gpu").name == "pcie:cpu->gpu"
    with pytest.raises(KeyError):
        duplex.direction("cpu", "nic")


def test_hold_links_crossing_paths_do_not_deadlock() -> None:
    sim = Simulation()
    a = Link(sim, PCIE4, "a")
    b = Link(sim, PCIE4, "b")
    ends: list[tuple[str, float]] = []

    def go(name: str, links: list[Link]) -> Generator[simpy.Event, Any, None]:
        yield sim.env.process(hold_links(links, 1.0, 100, name))
        ends.append((name, sim.now))

    sim.env.process(go("x", [a, b]))
    sim.env.process(go("y", [b, a]))  # opposite order: locks are taken in name order
    sim.run()
    # x holds a and b over [0, 1]; y gets both at 1 and holds them to 2
    assert ends == [("x", 1.0), ("y", 2.0)]
    assert a.busy_s == b.busy_s == 2.0
