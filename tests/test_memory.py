"""Memory pools: per-tag accounting, OutOfMemory before any change, counters, invariants."""

from collections.abc import Generator
from typing import Any

import pytest
import simpy

from hetsim.devices.memory import MemoryPool, OutOfMemory
from hetsim.simulator.engine import InvariantViolation, Simulation

GIB = 1 << 30


def test_allocate_and_free_by_tag() -> None:
    sim = Simulation()
    pool = MemoryPool(sim, "gpu0/hbm", 80 * GIB)
    pool.allocate("weights", 14 * GIB)
    pool.allocate("kv", 10 * GIB)
    pool.allocate("kv", 6 * GIB)
    # 14 + 10 + 6 = 30 GiB used, 80 - 30 = 50 GiB free
    assert pool.used_bytes == 30 * GIB
    assert pool.free_bytes == 50 * GIB
    assert pool.usage_by_tag() == {"weights": 14 * GIB, "kv": 16 * GIB}
    assert pool.free("kv", 4 * GIB) == 4 * GIB
    assert pool.usage_by_tag()["kv"] == 12 * GIB
    assert pool.free("kv") == 12 * GIB  # None frees the whole tag
    assert pool.usage_by_tag() == {"weights": 14 * GIB}
    assert pool.peak_bytes == 30 * GIB  # the high-water mark stays
    sim.check_invariants()


def test_out_of_memory_changes_nothing() -> None:
    sim = Simulation()
    pool = MemoryPool(sim, "host", 100)
    pool.allocate("a", 60)
    assert pool.can_fit(40) and not pool.can_fit(41)
    with pytest.raises(OutOfMemory) as err:
        pool.allocate("b", 41)  # 60 + 41 = 101 > 100
    e = err.value
    assert (e.pool, e.tag, e.requested_bytes, e.free_bytes) == ("host", "b", 41, 40)
    assert "host" in str(e) and "'b'" in str(e) and "41" in str(e) and "40" in str(e)
    assert pool.used_bytes == 60
    assert pool.usage_by_tag() == {"a": 60}
    pool.allocate("b", 40)  # exactly full is fine
    assert pool.free_bytes == 0


def test_free_more_than_held_is_an_error() -> None:
    sim = Simulation()
    pool = MemoryPool(sim, "hbm", 100)
    pool.allocate("a", 10)
    with pytest.raises(ValueError):
        pool.free("a", 11)
    with pytest.raises(ValueError):
        pool.free("missing", 1)
    with pytest.raises(ValueError):
        pool.allocate("a", -1)
    assert pool.used_bytes == 10


def test_counter_sample_on_every_change() -> None:
    sim = Simulation()
    pool = MemoryPool(sim, "hbm", 1000)

    def proc() -> Generator[simpy.Event, Any, None]:
        pool.allocate("x", 300)
        yield sim.env.timeout(2.0)
        pool.allocate("y", 200)
        yield sim.env.timeout(1.0)
        pool.free("x")

    sim.env.process(proc())
    sim.run()
    s = sim.recorder.spans
    samples = [
        (t, v)
        for t, tr, v in zip(s.counter_time_s, s.counter_track, s.counter_value, strict=True)
        if tr == "hbm"
    ]
    # 300 at t=0, 300+200=500 at t=2, 500-300=200 at t=3
    assert samples == [(0.0, 300), (2.0, 500), (3.0, 200)]
    assert sim.recorder.tracks["hbm"].kind == "memory"


def test_invariant_catches_corruption() -> None:
    sim = Simulation()
    pool = MemoryPool(sim, "hbm", 100)
    pool.allocate("a", 50)
    pool._used_bytes = 150  # simulate a bug that bypassed allocate()
    with pytest.raises(InvariantViolation):
        sim.check_invariants()


def test_out_of_memory_survives_a_simpy_process_and_pickle() -> None:
    """SimPy re-raises an exception that escapes a process as type(e)(*e.args)."""
    import pickle

    sim = Simulation()
    pool = MemoryPool(sim, "hbm", 100)

    def proc():  # type: ignore[no-untyped-def]
        yield sim.env.timeout(1.0)
        pool.allocate("big", 200)

    sim.env.process(proc())
    with pytest.raises(OutOfMemory) as err:
        sim.run()
    assert err.value.requested_bytes == 200 and err.value.free_bytes == 100
    again = pickle.loads(pickle.dumps(err.value))
    assert (
        str(again)
        == str(err.value)
        == ("out of memory in pool 'hbm': tag 'big' asked for 200 bytes, only 100 bytes free")
    )
