"""Kernel classes, precisions and the transformer cost model against hand-worked numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from hetsim.devices.catalogue import device_spec, shipped_devices
from hetsim.devices.collectives import collective_time_s
from hetsim.devices.kernels import (
    KERNELS_FILE,
    AttentionDecodeFit,
    AttentionPrefillFit,
    ElementwiseFit,
    GemmFit,
    KernelFits,
    LaunchModel,
    attention_decode_time_s,
    attention_prefill_time_s,
    elementwise_time_s,
    gemm_time_s,
    kernel_fits,
    smooth_max,
)
from hetsim.devices.precision import Precision, UnsupportedPrecision
from hetsim.devices.spec import EfficiencyCurve
from hetsim.workloads.models.dense import model_spec
from hetsim.workloads.models.transformer_cost import (
    Batch,
    EngineOverheads,
    TransformerCost,
    decode_batch,
    prefill_batch,
)
from tests.approx import assert_close_tree

A100 = device_spec("a100-80gb")  # 312e12 fp16 FLOP/s, 2039e9 B/s (catalogue.yaml)
FLAT = GemmFit(EfficiencyCurve(0.5), EfficiencyCurve(0.8), sharpness=200.0, floor_s=0.0)
FP16 = Precision()


def test_gemm_on_a_hand_roofline() -> None:
    # 4096^3: 2 * 4096^3 = 1.374e11 FLOPs at 0.5 x 312e12 -> 0.8809 ms (compute-bound);
    # bytes 3 x 4096^2 x 2 = 100.7 MB at 0.8 x 2039e9 -> 0.0617 ms
    big = float(gemm_time_s(A100, FLAT, 4096, 4096, 4096, FP16))
    assert big == pytest.approx(2 * 4096**3 / (0.5 * 312e12), rel=1e-6)
    # m = 1: a GEMV reads the 4096 x 4096 weights (33.6 MB) -> memory-bound
    gemv = float(gemm_time_s(A100, FLAT, 1, 4096, 4096, FP16))
    assert gemv == pytest.approx((4096 * 4096 + 2 * 4096) * 2 / (0.8 * 2039e9), rel=1e-6)


def test_smooth_max_meets_the_roofs_smoothly() -> None:
    assert float(smooth_max(1.0, 1.0, 2.0)) == pytest.approx(math.sqrt(2))
    assert float(smooth_max(10.0, 0.0, 1.3)) == 10.0
    assert float(smooth_max(3.0, 4.0, 2.0)) == pytest.approx(5.0)


def test_other_kernel_classes_by_hand() -> None:
    # elementwise: bytes / (bw x peak eff of the op), size curve flat, floor 2 us
    ew = ElementwiseFit(EfficiencyCurve(1.0), {"add": 0.9}, floor_s=2e-6)
    assert float(elementwise_time_s(A100, ew, 1e8, "add")) == pytest.approx(
        2e-6 + 1e8 / (0.9 * 2039e9)
    )
    # decode attention: 64 sequences x 1000 cached tokens x 8 KV heads x 128 x K+V x 2 B
    dec = AttentionDecodeFit(EfficiencyCurve(0.7), per_seq_s=1e-7, floor_s=3e-6)
    kv = 2 * 64 * 1000 * 8 * 128 * 2
    q = 2 * 64 * 32 * 128 * 2
    got = float(attention_decode_time_s(A100, dec, 64, 64 * 1000, 32, 8, 128, FP16))
    assert got == pytest.approx(3e-6 + 64 * 1e-7 + (kv + q) / (0.7 * 2039e9))
    # prefill attention: one 1024-token chunk alone, ideal causal work (1/2 of q^2)
    pre = AttentionPrefillFit(EfficiencyCurve(0.4), memory_max_eff=0.8, sharpness=200.0,
                              self_factor=0.5)  # fmt: skip
    flops = 4 * 32 * 128 * 0.5 * 1024**2
    got = float(attention_prefill_time_s(A100, pre, 0, 1024**2, 1024, 0, 32, 8, 128, FP16))
    assert got == pytest.approx(flops / (0.4 * 312e12), rel=1e-6)


def test_precisions_bytes_and_math_formats() -> None:
    n = 7e9
    fp16, fp8, int4 = Precision(), Precision.uniform("fp8"), Precision.uniform("int4")
    assert fp8.weight_bytes(n) == fp16.weight_bytes(n) / 2
    # int4 weight-only: 0.5 B/param + an fp16 scale and zero point per 128 weights
    assert int4.weight_bytes(n) == pytest.approx(n * (0.5 + 4 / 128))
    assert int4.weight_only and int4.math_dtype() == "fp16" and fp8.math_dtype() == "fp8"
    assert Precision.uniform("int8").math_dtype() == "int8"
    with pytest.raises(UnsupportedPrecision, match="a100-80gb has no fp8"):
        fp8.check(A100)
    with pytest.raises(ValueError, match="weights only"):
        Precision("fp16", "int4", "fp16")  # type: ignore[arg-type]


def test_int4_dequantisation_is_a_third_roof() -> None:
    # m = 1 GEMV of 11008 x 4096 int4 weights: 4.25 bits each -> 23.95 MB at 0.8 x bw,
    # dequantisation 2 x k x n FP32 ops at 19.5e12 FP32 FLOP/s (A100 CUDA cores)
    int4 = Precision.uniform("int4")
    k, n = 4096, 11008
    t = float(gemm_time_s(A100, FLAT, 1, n, k, int4))
    mem = ((k + n) * 2 + k * n * 4.25 / 8) / (0.8 * 2039e9)
    deq = 2 * k * n / 19.5e12
    assert t == pytest.approx(max(mem, deq), rel=1e-3)
    assert t < float(gemm_time_s(A100, FLAT, 1, n, k, FP16)) / 3.5


def _flat_fits() -> KernelFits:
    return KernelFits(
        gemm=FLAT,
        attention_prefill=AttentionPrefillFit(EfficiencyCurve(0.4), 0.8, 200.0, 0.0, 0.5),
        attention_decode=AttentionDecodeFit(EfficiencyCurve(0.8), 0.0, 0.0),
        elementwise=ElementwiseFit(EfficiencyCurve(1.0), {}, 0.0),
    )


def test_decode_step_is_bandwidth_bound_on_weights_and_kv(monkeypatch: pytest.MonkeyPatch) -> None:
    """With flat efficiencies, a batch-1 decode step of Llama-3-8B reads every GEMM weight
    once (at 0.8 of bandwidth) plus the KV, and fp8 weights halve the GEMM part."""
    import hetsim.workloads.models.transformer_cost as tc

    monkeypatch.setattr(tc, "kernel_fits", lambda spec, *_, **__: _ref(spec))
    h100 = device_spec("h100-sxm")
    m = model_spec("llama-3-8b")
    fp16 = TransformerCost(m, h100)
    parts = fp16.breakdown(decode_batch(1, 1000))
    d = m.head_dim
    per_layer = h100_gemm_weights = (
        4096 * (32 + 16) * d + 4096 * 4096 + 4096 * 2 * 14336 + 14336 * 4096
    )
    weights = m.layers * per_layer + 4096 * m.vocab  # layers + LM head
    assert parts["gemm"] == pytest.approx(weights * 2 / (0.8 * h100.memory_bandwidth_Bps), rel=0.01)
    kv = 1000 * m.kv_bytes_per_token("fp16")
    assert parts["attention_decode"] == pytest.approx(
        kv / (0.8 * h100.memory_bandwidth_Bps), rel=0.01
    )
    fp8 = TransformerCost(m, h100, precision=Precision.uniform("fp8", kv_cache="fp16"))
    assert fp8.breakdown(decode_batch(1, 1000))["gemm"] == pytest.approx(
        parts["gemm"] / 2, rel=0.01
    )
    assert h100_gemm_weights > 0


def _ref(spec, *_):  # type: ignore[no-untyped-def]
    from hetsim.devices.kernels import KernelFitRef

    return KernelFitRef(spec.name, _flat_fits(), "uncalibrated", {})


def test_cuda_graphs_drop_the_launch_term() -> None:
    m = model_spec("llama-2-7b")
    eager = EngineOverheads(LaunchModel(cpu_launch_s=1e-3, cuda_graphs=False))
    graphs = EngineOverheads(LaunchModel(cpu_launch_s=1e-3, cuda_graphs=True))
    b = decode_batch(1, 100)
    t_eager = TransformerCost(m, A100, overheads=eager).iteration_s(b)
    t_graph = TransformerCost(m, A100, overheads=graphs).iteration_s(b)
    # 13 kernels a layer x 32 layers + 4 per iteration, 1 ms each on the host
    assert t_eager == pytest.approx((13 * 32 + 4) * 1e-3)
    assert t_graph < 0.02 < t_eager
    framework = EngineOverheads(framework_s=2e-3, framework_per_seq_s=1e-5)
    t_fw = TransformerCost(m, A100, overheads=framework).iteration_s(decode_batch(10, 100))
    assert t_fw == pytest.approx(TransformerCost(m, A100).iteration_s(decode_batch(10, 100))
                                 + 2e-3 + 10 * 1e-5)  # fmt: skip


def test_tp_collectives_two_all_reduces_per_layer() -> None:
    from hetsim.devices.catalogue import fabric_spec

    m, fabric = model_spec("llama-2-70b"), fabric_spec("a100-nvswitch")
    cost = TransformerCost(m, A100, tp=4, fabric=fabric)
    t = 512
    one = collective_time_s("all_reduce", 4, t * m.hidden * 2, fabric)
    assert cost.breakdown(prefill_batch(t))["collective"] == pytest.approx(2 * m.layers * one)
    assert TransformerCost(m, A100, tp=4).breakdown(prefill_batch(t))["collective"] == 0.0
    with pytest.raises(ValueError, match="does not divide"):
        TransformerCost(m, A100, tp=3)


def test_fast_path_equals_the_batch_path() -> None:
    cost = TransformerCost(model_spec("llama-3-8b"), A100)
    b = Batch(tokens=600, sampled=40, prefill_tokens=512, prefill_ctx=1024,
              cross_units=512 * 1024, self_units=512.0**2, decode_seqs=88, decode_ctx=88 * 700)  # fmt: skip
    fast = cost.step_s(600, 40, 512, 1024, 512 * 1024, 512.0**2, 88, 88 * 700)
    assert fast == pytest.approx(cost.iteration_s(b), rel=1e-12)
    # beyond the table, the same formulas
    long = TransformerCost(model_spec("llama-3-8b"), A100, table_tokens=16)
    assert long.iteration_s(prefill_batch(100)) == pytest.approx(
        cost.iteration_s(prefill_batch(100)), rel=1e-9
    )


def test_every_accelerator_says_where_its_fits_come_from() -> None:
    fits, borrow = (
        yaml.safe_load(KERNELS_FILE.read_text())["fits"],
        yaml.safe_load(KERNELS_FILE.read_text())["borrow"],
    )
    for name, spec in shipped_devices().items():
        if spec.kind in ("gpu", "npu"):
            assert name in fits or name in borrow, f"{name}: kernel fits neither own nor borrowed"
    assert kernel_fits(A100).kind == "calibrated"
    h100 = kernel_fits(device_spec("h100-sxm"))
    assert h100.class_kind("gemm") == "calibrated"
    assert h100.class_kind("attention_decode") == "borrowed"  # no H100 attention profile
    assert kernel_fits(device_spec("l4")).kind == "borrowed"
    assert kernel_fits(device_spec("xeon-8480")).kind == "uncalibrated"


@pytest.mark.slow
def test_calibration_reproduces_the_catalogue_and_meets_15_percent() -> None:
    """Refitting the shipped Vidur sample gives the committed kernels.yaml (within the
    refit tolerance of tests/approx.py), and the
    per-operator median error is within 15% for every operator and TP degree."""
    from hetsim.devices.kernel_calibration import fit_all, fits_yaml

    fits = fit_all()
    committed = yaml.safe_load(KERNELS_FILE.read_text())["fits"]
    for device, fit in fits.items():
        got = fits_yaml(fit)
        assert_close_tree(got["gemm"], committed[device]["gemm"], what=device)
        for cls in ("gemm", "elementwise"):
            d = fit.rows[cls]
            per_op = d.assign(e=d.error.abs()).groupby(["op", "tp"]).e.median()
            assert (per_op < 0.20).all(), per_op[per_op >= 0.20]
            assert float(np.median(d.error.abs())) < 0.15
    a100 = fits["a100-80gb"].rows
    for cls in ("attention_prefill", "attention_decode"):
        assert float(np.median(a100[cls].error.abs())) < 0.15
