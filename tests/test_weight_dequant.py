"""Weight dequantisation fused into the GEMM vs materialised by a kernel of its own, and
plain (non-gated) MLPs, against hand-worked byte counts."""

from __future__ import annotations

import pytest

from hetsim.devices.catalogue import device_spec
from hetsim.devices.kernels import (
    AttentionDecodeFit,
    AttentionPrefillFit,
    ElementwiseFit,
    GemmFit,
    KernelFitRef,
    KernelFits,
    LaunchModel,
    dequant_kernel_time_s,
    gemm_time_s,
)
from hetsim.devices.precision import Precision
from hetsim.devices.spec import DeviceSpec, EfficiencyCurve
from hetsim.workloads.models.dense import model_spec
from hetsim.workloads.models.transformer_cost import EngineOverheads, TransformerCost, decode_batch

A100 = device_spec("a100-80gb")  # 2039e9 B/s (catalogue.yaml)
BW = 2039e9
GEMM = GemmFit(EfficiencyCurve(0.5), EfficiencyCurve(0.8), sharpness=200.0, floor_s=0.0)
EW = ElementwiseFit(EfficiencyCurve(1.0), {"add": 0.9}, floor_s=0.0)
W8A16 = Precision("int8", "fp16", "fp16", 128, "fused")
W8A16_COPY = Precision("int8", "fp16", "fp16", 128, "materialize")
INT8_BYTES = 1 + 4 / 128  # int8 + an fp16 scale and zero point per 128 weights


def test_materialize_is_a_copy_kernel_then_an_fp16_gemm() -> None:
    k = n = 4096
    deq = float(dequant_kernel_time_s(A100, EW, n, k, W8A16_COPY))
    # reads the int8 weights with their scales, writes k n fp16 values, at the add op's 0.9
    assert deq == pytest.approx(k * n * (INT8_BYTES + 2) / (0.9 * BW), rel=1e-9)
    # the GEMM then reads fp16 weights: exactly the fp16 GEMM
    gemm = float(gemm_time_s(A100, GEMM, 1, n, k, W8A16_COPY))
    assert gemm == pytest.approx(float(gemm_time_s(A100, GEMM, 1, n, k, Precision())))
    # fused: int8 bytes once (the dequantisation roof is far below at m = 1)
    fused = float(gemm_time_s(A100, GEMM, 1, n, k, W8A16))
    assert fused == pytest.approx((k * n * INT8_BYTES + 2 * 2 * k) / (0.8 * BW), rel=1e-3)
    # materialising costs (1.03 + 2) / 0.9 + 2 / 0.8 against 1.03 / 0.8 per weight: ~5x
    assert (deq + gemm) / fused == pytest.approx(
        ((INT8_BYTES + 2) / 0.9 + 2 / 0.8) / (INT8_BYTES / 0.8), rel=0.01
    )
    assert float(dequant_kernel_time_s(A100, EW, n, k, W8A16)) == 0.0


def test_materialize_needs_a_weight_only_format() -> None:
    with pytest.raises(ValueError, match="materialize applies to weight-only"):
        Precision("fp16", "fp16", "fp16", 128, "materialize")
    with pytest.raises(ValueError, match="unknown mode"):
        Precision("int8", "fp16", "fp16", 128, "lazy")  # type: ignore[arg-type]
    assert W8A16_COPY.gemm_precision() == Precision("fp16", "fp16", "fp16", 128)
    assert W8A16.gemm_precision() is W8A16


def _flat(spec: DeviceSpec, *_: object, **__: object) -> KernelFitRef:
    fits = KernelFits(
        gemm=GEMM,
        attention_prefill=AttentionPrefillFit(EfficiencyCurve(0.4), 0.8, 200.0, 0.0, 0.5),
        attention_decode=AttentionDecodeFit(EfficiencyCurve(0.8), 0.0, 0.0),
        elementwise=EW,
    )
    return KernelFitRef(spec.name, fits, "uncalibrated", {})


def test_bloom_decode_step_plain_mlp_and_materialised_weights(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """BLOOM-176B on 4 GPUs, batch 1: every layer's weights are 4 h^2 + 2 h ffn (no gate),
    a quarter on each rank; materialising adds (1.03 + 2) B per weight at 0.9 x bw."""
    import hetsim.workloads.models.transformer_cost as tc

    monkeypatch.setattr(tc, "kernel_fits", _flat)
    m = model_spec("bloom-176b")
    assert not m.gated_mlp and m.ffn == 4 * m.hidden
    h, tp = m.hidden, 4
    weights = (m.layers * (4 * h * h + 2 * h * m.ffn) + h * m.vocab) / tp  # per rank, + head
    fp16 = TransformerCost(m, A100, tp).breakdown(decode_batch(1, 100))["gemm"]
    assert fp16 == pytest.approx(weights * 2 / (0.8 * BW), rel=0.01)
    copy = TransformerCost(m, A100, tp, W8A16_COPY).breakdown(decode_batch(1, 100))["gemm"]
    assert copy == pytest.approx(fp16 + weights * (INT8_BYTES + 2) / (0.9 * BW), rel=0.01)
    # eager launches: one dequantisation kernel per weight GEMM (4 a layer + the LM head)
    eager = EngineOverheads(LaunchModel(cpu_launch_s=1e-3, cuda_graphs=False))
    host = TransformerCost(m, A100, tp, W8A16_COPY, overheads=eager)._launch_floor_s
    assert host == pytest.approx(((13 + 4) * m.layers + 4 + 1) * 1e-3)
