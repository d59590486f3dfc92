"""Expert parallelism in the training-parallel step: all-to-all bytes, expert GEMMs,
expert weights over the EP ranks, capacity factor (hand-worked)."""

from __future__ import annotations

import dataclasses

import pytest

import hetsim
from hetsim.devices.catalogue import device_spec, fabric_spec
from hetsim.devices.collectives import collective_time_s
from hetsim.workloads.training.parallel_comm import Fabrics, Layout
from hetsim.workloads.training.step_cost import (
    DenseModel,
    MicroBatchCost,
    StepKnobs,
    megatron_flops_per_token,
)
from tests.conftest import ROOT

LL = ROOT / "scenarios" / "llama3-train.yaml"
NV = fabric_spec("h100-nvswitch")
FAB = Fabrics(NV, fabric_spec("h100-ib-ndr-multinode"), 400e9, 8)
#: 8 routed experts, top 2, each as wide as the dense FFN (a small Mixtral)
MOE = DenseModel("moe", 4, 1024, 16, 16, 2048, 32000, True, False, 8, 2, 2048)
B, S = 2, 1024


def _cost(layout: Layout, **knobs: object) -> MicroBatchCost:
    kn = StepKnobs(**{"micro_batch": B, "seq_len": S, **knobs})  # type: ignore[arg-type]
    return MicroBatchCost(device_spec("h100-sxm"), MOE, layout, FAB, kn, moe_layer=True)


def test_ep_all_to_all_bytes_per_layer_two_forward_two_backward() -> None:
    c = _cost(Layout(dp=8, ep=8))
    per = B * S * 2 * 1024 * 2  # b s tokens x top 2 copies x h x 2 bytes
    assert c.ep_bytes() == pytest.approx(per)
    one = collective_time_s("all_to_all", 8, per, NV)
    assert c.layer["fwd_ep"] == pytest.approx(2 * one)  # dispatch + combine
    assert c.layer["bwd_ep"] == pytest.approx(2 * one)  # their gradients
    # sequence-parallel TP 2: each rank dispatches only its half of the tokens
    assert _cost(Layout(tp=2, dp=4, ep=8)).ep_bytes() == pytest.approx(per / 2)
    # no expert parallelism: no all-to-all
    assert _cost(Layout(dp=8, ep=1)).layer["fwd_ep"] == 0.0


def test_expert_gemm_tokens_follow_top_k_and_capacity() -> None:
    c = _cost(Layout(dp=8, ep=4))
    g = c._expert_gemms()
    # the router on all b s tokens, then 8 / 4 = 2 local experts, each gate+up and down
    assert g[0] == (B * S, 8.0, 1024.0)
    assert len(g) == 1 + 2 * 2
    per_expert = B * S * 2 / 2  # b s k tokens over the 2 local experts (balanced)
    assert {m for m, _, _ in g[1:]} == {per_expert}
    # capacity: dropped tokens above 1.1x skip the experts; padding computes all of it
    hot = {"moe_load_imbalance": 1.5, "moe_capacity_factor": 1.1}
    assert _cost(Layout(dp=8, ep=4), **hot).routed_tokens == pytest.approx(B * S * 2 * 1.1)
    pad = {"moe_capacity_factor": 1.25, "moe_pad_to_capacity": True}
    assert _cost(Layout(dp=8, ep=4), **pad).routed_tokens == pytest.approx(B * S * 2 * 1.25)
    # dropless: the busiest rank takes the whole imbalance
    assert _cost(Layout(dp=8, ep=4), moe_load_imbalance=1.5).routed_tokens == pytest.approx(
        B * S * 2 * 1.5
    )


def test_one_expert_of_top_one_is_the_dense_mlp_plus_a_router() -> None:
    dense = DenseModel("d", 4, 1024, 16, 16, 2048, 32000)
    one = dataclasses.replace(dense, experts=1, top_k=1, expert_ffn=2048)
    kn = StepKnobs(micro_batch=B, seq_len=S)
    spec = device_spec("h100-sxm")
    d = MicroBatchCost(spec, dense, Layout(), FAB, kn)
    m = MicroBatchCost(spec, one, Layout(), FAB, kn, moe_layer=True)
    router_f = m._gemm(B * S, 1, 1024)
    assert m.layer["fwd_gemm"] == pytest.approx(d.layer["fwd_gemm"] + router_f)
    assert megatron_flops_per_token(one, S) == pytest.approx(megatron_flops_per_token(dense, S))
    # Megatron's count follows the routed experts, not how many there are
    many = dataclasses.replace(one, experts=64)
    assert megatron_flops_per_token(many, S) == pytest.approx(megatron_flops_per_token(one, S))


def _run(**over: object) -> dict:
    model = {"layers": 4, "hidden": 1024, "heads": 16, "ffn": 2048, "vocab": 32000,
             "experts": 8, "top_k": 2, "expert_ffn": 2048}  # fmt: skip
    o = {"workload.model": model, "workload.seq_len": 1024, "workload.micro_batch": 1,
         "workload.global_batch": 8, "workload.dp": 8, "workload.recompute": "none"}  # fmt: skip
    o.update({f"workload.{k}": v for k, v in over.items()})
    return hetsim.run(LL, overrides=o).summary.iloc[0].to_dict()


def test_expert_weights_shard_over_ep_ranks_and_states_over_expert_dp() -> None:
    expert = 3 * 1024 * 2048
    one = _run(ep=1, zero=0)
    four = _run(ep=4, zero=0)
    # each rank keeps 2 of the 8 experts of each of the 4 layers (16-bit weights)
    assert one["params_bytes"] - four["params_bytes"] == pytest.approx(4 * 6 * expert * 2)
    assert four["ep_bytes_per_layer"] == pytest.approx(4 * 1024 * 2 * 1024 * 2)
    assert four["ep_exposed_s"] > 0 and one["ep_exposed_s"] == 0
    # ZeRO-1: optimizer states of the experts are sharded over the 8 / 4 = 2 ranks that
    # hold the same experts; the dense weights' over all 8
    z1 = _run(ep=4, zero=1)
    dense = 4 * (4 * 1024 * 1024 + 1024 * 8) + 2 * 32000 * 1024
    assert z1["optimizer_bytes"] == pytest.approx(12 * (dense / 8 + 4 * 2 * expert / 2))


def test_bad_ep_names_the_field() -> None:
    with pytest.raises(Exception, match="ep"):
        _run(ep=3)


def test_leading_dense_layers_keep_the_dense_mlp() -> None:
    model = {"layers": 4, "hidden": 1024, "heads": 16, "ffn": 4096, "vocab": 32000,
             "experts": 8, "top_k": 2, "expert_ffn": 2048, "dense_layers": 2}  # fmt: skip
    s = _run(**{"model": model, "ep": 4, "zero": 0})
    attn = 4 * 1024 * 1024
    dense = attn + 3 * 1024 * 4096
    moe = attn + 1024 * 8 + 2 * 3 * 1024 * 2048  # router and 8 / 4 local experts
    assert s["params_bytes"] == pytest.approx(2 * (2 * dense + 2 * moe + 2 * 32000 * 1024))
