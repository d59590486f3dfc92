"""ZB-H1 (zero-bubble pipeline, Qi et al., ICLR 2024): bubble, memory, conservation."""

from __future__ import annotations

import numpy as np
import pytest

import hetsim
from hetsim.schedulers.training.one_f_one_b import OneFOneB, OneFOneBParams
from hetsim.schedulers.training.zero_bubble import ZeroBubbleH1, ZeroBubbleH1Params
from hetsim.simulator.engine import InvariantViolation
from hetsim.workloads.training.pipeline_sim import (
    bubble_fraction,
    peak_in_flight,
    run_schedule,
    unit_conservation,
)
from hetsim.workloads.training.view import PipelineView, Unit
from tests.conftest import ROOT

RNG = np.random.default_rng(0)
ZB = ZeroBubbleH1(ZeroBubbleH1Params(), RNG)
ONE = OneFOneB(OneFOneBParams(), RNG)


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 4), (4, 8), (8, 16), (6, 9)])
def test_zb_h1_bubble_is_a_third_of_1f1b_at_equal_unit_times(p: int, m: int) -> None:
    """F = B = W = 1 (1F1B's backward = B + W = 2): 1F1B idles (p-1)(F+B+W) = 3(p-1) of a
    makespan 3m + 3(p-1); ZB-H1 idles (p-1)(F+B-W) = p-1 of 3m + p - 1 (paper Sec. 3.1)."""
    zb = ZB.schedule(PipelineView(p, m))
    s, e = run_schedule(zb, p, lambda d, u: 1.0, 0.0)
    assert max(max(x) for x in e) == pytest.approx(3 * m + p - 1)
    assert bubble_fraction(s, e) == pytest.approx(np.full(p, (p - 1) / (3 * m + p - 1)))
    one = ONE.schedule(PipelineView(p, m))
    _, e1 = run_schedule(one, p, lambda d, u: 1.0 if u.kind == "F" else 2.0, 0.0)
    assert max(max(x) for x in e1) == pytest.approx(3 * (m + p - 1))


@pytest.mark.parametrize(("p", "m"), [(4, 8), (8, 16), (4, 4)])
def test_zb_h1_holds_1f1b_peak_of_in_flight_micro_batches(p: int, m: int) -> None:
    """Activations are held from F to W; stage i delays i Ws on top of 1F1B's p-i
    in flight, so every stage peaks at p micro-batches, 1F1B's first-stage peak."""
    zb, one = ZB.schedule(PipelineView(p, m)), ONE.schedule(PipelineView(p, m))
    peaks_zb = [peak_in_flight(o, lambda u: 1.0) for o in zb.order]
    peaks_one = [peak_in_flight(o, lambda u: 1.0) for o in one.order]
    assert peaks_one == [min(p - i, m) for i in range(p)]
    assert peaks_zb == [min(p, m)] * p
    assert max(peaks_zb) == max(peaks_one)


def test_conservation_needs_one_w_after_each_b() -> None:
    p, m = 2, 2
    zb = ZB.schedule(PipelineView(p, m))
    s, e = run_schedule(zb, p, lambda d, u: 1.0, 0.0)
    unit_conservation("zb", zb.order, s, e, m, sum(len(o) for o in zb.order))
    # drop stage 1's last W: a B without W
    cut = [list(o) for o in zb.order]
    i = max(k for k, u in enumerate(cut[1]) if u.kind == "W")
    del cut[1][i]
    s2 = [list(x) for x in s]
    e2 = [list(x) for x in e]
    del s2[1][i], e2[1][i]
    with pytest.raises(InvariantViolation, match="B without W"):
        unit_conservation("zb", cut, s2, e2, m, sum(len(o) for o in cut))
    # a W timed before its B ends
    order = [(Unit("F", 0), Unit("B", 0), Unit("W", 0))]
    with pytest.raises(InvariantViolation, match="weight gradient before its backward"):
        unit_conservation("zb", order, [[0.0, 1.0, 1.5]], [[1.0, 2.0, 2.5]], 1, 3)


def test_training_parallel_splits_backward_and_keeps_its_work() -> None:
    """A small GPT on TP 2 x PP 4: ZB-H1 moves the weight-gradient GEMMs out of B
    into W (B + W = 1F1B's B), shrinks the pipeline bubble and keeps the activations' peak over stages."""
    base = ROOT / "scenarios" / "megatron-gpt.yaml"
    over = {"workload.model": {"name": "g", "layers": 8, "hidden": 2048, "heads": 16,
                               "ffn": 8192, "vocab": 32000, "gated_mlp": False},
            "workload.tp": 2, "workload.pp": 4, "workload.dp": 1, "workload.global_batch": 8,
            "outputs.spans": False}  # fmt: skip
    one = hetsim.run(base, overrides={**over, "policies.schedule": "1f1b"})
    zb = hetsim.run(base, overrides={**over, "policies.schedule": "zb-h1"})
    u1, uz = one.tables["units"], zb.tables["units"]
    assert set(uz["kind"]) == {"F", "B", "W"} and set(u1["kind"]) == {"F", "B"}
    work = {k: float((g["end_s"] - g["start_s"]).sum()) for k, g in uz.groupby("kind")}
    work1 = {k: float((g["end_s"] - g["start_s"]).sum()) for k, g in u1.groupby("kind")}
    assert work["F"] == pytest.approx(work1["F"])
    assert work["B"] + work["W"] == pytest.approx(work1["B"])
    s1, sz = one.summary.iloc[0], zb.summary.iloc[0]
    assert sz["pp_bubble_s"] < s1["pp_bubble_s"]
    # the activations' peak over stages is 1F1B's (every stage now reaches the first's);
    # the last stage, which also holds the logits, peaks higher than under 1F1B
    a1 = one.tables["stage_memory"]["activations_bytes"]
    az = zb.tables["stage_memory"]["activations_bytes"]
    assert az.max() == pytest.approx(a1.max())
    assert az.iloc[-1] > a1.iloc[-1]


def test_zb_h1_refused_where_not_priced() -> None:
    with pytest.raises(Exception, match="split backward"):
        hetsim.run(ROOT / "scenarios" / "llama3-train.yaml",
                   overrides={"policies.schedule": "zb-h1", "workload.pp": 2,
                              "workload.zero": 3})  # fmt: skip


def _strag(slow: dict, **over: object) -> object:
    base = ROOT / "scenarios" / "megatron-gpt.yaml"
    o = {"workload.model": {"name": "g", "layers": 4, "hidden": 1024, "heads": 8,
                            "ffn": 4096, "vocab": 32000, "gated_mlp": False},
         "workload.tp": 2, "workload.pp": 1, "workload.dp": 2, "workload.global_batch": 8,
         "outputs.spans": False, "workload.slow_ranks": slow, **over}  # fmt: skip
    return hetsim.run(base, overrides=o)


def test_straggler_replica_is_simulated_apart_and_sets_the_pace() -> None:
    """TP 2 x DP 2, no PP: rank 3 (TP rank 1 of replica 1) at 1.5x makes replica 1's whole
    pipeline 1.5x longer (its TP partner waits on every layer's collective); replica 0 is
    simulated too, and the step waits for the slower one."""
    even, slow = _strag({}), _strag({3: 1.5})
    se, ss = even.summary.iloc[0], slow.summary.iloc[0]
    assert se["replicas_simulated"] == 1 and ss["replicas_simulated"] == 2
    base_end = float(even.tables["units"]["end_s"].max())
    assert float(slow.tables["units"]["end_s"].max()) == pytest.approx(1.5 * base_end)
    assert ss["iteration_s"] >= se["iteration_s"] + 0.5 * base_end * (1 - 1e-9)
    # FSDP's per-layer collectives lock the replicas: one simulated, at the slowest pace
    fsdp = _strag({3: 1.5}, **{"workload.zero": 3}).summary.iloc[0]
    assert fsdp["replicas_simulated"] == 1
    with pytest.raises(Exception, match=r"outside 0\.\.3"):
        _strag({4: 2.0})
