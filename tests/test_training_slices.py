"""SlimPipe's workload redistribution (reconstruction): pairs even out, exchange bytes by
hand, attention conserved, the partner device's time and memory simulated."""

from __future__ import annotations

import pytest

import hetsim
from hetsim.workloads.training.pipeline_sim import Helper, run_schedule
from hetsim.workloads.training.slice_exchange import exposed_s, partner, redistribution
from hetsim.workloads.training.view import Schedule, Unit
from tests.conftest import ROOT

LL = ROOT / "scenarios" / "llama3-train.yaml"


@pytest.mark.parametrize("n", [2, 5, 16])
def test_each_pair_ends_at_the_mean_attention(n: int) -> None:
    ex = redistribution(n)
    for j in range(n):
        mirror = n - 1 - j
        w, w_mirror = 2 * j + 1, 2 * mirror + 1  # causal work of uniform slices, 1/n^2 units
        heavy, light = (w, w_mirror) if w >= w_mirror else (w_mirror, w)
        moved = ex[j].moved * heavy
        assert heavy - moved == pytest.approx(n) and light + moved == pytest.approx(n)
        assert ex[j] == ex[mirror] or ex[j].heavy != ex[mirror].heavy
    assert sum(e.heavy for e in ex if e.moved) == n // 2
    assert exposed_s(3.0, 1.0, "attention") == 2.0 and exposed_s(3.0, 5.0, "attention") == 0.0
    assert exposed_s(3.0, 5.0, "none") == 3.0


def _run(balance: str, **more: object) -> dict:
    model = {"layers": 4, "hidden": 1024, "heads": 16, "kv_heads": 4, "ffn": 4096,
             "vocab": 32000}  # fmt: skip
    o = {"workload.model": model, "workload.seq_len": 4096, "workload.micro_batch": 1,
         "workload.global_batch": 4, "workload.dp": 1, "workload.tp": 2, "workload.pp": 2,
         "workload.zero": 0, "workload.recompute": "none",
         "policies.schedule": {"name": "slimpipe", "slices": 2, "balance": balance, **more}}  # fmt: skip
    return hetsim.run(LL, overrides=o).summary.iloc[0].to_dict()


def test_two_slice_exchange_bytes_by_hand_and_attention_conserved() -> None:
    red = _run("redistribute", exchange_overlap="none")
    # n = 2: slice 1 does 3/4 of the causal attention, slice 0 1/4; 1/3 of slice 1's heads
    # move. Per rank (TP 2): 8 query heads, 2 K/V heads of 64, t = 2048 tokens, 2 bytes,
    # context 2 slices. Forward: Q and O (2 x 8) plus K and V of 2 slices (2 x 2 x 2);
    # backward: Q, O, dO, dQ (4 x 8) plus K, V, dK, dV of 2 slices (4 x 2 x 2).
    unit = 2048 * 64 * 2 / 3
    assert red["exchange_bytes_per_layer"] == pytest.approx(unit * ((16 + 8) + (32 + 16)))
    assert red["exchange_exposed_s"] > 0
    # the work only moves: compute of the critical stage is the uniform slices' total
    none = _run("none")
    assert red["compute_s"] == pytest.approx(none["compute_s"], rel=1e-9)
    assert none["exchange_bytes_per_layer"] == 0.0 and none["exchange_exposed_s"] == 0.0


def _two_stage(priority: str) -> tuple[list[list[float]], list[list[float]], list]:
    # 2 stages, 2 microbatches, every unit 10 s, no P2P time. Stage 1's forward of
    # microbatch 0 hands 3 s of work to stage 0 (1 s to send, 1 s to return)
    order = ((Unit("F", 0), Unit("F", 1), Unit("B", 0), Unit("B", 1)),
             (Unit("F", 0), Unit("B", 0), Unit("F", 1), Unit("B", 1)))  # fmt: skip
    sched = Schedule(order, partner_priority=priority)  # type: ignore[arg-type]

    def helper(d: int, u: Unit) -> Helper | None:
        return Helper(0, 1.0, 3.0, 1.0, 5e9) if (d, u) == (1, Unit("F", 0)) else None

    ran: list = []
    starts, ends = run_schedule(sched, 2, lambda d, u: 10.0, 0.0, helper, ran, priority)
    return starts, ends, ran


def test_partner_runs_the_moved_work_between_its_layers_or_after_its_unit() -> None:
    # interleave: stage 0 runs F1 over [10, 20]; the helper arrives at 11 and runs there
    # [11, 14], so F1 ends at 23; stage 1's F0 ends at max(20, 14 + 1) = 20, its B0 runs
    # [20, 30] and its F1 waits for stage 0's F1 (23) and for B0: [30, 40], B1 [40, 50];
    # stage 0's B0 after stage 1's B0: [30, 40], B1 after stage 1's B1: [50, 60]
    starts, ends, ran = _two_stage("interleave")
    assert ends == [[10, 23, 40, 60], [20, 30, 40, 50]]
    assert starts == [[0, 10, 30, 50], [10, 20, 30, 40]]
    assert ran == [[(11.0, 14.0, 5e9)], []]
    # queue: the helper waits for F1 to end, [20, 23]; F0 on stage 1 ends at 23 + 1 = 24,
    # then B0 [24, 34], F1 [34, 44], B1 [44, 54]; stage 0: B0 [34, 44], B1 [54, 64]
    starts, ends, ran = _two_stage("queue")
    assert ends == [[10, 20, 44, 64], [24, 34, 44, 54]]
    assert ran == [[(20.0, 23.0, 5e9)], []]


def test_partner_is_the_stage_running_the_mirror_slice() -> None:
    # slice j's mirror n - 1 - j runs 2j + 1 - n stages further at the same moment
    assert [partner(0, j, 16, 8) for j in range(8, 16)] == [1, 3, 5, 7, 1, 3, 5, 7]
    assert partner(6, 8, 16, 8) == 7 and partner(7, 8, 16, 8) == 0  # past the last stage
    assert partner(0, 1, 2, 1) == 0  # one stage: no partner, the work stays


def test_redistribution_moves_work_without_creating_it() -> None:
    # the partner's time is simulated, not assumed free: every stage's own work plus the
    # moved work it ran adds up to the uniform slices' work; the iteration gains from the
    # redistribution but less than a free partner would give (an even split of 1F1B's
    # work with no waiting: equal-cost slices' bubble)
    sp = ROOT / "scenarios" / "slimpipe.yaml"
    base = {"workload.model.seq_len": 524288, "workload.recompute": "full"}
    got = {}
    for bal in ("redistribute", "none", "equal-cost"):
        res = hetsim.run(sp, overrides={**base, "policies.schedule.balance": bal})
        got[bal] = res.summary.iloc[0]
    red, uni, eq = got["redistribute"], got["none"], got["equal-cost"]
    busy = lambda r: (1 - r["bubble"]) * r["iteration_s"]  # noqa: E731
    assert busy(red) == pytest.approx(busy(uni), rel=1e-9)
    assert red["iteration_s"] < uni["iteration_s"]
    assert red["bubble"] > 2 * eq["bubble"]
