"""training-pipeline chunk prices (issue 15): ``cost_model: kernel`` is its layers' kernels
as training-parallel prices them; ``cost_model: roofline`` keeps the former figures."""

from __future__ import annotations

import numpy as np
import pytest

import hetsim
from hetsim.devices.catalogue import device_spec, fabric_spec
from hetsim.devices.precision import Precision
from hetsim.devices.roofline import op_times_s
from hetsim.workloads.training.model import layer_forward_flops
from hetsim.workloads.training.parallel_comm import Fabrics, Layout
from hetsim.workloads.training.step_cost import DenseModel, MicroBatchCost, StepKnobs
from tests.conftest import ROOT

SP = ROOT / "scenarios" / "slimpipe.yaml"
SMALL = {"layers": 4, "hidden": 512, "heads": 8, "ffn": 2048, "vocab": 32000,
         "seq_len": 4096, "micro_batch": 1, "flash_attention": True, "causal": True}  # fmt: skip


def _layer_s(lo: float, hi: float) -> tuple[float, float]:
    """(forward, backward) kernel seconds of one SMALL layer on one of 2 TP ranks, the
    ``[lo, hi)`` slice of the sequence, built here from MicroBatchCost's kernel classes."""
    inter = fabric_spec("h100-ib-ndr-multinode")
    c = MicroBatchCost(
        device_spec("h100-sxm"),
        DenseModel("m", 4, 512, 8, 8, 2048, 32000, gated_mlp=False),
        Layout(tp=2),
        Fabrics(fabric_spec("h100-nvswitch"), inter, inter.bandwidth_Bps),
        StepKnobs(micro_batch=1, seq_len=4096),
        Precision("bf16", "bf16", "bf16"),
        lo,
        hi,
    )
    fwd = c.layer["fwd_gemm"] + c.layer["fwd_attention"] + c.layer["fwd_elementwise"]
    bwd = c.layer["bwd_gemm"] + c.layer["bwd_attention"] + c.layer["bwd_elementwise"]
    return fwd, bwd


def _run(schedule: object, **more: object) -> dict:
    o = {"workload.model": SMALL, "workload.stages": 1, "workload.micro_batches": 1,
         "workload.tp": 2, "workload.recompute": "none", "policies.schedule": schedule,
         "workload.attention_kernel": "fitted", **more}  # fmt: skip
    return hetsim.run(SP, overrides=o).summary.iloc[0].to_dict()


def test_one_stage_iteration_is_its_layers_kernels() -> None:
    # one stage, one microbatch: the iteration is the chunk's forward then its backward
    f, b = _layer_s(0.0, 1.0)
    one = _run("1f1b")
    assert one["iteration_s"] == pytest.approx(4 * (f + b), rel=1e-12)
    assert one["kernel_classes"] == "attention_prefill;elementwise;gemm"
    full = _run("1f1b", **{"workload.recompute": "full"})["iteration_s"]
    assert full == pytest.approx(4 * (2 * f + b), rel=1e-12)
    # two uniform slices in series; the second attends to the first as context
    sliced = {"name": "slimpipe", "slices": 2, "balance": "none"}
    parts = [_layer_s(0.0, 0.5), _layer_s(0.5, 1.0)]
    got = _run(sliced)["iteration_s"]
    assert got == pytest.approx(4 * sum(f + b for f, b in parts), rel=1e-12)
    assert parts[1][0] > parts[0][0]  # more context, more attention


def test_roofline_option_keeps_the_former_chunk_price() -> None:
    # the former pricing by hand: one roofline op on the chunk's FLOPs and weight bytes
    spec, k, tp, s = device_spec("h100-sxm"), 4, 2, 4096
    gemm, attn = layer_forward_flops(s, 1, 512, 2048, causal=True)
    flops = np.array([k * (gemm + attn) / tp])
    wbytes = np.array([2.0 * k * (4 * 512**2 + 2 * 512 * 2048) / tp])
    f = op_times_s(spec, flops, wbytes, "bf16")[0]
    b = op_times_s(spec, 2 * flops, 2 * wbytes, "bf16")[0]
    rf = {"workload.cost_model": "roofline", "workload.attention_kernel": "fitted"}
    got = _run("1f1b", **rf)
    assert got["iteration_s"] == pytest.approx(f + b, rel=1e-12)
    assert got["model_fits"] == "roofline"
    # and a shipped sweep point as the former code printed it (hetsim sweep slimpipe.yaml
    # before issue 15's change: 32K, full recompute, 1F1B)
    o = {"policies.schedule": "1f1b", "workload.model.seq_len": 32768,
         "workload.recompute": "full", **rf}  # fmt: skip
    row = hetsim.run(SP, overrides=o).summary.iloc[0]
    assert row["iteration_s"] == pytest.approx(5.928874784897743, rel=1e-12)
