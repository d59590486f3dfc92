"""torchtitan's op-level selective activation checkpointing (``recompute: op``) and Ulysses
context parallelism (``cp_comm: ulysses``), by hand."""

from __future__ import annotations

import pytest

from hetsim.devices.catalogue import device_spec, fabric_spec
from hetsim.workloads.training.parallel_comm import Fabrics, Layout
from hetsim.workloads.training.step_cost import DenseModel, MicroBatchCost, StepKnobs

GPT = DenseModel("gpt", 8, 1024, 16, 16, 4096, 32000, gated_mlp=False)
FAB = Fabrics(fabric_spec("h100-nvswitch"), fabric_spec("h100-ib-ndr-multinode"), 400e9, 8)


def _cost(recompute: str) -> MicroBatchCost:
    kn = StepKnobs(micro_batch=2, seq_len=1024, recompute=recompute)  # type: ignore[arg-type]
    return MicroBatchCost(device_spec("h100-sxm"), GPT, Layout(), FAB, kn)


def test_op_level_keeps_every_other_matmul_output_and_the_attention_output() -> None:
    t, h = 2 * 1024, 1024
    op = _cost("op")
    # matmuls wq, wk, wv, wo, fc1, fc2: wq, wv and fc1 outputs kept (16-bit), with the
    # layer input, the attention output and its fp32 log-sum-exp (16 heads)
    kept = 2 * t * h + 2 * (t * h + t * h + t * 4096) + 2 * t * h + 4 * t * 16
    assert op.layer_activation_bytes() == pytest.approx(kept)
    none = _cost("none")
    assert kept < none.layer_activation_bytes()
    # recomputed: wk, wo, fc2 and every elementwise kernel, not the attention
    again = op._gemm(t, h, h) + op._gemm(t, h, h) + op._gemm(t, h, 4096)
    assert op.layer_recompute_s() == pytest.approx(again + op.layer["fwd_elementwise"])
    assert op.layer_bwd_s() == pytest.approx(none.layer_bwd_s() + op.layer_recompute_s())
    # HFU's extra share: those three matmuls' FLOPs over the layer's forward FLOPs
    ratio = 2 * t * (h * h + h * h + h * 4096) / op.layer_flops()[0]
    assert op.recompute_flops_ratio() == pytest.approx(ratio)
    assert _cost("full").recompute_flops_ratio() == 1.0


def test_ulysses_all_to_all_bytes_and_heads_per_rank() -> None:
    from hetsim.devices.collectives import collective_time_s

    nv = fabric_spec("h100-nvswitch")
    gqa = DenseModel("gqa", 8, 1024, 16, 4, 4096, 32000, gated_mlp=False)
    kn = StepKnobs(micro_batch=1, seq_len=8192, cp_comm="ulysses")
    c = MicroBatchCost(device_spec("h100-sxm"), gqa, Layout(cp=2), FAB, kn)
    t = 8192 / 2  # the rank's tokens
    qkv, o = t * 64 * 2 * (16 + 2 * 4), t * 64 * 2 * 16  # head size 64, 16-bit
    assert c.ulysses_bytes() == pytest.approx((qkv, o))
    one = collective_time_s("all_to_all", 2, int(qkv), nv) + collective_time_s(
        "all_to_all", 2, int(o), nv
    )
    assert c.layer["fwd_cp"] == pytest.approx(one) and c.layer["bwd_cp"] == pytest.approx(one)
    # each rank runs 8 of the 16 heads on all 8192 tokens: less than all heads
    alone = MicroBatchCost(device_spec("h100-sxm"), gqa, Layout(), FAB,
                           StepKnobs(micro_batch=1, seq_len=8192))  # fmt: skip
    assert c.layer["fwd_attention"] < alone.layer["fwd_attention"]
    # K/V heads fewer than cp are sent to every rank that needs one
    c8 = MicroBatchCost(device_spec("h100-sxm"), gqa, Layout(cp=8), FAB, kn)
    assert c8.ulysses_bytes()[0] == pytest.approx(8192 / 8 * 64 * 2 * (16 + 2 * 8))
