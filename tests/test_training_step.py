"""The training-parallel step: hand-worked communication, memory, bubble and overlap."""

from __future__ import annotations

import pytest

import hetsim
from hetsim.devices.catalogue import device_spec, fabric_spec
from hetsim.devices.collectives import collective_time_s
from hetsim.workloads.training.parallel_comm import Fabrics, Layout
from hetsim.workloads.training.step import bucket_tail, fsdp_pass, layer_split
from hetsim.workloads.training.step_cost import (
    DenseModel,
    MicroBatchCost,
    StepKnobs,
    megatron_flops_per_token,
)
from tests.conftest import ROOT

LL = ROOT / "scenarios" / "llama3-train.yaml"
GPT = DenseModel("gpt", 8, 1024, 16, 16, 4096, 32000, gated_mlp=False)
NV = fabric_spec("h100-nvswitch")
FAB = Fabrics(NV, fabric_spec("h100-ib-ndr-multinode"), 400e9, 8)


def _cost(tp: int = 2, **knobs: object) -> MicroBatchCost:
    kn = StepKnobs(**{"micro_batch": 2, "seq_len": 1024, **knobs})  # type: ignore[arg-type]
    return MicroBatchCost(device_spec("h100-sxm"), GPT, Layout(tp=tp), FAB, kn)


def _run(**over: object) -> dict:
    o = {
        "workload.model": {
            "layers": 8,
            "hidden": 1024,
            "heads": 16,
            "ffn": 4096,
            "vocab": 32000,
            "gated_mlp": False,
        },
        "workload.seq_len": 1024,
        "workload.micro_batch": 1,
        "workload.recompute": "none",
    }
    o.update({k if k.startswith(("workload", "policies")) else f"workload.{k}": v
              for k, v in over.items()})  # fmt: skip
    return hetsim.run(LL, overrides=o).summary.iloc[0].to_dict()


def test_tp_all_reduce_two_forward_two_backward_of_bsh_bytes() -> None:
    c = _cost(tp=2, sequence_parallel=False)
    one = collective_time_s("all_reduce", 2, 2 * 1024 * 1024 * 2, NV)  # b s h x 2 bytes
    assert c.layer["fwd_tp"] == pytest.approx(2 * one)
    assert c.layer["bwd_tp"] == pytest.approx(2 * one)
    # sequence parallelism: each all-reduce becomes reduce-scatter + all-gather
    sp = _cost(tp=2, sequence_parallel=True)
    rs = collective_time_s("reduce_scatter", 2, 2 * 1024 * 1024 * 2, NV)
    ag = collective_time_s("all_gather", 2, 2 * 1024 * 1024 * 2, NV)
    assert sp.layer["fwd_tp"] == pytest.approx(2 * (rs + ag))


def test_sequence_parallel_halves_the_non_tensor_parallel_activations_at_tp2() -> None:
    sbh = 2 * 1024 * 1024
    off = _cost(tp=2, sequence_parallel=False).layer_activation_bytes()
    on = _cost(tp=2, sequence_parallel=True).layer_activation_bytes()
    # 8 sbh outside the TP region (no dropout) is split over tp = 2; the rest is unchanged
    assert off - on == pytest.approx(8 * sbh / 2)
    inside = (8 * sbh + 4 * 2 * 1024 * 4096) / 2
    assert on == pytest.approx(8 * sbh / 2 + inside)


def test_bucketed_reduction_hidden_when_backward_long_exposed_when_short() -> None:
    grads = [1.0] * 10  # ten layers of one unit each, buckets of two
    comm = lambda n: 0.1 * n  # noqa: E731 - 0.2 s a bucket, 1 s in all
    long_ready = [1.0 * (i + 1) for i in range(10)]  # backward 10 s
    end = bucket_tail(long_ready, grads, 2.0, comm, None)
    assert end == pytest.approx(10.0 + 0.2)  # only the last bucket is exposed
    short_ready = [0.01 * (i + 1) for i in range(10)]  # backward 0.1 s
    end = bucket_tail(short_ready, grads, 2.0, comm, None)
    assert end == pytest.approx(0.02 + 1.0)  # the stream never idles after bucket 1
    # without overlap all of it is exposed
    assert bucket_tail(long_ready, grads, 2.0, comm, 10.0) == pytest.approx(11.0)


def test_dp_exposure_in_the_step_follows_the_backward_length() -> None:
    base = {"dp": 64, "zero": 0, "micro_batch": 1, "global_batch": 64}
    short = _run(**{**base, "node_nic_Bps": 1e9, "seq_len": 256})
    long = _run(**{**base, "seq_len": 8192, "micro_batch": 4, "global_batch": 256})
    assert short["dp_exposed_s"] > 0.5 * short["iteration_s"]
    assert long["dp_exposed_s"] < 0.05 * long["iteration_s"]


def test_zero3_states_are_16_bytes_per_param_over_n() -> None:
    s = _run(dp=8, zero=3)
    params = 8 * (4 * 1024 * 1024 + 2 * 1024 * 4096) + 2 * 32000 * 1024
    states = s["params_bytes"] + s["grads_bytes"] + s["optimizer_bytes"]
    assert states == pytest.approx(16 * params / 8)
    z0 = _run(dp=8, zero=0)
    assert z0["params_bytes"] + z0["grads_bytes"] + z0["optimizer_bytes"] == pytest.approx(
        16 * params
    )


@pytest.mark.parametrize(("chunks", "m"), [(1, 8), (2, 8)])
def test_pipeline_bubble_closed_forms(chunks: int, m: int) -> None:
    p = 4
    pol = "1f1b" if chunks == 1 else {"name": "interleaved", "chunks": chunks}
    # vocab 8: embedding and head negligible, so stages are equal; hidden 8192: the
    # activation sends are small beside a layer's compute
    wide = {"layers": 8, "hidden": 8192, "heads": 64, "ffn": 32768, "vocab": 8}
    s = _run(**{"workload.model": wide, "pp": p, "dp": 1, "global_batch": m,
                "policies.schedule": pol, "tp": 1})  # fmt: skip
    busy = s["iteration_s"] - s["pp_bubble_s"] - s["optimizer_s"]
    bubble = s["pp_bubble_s"] / (s["pp_bubble_s"] + busy)
    expect = (p - 1) / (chunks * m + p - 1)
    assert bubble == pytest.approx(expect, rel=0.05)


def test_p2p_bytes_of_interleaved_schedules() -> None:
    p, m, v = 4, 8, 2
    s = _run(**{"pp": p, "dp": 1, "global_batch": m, "tp": 2,
                "policies.schedule": {"name": "interleaved", "chunks": v}})  # fmt: skip
    per_send = 1024 * 1024 * 2 / 2  # s b h x 2 bytes / tp (sequence parallel)
    assert s["p2p_bytes"] == pytest.approx(2 * m * (p * v - 1) * per_send)


def test_megatron_formula_matches_the_gpt_closed_form() -> None:
    m = DenseModel("g", 24, 2048, 16, 16, 8192, 50000, gated_mlp=False)
    n, h, s, v = 24, 2048, 2048, 50000
    assert megatron_flops_per_token(m, s) == pytest.approx(
        72 * n * h * h * (1 + s / (6 * h) + v / (12 * n * h))
    )


def test_fsdp_pass_compute_bound_and_comm_bound() -> None:
    # compute-bound: only the first gather is exposed
    dur, exposed = fsdp_pass(10, 1.0, 0.1, 0.0, 1)
    assert dur == pytest.approx(0.1 + 10.0) and exposed == pytest.approx(0.1)
    # comm-bound: the gathers run back to back, the last layer's compute trails them
    dur, _ = fsdp_pass(10, 0.1, 1.0, 0.0, 1)
    assert dur == pytest.approx(10 * 1.0 + 0.1)
    # backward with reduce-scatter: gather + reduce per layer on one stream
    dur, _ = fsdp_pass(4, 0.01, 1.0, 1.0, 1)
    assert dur == pytest.approx(8.0, rel=0.01)


def test_breakdown_sums_to_the_step_and_oom_names_the_stage() -> None:
    s = _run(pp=2, dp=4, zero=1, global_batch=8)
    parts = [
        "compute_s",
        "recompute_s",
        "tp_exposed_s",
        "cp_exposed_s",
        "fsdp_exposed_s",
        "pp_bubble_s",
        "dp_exposed_s",
        "optimizer_s",
        "param_gather_exposed_s",
    ]
    assert sum(s[k] for k in parts) == pytest.approx(s["iteration_s"], rel=1e-9)
    assert all(s[k] >= -1e-12 for k in parts)
    big = _run(**{"workload.model": "llama-3-70b", "dp": 1, "seq_len": 8192})
    assert big["oom"] == 1 and "stage 0" in big["oom_detail"]
    assert "optimizer" in big["oom_detail"]


def test_full_recompute_charges_a_forward_and_saves_activations() -> None:
    none, full = _run(recompute="none"), _run(recompute="full")
    assert full["recompute_s"] > 0 and none["recompute_s"] == 0
    assert full["activations_bytes"] < none["activations_bytes"]
    assert full["hfu"] == pytest.approx(full["mfu"] * 4 / 3)


def test_layer_split_puts_the_remainder_in_the_middle() -> None:
    assert layer_split(126, 64) == [1] + [2] * 62 + [1]
    assert layer_split(70, 12) == [5] + [6] * 10 + [5]
    assert layer_split(32, 4) == [8] * 4
    with pytest.raises(ValueError, match="fewer"):
        layer_split(3, 4)


def test_bad_input_names_the_field() -> None:
    with pytest.raises(Exception, match="global_batch"):
        _run(dp=3, global_batch=16)


def test_training_pipeline_p2p_bytes_of_interleaved_schedules() -> None:
    p, m, v, seq, h, tp = 4, 8, 2, 4096, 1024, 2
    model = {"layers": 8, "hidden": h, "heads": 16, "ffn": 4096, "vocab": 32000,
             "seq_len": seq, "micro_batch": 1}  # fmt: skip
    over = {"workload.model": model, "workload.stages": p, "workload.micro_batches": m,
            "workload.tp": tp, "policies.schedule": {"name": "interleaved", "chunks": v}}  # fmt: skip
    s = hetsim.run(ROOT / "scenarios" / "slimpipe.yaml", overrides=over).summary.iloc[0]
    # every forward but the last virtual stage's and every backward but the first's sends
    # s b h / tp bf16 values: 2 m (p v - 1) sends
    assert s["p2p_bytes"] == 2 * m * (p * v - 1) * (2 * seq * h // tp)


def test_sliced_schedule_sends_every_slice_and_holds_kv_under_recompute() -> None:
    p, m, n = 4, 4, 4
    s = _run(**{"pp": p, "dp": 1, "global_batch": m, "tp": 2, "recompute": "full",
                "policies.schedule": {"name": "slimpipe", "slices": n, "balance": "none"}})  # fmt: skip
    # n uniform slices together send one sequence: 2 m (p - 1) sequences of s b h / tp
    assert s["p2p_bytes"] == pytest.approx(2 * m * (p - 1) * 1024 * 1024 * 2 / 2)
    c = MicroBatchCost(device_spec("h100-sxm"), GPT, Layout(tp=2), FAB,
                       StepKnobs(1, 1024, recompute="full"), slice_lo=0.25, slice_hi=0.5)  # fmt: skip
    t = 256  # the slice's tokens
    # the layer input (sharded by SP) plus the slice's K and V for later slices
    assert c.layer_activation_bytes() == pytest.approx(2 * t * 1024 / 2 + 2 * t * 8 * 64 * 2)
    # its attention covers the causal pairs of its rows: (0.5^2 - 0.25^2) / 2 of s^2
    full = MicroBatchCost(device_spec("h100-sxm"), GPT, Layout(tp=2), FAB, StepKnobs(1, 1024))
    attn = lambda x: x.layer_flops()[0] - 2.0 * x.tokens * GPT.params_per_layer / 2  # noqa: E731
    assert attn(c) == pytest.approx(attn(full) * (0.5**2 - 0.25**2))
