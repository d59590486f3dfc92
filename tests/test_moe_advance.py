"""The MoE decode loop moves the clock without an event where nothing else is due
(``Simulation.advance``): the same times as one timeout per layer-step, checked on
the clock itself and on whole runs with other events interleaved."""

from __future__ import annotations

from typing import Any

import pytest

from hetsim.simulator.engine import Simulation
from tests.moe_helpers import hybrimoe_mixtral


def test_advance_moves_the_clock_only_before_the_next_event() -> None:
    sim = Simulation(0)
    env = sim.env
    env.timeout(1.0)  # another event due at t = 1
    assert sim.advance(0.25) and sim.now == 0.25
    assert sim.advance(0.5) and sim.now == 0.25 + 0.5  # the time a timeout would give
    assert not sim.advance(0.25)  # due at 1.0: the event comes first
    assert sim.now == 0.75
    assert not sim.advance(-0.1) and not sim.advance(float("nan"))
    assert not sim.advance(1e13)  # past the latest simulated time
    env.run()
    assert sim.now == 1.0
    assert sim.advance(2.0) and sim.now == 3.0  # nothing queued


def _run(tick_s: float | None) -> tuple[list[list[Any]], dict[str, Any], int]:
    sim, wl = hybrimoe_mixtral("advance", 4, 8)
    ticks = [0]
    if tick_s is not None:  # another process's events between (and at) layer ends

        def ticker() -> Any:
            while not wl.done.triggered:
                yield sim.env.timeout(tick_s)
                ticks[0] += 1

        sim.env.process(ticker())
    wl.start()
    sim.run(until=wl.done)
    wl.check()
    tables = wl._layers.column_lists() + wl._steps_tbl.column_lists()
    return tables, wl.summary(sim.now), ticks[0]


@pytest.mark.parametrize("tick_s", [1e-4, pytest.param(3.1e-3, marks=pytest.mark.slow)])
def test_a_run_with_other_events_between_its_layers_is_the_same(tick_s: float) -> None:
    alone, summary, _ = _run(None)
    mixed, mixed_summary, ticks = _run(tick_s)
    assert ticks > 10  # the ticker ran through the run, so layers ended on both paths
    assert mixed == alone and mixed_summary == summary
