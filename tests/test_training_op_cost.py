"""Chameleon's operator sequence priced kernel by kernel (workloads/training/op_cost.py)."""

from __future__ import annotations

import numpy as np
import pytest

from hetsim.devices.catalogue import device_spec
from hetsim.devices.kernels import elementwise_time_s, gemm_time_s, kernel_fits
from hetsim.devices.precision import Precision
from hetsim.workloads.training.model import TransformerSpec
from hetsim.workloads.training.op_cost import OpPricer
from hetsim.workloads.training.ops import BWD, FWD, Variant, build_sequence

SPEC = device_spec("a100-80gb")
MODEL = TransformerSpec(layers=2, hidden=1024, heads=8, ffn=4096, vocab=1000, seq_len=2048)
V = Variant(2048)
BF16 = Precision("bf16", "bf16", "bf16")


def _times() -> tuple[object, np.ndarray]:
    lt = build_sequence(MODEL, V)
    return lt, OpPricer(SPEC, MODEL, V, "bf16").times_s(lt)


def _op(lt: object, name: str, phase: int) -> int:
    seq = lt.seq  # type: ignore[attr-defined]
    return next(
        i for i, (n, p) in enumerate(zip(seq.op_name, seq.op_phase, strict=True))
        if n == name and p == phase
    )  # fmt: skip


def test_gemm_ops_take_their_shapes_and_backward_is_dgrad_plus_wgrad() -> None:
    lt, t = _times()
    g = kernel_fits(SPEC).fits.gemm
    s, h, f = 2048, 1024, 4096
    assert t[_op(lt, "fc1", FWD)] == pytest.approx(float(gemm_time_s(SPEC, g, s, f, h, BF16)))
    assert t[_op(lt, "fc2", FWD)] == pytest.approx(float(gemm_time_s(SPEC, g, s, h, f, BF16)))
    # data gradient (s x f) @ (f x h) and weight gradient (h x s) @ (s x f) of fc1
    assert t[_op(lt, "fc1_dgrad", BWD)] == pytest.approx(float(gemm_time_s(SPEC, g, s, h, f, BF16)))
    assert t[_op(lt, "fc1_wgrad", BWD)] == pytest.approx(float(gemm_time_s(SPEC, g, h, f, s, BF16)))


def test_elementwise_ops_are_bandwidth_bound_on_their_bytes() -> None:
    lt, t = _times()
    ew = kernel_fits(SPEC).fits.elementwise
    i = _op(lt, "ln1", FWD)
    assert t[i] == pytest.approx(float(elementwise_time_s(SPEC, ew, lt.nbytes[i], "norm")))
    # far below the time the same bytes take at the roofline's GEMM-efficiency compute bound:
    # a norm moves bytes, it does not run at tensor-core rate
    assert t[i] > lt.nbytes[i] / SPEC.memory_bandwidth_Bps


def test_fixed_attention_share_prices_causal_flops_at_that_share_of_peak() -> None:
    lt = build_sequence(MODEL, V)
    t = OpPricer(SPEC, MODEL, V, "bf16", attention_peak_fraction=0.5).times_s(lt)
    flops = 4.0 * 2048 * 2048 * 1024 * 0.5  # QK^T and PV, causal half
    fwd = flops / (SPEC.peak("bf16") * 0.5)
    assert t[_op(lt, "attn", FWD)] == pytest.approx(fwd)
    assert t[_op(lt, "attn_bwd", BWD)] == pytest.approx(fwd * 2.5 / 0.86)


def test_run_reports_its_fits_and_an_attention_extrapolation() -> None:
    import hetsim
    from tests.conftest import SCENARIOS

    over = {"workload.size_x_hbm": 0.75, "workload.iterations": 1, "workload.variability": {}}
    row = hetsim.run(SCENARIOS / "chameleon.yaml", overrides=over).summary.iloc[0]
    assert row["model_fits"] == "borrowed"  # the Ascend 910B has no kernel measurements
    assert "ascend-910b.gemm<-a100-80gb" in row["borrowed_fits"]
    assert row["fit_extrapolated"].startswith("attention_prefill: 131072 tokens")
    assert 0 < row["model_error_p50"] <= row["model_error_p90"]
    over["workload.attention_peak_fraction"] = 0.5
    fixed = hetsim.run(SCENARIOS / "chameleon.yaml", overrides=over).summary.iloc[0]
    assert fixed["fit_extrapolated"] == ""
    assert fixed["iteration_s"] < row["iteration_s"]  # 0.5 of peak beats the fit's ~0.22
