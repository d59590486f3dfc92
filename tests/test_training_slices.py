"""SlimPipe's workload redistribution (reconstruction): pairs even out, exchange bytes by
hand, attention conserved."""

from __future__ import annotations

import pytest

import hetsim
from hetsim.workloads.training.slice_exchange import exposed_s, redistribution
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
