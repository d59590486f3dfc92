"""The kernel: random streams, same-instant ordering, the recorder, registries."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

from hetsim.simulator.engine import Simulation
from hetsim.simulator.recorder import Recorder
from hetsim.simulator.registry import Registry, UnknownName
from hetsim.simulator.rng import RandomStreams, stable_hash


def test_streams_are_independent_of_each_other() -> None:
    a = RandomStreams(5)
    first = a("arrivals").random(3)
    b = RandomStreams(5)
    b("something-else").random(100)  # using another stream first shifts nothing
    assert np.array_equal(b("arrivals").random(3), first)


def test_streams_depend_on_seed_and_name() -> None:
    assert not np.array_equal(RandomStreams(1)("x").random(4), RandomStreams(2)("x").random(4))
    assert not np.array_equal(RandomStreams(1)("x").random(4), RandomStreams(1)("y").random(4))


def test_stable_hash_is_fixed() -> None:
    # BLAKE2b-64 of "arrivals", the first 8 bytes read big-endian; fixed across processes.
    import hashlib

    digest = hashlib.blake2b(b"arrivals", digest_size=8).digest()
    assert stable_hash("arrivals") == int.from_bytes(digest, "big")


def test_negative_seed_rejected() -> None:
    with pytest.raises(ValueError, match="seed"):
        RandomStreams(-1)


def test_end_of_instant_pass_runs_after_same_time_events() -> None:
    """Arrivals and completions at t are processed before the scheduling pass at t,
    even an arrival created by a zero-delay chain after the pass was requested."""
    sim = Simulation()
    env = sim.env
    log: list[tuple[str, float]] = []

    def schedule_pass() -> None:
        sim.at_end_of_instant("sched", lambda: log.append(("pass", env.now)))

    def arrival(name: str) -> None:
        log.append((name, env.now))
        schedule_pass()

    def chain(_: object) -> None:
        arrival("arrival-2")
        env.timeout(0).callbacks.append(lambda _e: arrival("late-arrival"))

    env.timeout(1.0).callbacks.append(lambda _e: arrival("arrival-1"))
    env.timeout(1.0).callbacks.append(chain)
    env.timeout(1.0).callbacks.append(lambda _e: arrival("completion"))
    env.timeout(2.0).callbacks.append(lambda _e: arrival("arrival-3"))
    sim.run()
    assert log == [
        ("arrival-1", 1.0),
        ("arrival-2", 1.0),
        ("completion", 1.0),
        ("late-arrival", 1.0),
        ("pass", 1.0),
        ("arrival-3", 2.0),
        ("pass", 2.0),
    ]


def test_two_pass_keys_run_once_each_in_order() -> None:
    sim = Simulation()
    log: list[str] = []
    for _ in range(3):
        sim.at_end_of_instant("a", lambda: log.append("a"))
        sim.at_end_of_instant("b", lambda: log.append("b"))
    sim.run()
    assert log == ["a", "b"]


def test_recorder_tables_are_column_wise() -> None:
    rec = Recorder()
    t = rec.table("jobs", ["id", "end_s"])
    t.append(1, 0.5)
    t.add(id=2, end_s=1.5)
    frame = rec.tables()["jobs"]
    assert frame["id"].tolist() == [1, 2]
    assert frame["end_s"].tolist() == [0.5, 1.5]
    with pytest.raises(ValueError, match="got 1 values"):
        t.append(1)
    with pytest.raises(ValueError, match="exists"):
        rec.table("jobs", ["other"])


def test_recorder_spans_and_off_switch() -> None:
    rec = Recorder()
    rec.track("gpu0", "node", "device")
    rec.span("gpu0", "gemm", 0.0, 1.0)
    with pytest.raises(ValueError, match="ends before"):
        rec.span("gpu0", "bad", 2.0, 1.0)
    assert rec.spans_frame().to_dict("list") == {
        "start_s": [0.0],
        "end_s": [1.0],
        "track": ["gpu0"],
        "name": ["gemm"],
    }
    off = Recorder(record_spans=False)
    off.span("x", "y", 0.0, 1.0)
    assert len(off.spans_frame()) == 0


def test_registry_lookup_and_unknown_name() -> None:
    reg: Registry[type] = Registry("widget")

    @reg.register("b-widget")
    class B:
        """A second widget.

        More text."""

    reg.add("a-widget", int, doc="Integers.")
    assert reg.names() == ["a-widget", "b-widget"]
    assert reg.get("b-widget") is B
    assert reg.entry("b-widget").doc == "A second widget."
    with pytest.raises(UnknownName) as err:
        reg.get("c-widget")
    assert str(err.value) == ("unknown widget 'c-widget'; did you mean 'b-widget'? valid: "
                              "a-widget, b-widget")  # fmt: skip
    with pytest.raises(UnknownName) as err:
        reg.get("zzz")
    assert str(err.value) == "unknown widget 'zzz'; valid: a-widget, b-widget"  # nothing close
    with pytest.raises(ValueError, match="twice"):
        reg.add("a-widget", str)


def test_two_simulations_do_not_share_state() -> None:
    a, b = Simulation(seed=3), Simulation(seed=3)
    a.env.timeout(5.0)
    a.run()
    assert b.now == 0.0
    assert np.array_equal(a.rng("s").random(2), b.rng("s").random(2))


def test_metrics_page_is_up_to_date() -> None:
    """docs/metrics.md lists every workload's metrics (python -m hetsim.simulator.docs rewrites it)."""
    from hetsim.simulator.docs import PAGE, metrics_page

    assert PAGE.read_text() == metrics_page(), "run: python -m hetsim.simulator.docs"


def test_timer_orders_like_a_timeout() -> None:
    from hetsim.simulator.engine import ClockLimit, InvariantViolation, Timer

    def trace(use_timer: bool) -> list[tuple[float, str]]:
        sim = Simulation(0)
        env, seen = sim.env, []
        a = Timer(sim, lambda _e: seen.append((env.now, "a")))
        for delay, name in ((2.0, "t1"), (1.0, "t2"), (2.0, "t3")):
            if use_timer and name == "t3":
                a.start(delay)  # same time as t1, scheduled after it: fires after it
            else:
                env.timeout(delay).callbacks.append(lambda _e, n=name: seen.append((env.now, n)))
        sim.run()
        return seen

    assert trace(True) == [(1.0, "t2"), (2.0, "t1"), (2.0, "a")]
    sim = Simulation(0)
    t = Timer(sim, lambda _e: None)
    sim.env.timeout(5.0)
    sim.run(until=3.0)
    t.start_at(1.0)  # passed: fires now, with delay max(0, 1 - 3) = 0
    assert t.pending
    with pytest.raises(InvariantViolation):
        t.start(1.0)  # pending at most once
    sim.run()
    assert not t.pending and sim.now == 5.0
    sched = Simulation(0)
    with pytest.raises(ValueError):
        Timer(sched, lambda _e: None).start(-1.0)
    with pytest.raises(ClockLimit):
        Timer(sched, lambda _e: None).start(float("nan"))


def test_alarm_fires_at_the_exact_time_in_timeout_order_and_cancels() -> None:
    from hetsim.simulator.engine import Alarm, ClockLimit

    sim = Simulation(0)
    env, seen = sim.env, []
    at = 0.1 + 0.2 + 0.7  # a sum of step times: 1.0000000000000002, not 1.0
    env.timeout(1.0).callbacks.append(lambda _e: seen.append((env.now, "t")))
    Alarm(sim, at, lambda _e: seen.append((env.now, "alarm")))
    env.timeout(at).callbacks.append(lambda _e: seen.append((env.now, "same time, later")))
    Alarm(sim, 0.5, lambda _e: seen.append((env.now, "cancelled"))).cancel()
    assert env.peek() == 1.0  # out of the queue: the clock never stops at 0.5
    sim.run()
    assert seen == [(1.0, "t"), (at, "alarm"), (at, "same time, later")]
    with pytest.raises(ClockLimit):
        Alarm(sim, at - 0.5, lambda _e: None)  # in the past
    with pytest.raises(ClockLimit):
        Alarm(sim, float("nan"), lambda _e: None)


def test_run_sets_the_prebuilt_objects_apart_from_the_collector_and_restores() -> None:
    seen: list[int] = []

    def proc(sim: Simulation) -> Any:
        yield sim.env.timeout(1.0)
        seen.append(gc.get_freeze_count())

    assert gc.get_freeze_count() == 0
    sim = Simulation(1)
    sim.env.process(proc(sim))
    sim.run()
    assert seen[0] > 0  # frozen while the run goes
    assert gc.get_freeze_count() == 0  # and unfrozen after
    gc.freeze()  # a caller's own freeze is left as it is (objects freed meanwhile leave it)
    try:
        sim = Simulation(1)
        sim.env.process(proc(sim))
        sim.run()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
