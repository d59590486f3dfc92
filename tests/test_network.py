"""Max-min fair flows: exact logs worked out by hand, and hypothesis properties."""

from collections.abc import Generator
from typing import Any

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsim.devices.network import FlowNetwork, max_min_rates
from hetsim.simulator.engine import Simulation


def _start(
    sim: Simulation,
    net: FlowNetwork,
    log: list[tuple[str, float]],
    path: list[str],
    nbytes: int,
    name: str,
    at_s: float = 0.0,
) -> None:
    def proc() -> Generator[simpy.Event, Any, None]:
        if at_s > 0:
            yield sim.env.timeout(at_s)
        yield net.transfer(path, nbytes, name)
        log.append((name, sim.now))

    sim.env.process(proc())


def test_two_flows_share_one_link() -> None:
    sim = Simulation()
    net = FlowNetwork(sim)
    net.add_link("L", 10e9)
    log: list[tuple[str, float]] = []
    _start(sim, net, log, ["L"], 10**9, "f1")
    _start(sim, net, log, ["L"], 10**9, "f2")
    sim.run()
    # each gets 10e9 / 2 = 5e9 B/s: 1e9 / 5e9 = 0.2 s, both in the same instant
    assert log == [("f1", pytest.approx(0.2, rel=1e-12)), ("f2", pytest.approx(0.2, rel=1e-12))]
    assert log[0][1] == log[1][1]


def test_bottleneck_elsewhere_gives_the_rest_to_the_other_flow() -> None:
    sim = Simulation()
    net = FlowNetwork(sim)
    net.add_link("A", 10e9)
    net.add_link("B", 2e9)
    log: list[tuple[str, float]] = []
    _start(sim, net, log, ["A"], 6 * 10**9, "short_path")
    _start(sim, net, log, ["A", "B"], 10**9, "long_path")
    flows = {}
    net.on_recompute = lambda n: flows.update({f.name: f for f in n.active.values()})
    sim.run()
    # B's equal share 2e9/1 < A's 10e9/2: long_path frozen at 2e9; A has 8e9 left for
    # short_path. long_path ends at 1e9 / 2e9 = 0.5 s; short_path has moved 8e9 * 0.5 =
    # 4e9 by then, and its last 2e9 bytes go at the full 10e9: 0.2 s more -> 0.7 s.
    assert log == [
        ("long_path", pytest.approx(0.5, rel=1e-12)),
        ("short_path", pytest.approx(0.7, rel=1e-12)),
    ]
    assert flows["long_path"].rate_history == [(0.0, 2e9)]
    assert flows["short_path"].rate_history == [
        (0.0, 10e9),  # alone for an instant before long_path joined (same t=0)
        (0.0, 8e9),
        (pytest.approx(0.5, rel=1e-12), 10e9),
    ]


def test_flow_arriving_midway() -> None:
    sim = Simulation()
    net = FlowNetwork(sim)
    net.add_link("L", 10e9)
    log: list[tuple[str, float]] = []
    _start(sim, net, log, ["L"], 10**9, "first")
    _start(sim, net, log, ["L"], 10**9, "second", at_s=0.05)
    sim.run()
    # [0, 0.05]: first alone at 10e9 moves 0.5e9, 0.5e9 left. Then 5e9 each: first ends
    # at 0.05 + 0.5e9/5e9 = 0.15, when second has moved 0.5e9; its last 0.5e9 at 10e9
    # takes 0.05 s -> 0.2 (2e9 bytes over a 10e9 link: work-conserving).
    assert log == [
        ("first", pytest.approx(0.15, rel=1e-12)),
        ("second", pytest.approx(0.2, rel=1e-12)),
    ]


def test_path_latency_before_the_flow_starts() -> None:
    sim = Simulation()
    net = FlowNetwork(sim, "fabric")
    net.add_link("up", 10e9, latency_s=1e-3)
    net.add_link("down", 10e9, latency_s=2e-3)
    log: list[tuple[str, float]] = []
    _start(sim, net, log, ["up", "down"], 10**9, "f")
    sim.run()
    # starts after 1e-3 + 2e-3 = 3e-3 s; 1e9 / 10e9 = 0.1 s -> ends at 0.103
    assert log == [("f", pytest.approx(0.103, rel=1e-12))]
    row = sim.recorder.tables()["flows"].iloc[0]
    assert (row["queued_s"], row["path"], row["nbytes"]) == (0.0, "up>down", 10**9)
    assert row["start_s"] == pytest.approx(3e-3)


def test_max_min_rates_textbook_example() -> None:
    # Links X (cap 1) and Y (cap 1); f0 on X+Y, f1 on X, f2 on Y. Equal shares: 1/2 on
    # both, so every flow gets 0.5 (no spare left anywhere).
    assert max_min_rates({0: ("X", "Y"), 1: ("X",), 2: ("Y",)}, {"X": 1.0, "Y": 1.0}) == {
        0: 0.5,
        1: 0.5,
        2: 0.5,
    }
    # Y cap 3 with 3 flows crossing it (f0, f2, f3) -> share 1; X cap 4 with f0, f1 ->
    # share 2. Y first: f0, f2, f3 at 1; X keeps 4 - 1 = 3 for f1.
    caps = {"X": 4.0, "Y": 3.0}
    rates = max_min_rates({0: ("X", "Y"), 1: ("X",), 2: ("Y",), 3: ("Y",)}, caps)
    assert rates == {0: 1.0, 1: 3.0, 2: 1.0, 3: 1.0}


def test_bad_paths_are_rejected() -> None:
    sim = Simulation()
    net = FlowNetwork(sim)
    net.add_link("L", 1e9)
    with pytest.raises(ValueError):
        net.transfer([], 10)
    with pytest.raises(KeyError):
        net.transfer(["nope"], 10)
    with pytest.raises(ValueError):
        net.transfer(["L", "L"], 10)


network_cases = st.integers(1, 4).flatmap(
    lambda n_links: st.tuples(
        st.lists(st.integers(1, 10), min_size=n_links, max_size=n_links),
        st.lists(
            st.tuples(
                st.lists(st.integers(0, n_links - 1), min_size=1, max_size=n_links, unique=True),
                st.integers(1, 10**9),
                st.sampled_from([0.0, 0.01, 0.05, 0.3]),
            ),
            min_size=1,
            max_size=6,
        ),
    )
)


@settings(max_examples=60, deadline=None)
@given(network_cases)
def test_fair_sharing_properties(
    case: tuple[list[int], list[tuple[list[int], int, float]]],
) -> None:
    caps_gbps, flows = case
    sim = Simulation()
    net = FlowNetwork(sim)
    caps = {f"L{i}": c * 1e9 for i, c in enumerate(caps_gbps)}
    for name, cap in caps.items():
        net.add_link(name, cap)

    def no_link_over_capacity(n: FlowNetwork) -> None:
        for link, load in n.link_load_Bps().items():
            assert load <= caps[link] * (1 + 1e-9)

    net.on_recompute = no_link_over_capacity
    done: list[tuple[str, float]] = []
    for k, (idx, nbytes, at_s) in enumerate(flows):
        path = [f"L{i}" for i in idx]
        _start(sim, net, done, path, nbytes, f"f{k}", at_s)
    sim.run()
    sim.check_invariants()
    assert len(done) == len(flows) and not net.active
    # bytes integrated from rate x time (not counted at completion) match the requests
    requested = sum(nbytes for _, nbytes, _ in flows)
    # abs 1e-5 B: a time step is exact only to float spacing (~1e-16 s at t < 1 s), which
    # at up to 1e10 B/s is ~1e-6 B per step
    assert net.bytes_delivered == pytest.approx(requested, rel=1e-9, abs=1e-5)
    ends = dict(done)
    for k, (idx, nbytes, at_s) in enumerate(flows):
        fastest_s = nbytes / min(caps[f"L{i}"] for i in idx)
        # 1e-12 s: float spacing of times near 0.3 s is about 5.6e-17 s
        assert ends[f"f{k}"] - at_s >= fastest_s * (1 - 1e-9) - 1e-12
