"""FP8 GEMMs are corrected once, in the kernel layer, and the clock regime is decided once
(devices/sustained.py), the same in every domain. Numbers worked by hand from the
constants of devices/kernels.yaml and catalogue.yaml."""

from __future__ import annotations

import pytest

from hetsim.devices.catalogue import device_spec, fabric_spec
from hetsim.devices.kernel_calibration import DeviceFit, borrower_scales
from hetsim.devices.kernels import kernel_fits, kernel_table
from hetsim.devices.precision import Precision
from hetsim.devices.sustained import clock_ratio, sustained_ratio
from hetsim.workloads.models.dense import model_spec
from hetsim.workloads.models.transformer_cost import EngineOverheads, TransformerCost, prefill_batch
from hetsim.workloads.models.trust import model_trust
from hetsim.workloads.training.parallel_comm import Fabrics, Layout
from hetsim.workloads.training.step_cost import DenseModel, MicroBatchCost, StepKnobs

GPT = DenseModel("gpt", 8, 4096, 32, 32, 16384, 32000, gated_mlp=False)
FAB = Fabrics(fabric_spec("h100-nvswitch"), fabric_spec("h100-ib-ndr-multinode"), 400e9, 8)
LLAMA = model_spec("llama-3-8b")


def _hill(x: float, top: float, half: float, k: float) -> float:
    return top / (1.0 + (half / x) ** k)


def _h100_gemm_s(
    m: float,
    n: float,
    k: float,
    peak: float,
    a_bytes: float,
    bw: float = 3.35e12,
    out_bytes: float | None = None,
) -> float:
    """h100-sxm's fitted GEMM class by hand (kernels.yaml fits.h100-sxm.gemm), on a device
    of bandwidth ``bw`` (a borrower's: the memory half size moves as a time); the output
    at ``out_bytes`` per element (default ``a_bytes``)."""
    flops = 2.0 * m * n * k
    t_c = flops / (peak * _hill(flops, 0.7528, 2.673e9, 0.8795))
    o_bytes = a_bytes if out_bytes is None else out_bytes
    nbytes = m * k * a_bytes + m * n * o_bytes + k * n * a_bytes
    t_m = nbytes / (bw * _hill(nbytes, 1.0137, 10.27e6 * bw / 3.35e12, 0.6568))
    p = 1.3567
    return 8.835e-12 + (t_c**p + t_m**p) ** (1.0 / p)


def _training(device: str, prec: Precision, **knobs: object) -> MicroBatchCost:
    kn = StepKnobs(**{"micro_batch": 1, "seq_len": 4096, **knobs})  # type: ignore[arg-type]
    return MicroBatchCost(device_spec(device), GPT, Layout(), FAB, kn, prec)


def test_fp8_gemm_is_priced_at_peak_x_fitted_efficiency_x_k03_scale_once() -> None:
    n = 8192.0
    fp8 = Precision("fp8", "fp8", "bf16")
    hand = _h100_gemm_s(n, n, n, 1979e12 * 0.9163, 1.0)  # FP8 peak x K03 scale, 1 B operands
    train = _training("h100-sxm", fp8)._gemm(n, n, n)
    serve = TransformerCost(LLAMA, device_spec("h100-sxm"), precision=Precision.uniform("fp8"))
    assert train == pytest.approx(hand, rel=1e-9)
    # serving keeps activations 16-bit between kernels: its FP8 GEMMs write 2 B outputs
    # (tests/test_fp8_activations.py); compute-bound here, so about 1% above the above
    serve_hand = _h100_gemm_s(n, n, n, 1979e12 * 0.9163, 1.0, out_bytes=2.0)
    assert float(serve._gemm(n, n, n)) == pytest.approx(serve_hand, rel=1e-9)
    assert hand < serve_hand < 1.02 * hand
    # K03's scale is itself a sustained measurement: no clock factor on top, in either regime
    assert _training("h100-sxm", fp8, gpu_clocks="boost")._gemm(n, n, n) == train
    assert _training("h100-sxm", fp8, sustained_matmul_ratio=0.7)._gemm(n, n, n) == train
    # 1,325 TFLOP/s against K03's measured 1,290.1 at this size
    assert 2 * n**3 / train / 1e12 == pytest.approx(1325, abs=1)


def test_borrowers_take_their_own_k03_point_or_say_whose_scale_they_use() -> None:
    # H200 borrows H100's GEMM fit but has its own K03 point (8192^3: 1269.4 TFLOP/s)
    h200 = kernel_fits(device_spec("h200"))
    assert h200.fits.gemm.format_compute_scale == {"fp8": 0.872}
    assert h200.format_scale_on == {"fp8": "h200"}
    assert kernel_fits(device_spec("mi300x")).fits.gemm.format_compute_scale == {"fp8": 0.6391}
    for device in ("h800", "h100-pcie", "h100-96gb-hbm2e", "h20", "b200"):
        ref = kernel_fits(device_spec(device))
        assert ref.fits.gemm.format_compute_scale == {"fp8": 0.9163}
        assert f"{device}.gemm.fp8_scale<-h100-sxm" in ref.borrowed_extras(("fp8",))
    # the shipped borrower scales are what the fit writer computes from the shipped fit
    f = kernel_table()[0]["h100-sxm"]
    lent = DeviceFit("h100-sxm", f.gemm, f.elementwise, f.attention_prefill,
                     f.attention_decode, f.fitted_on, {})  # fmt: skip
    assert borrower_scales({"h100-sxm": lent}) == {"h200": {"fp8": 0.872},
                                                   "mi300x": {"fp8": 0.6391}}  # fmt: skip
    # and by hand: H100's fit on the H200 (same 1979e12 FP8 peak, 4.8 TB/s) over the
    # measured time
    measured_s = 2 * 8192.0**3 / 1269.4e12
    assert _h100_gemm_s(8192, 8192, 8192, 1979e12, 1.0, 4.8e12) / measured_s == pytest.approx(
        0.872, abs=5e-5
    )


def test_the_clock_decision_is_the_same_in_training_and_serving() -> None:
    # one BF16 GEMM under the same load is one price, whichever domain asks for it
    bf16 = Precision("bf16", "bf16", "bf16")
    m, n, k = 4096.0, 12288.0, 4096.0
    for clocks in ("sustained", "boost"):
        train = _training("h100-sxm", bf16, gpu_clocks=clocks)._gemm(m, n, k)
        serve = TransformerCost(
            LLAMA,
            device_spec("h100-sxm"),
            precision=bf16,
            overheads=EngineOverheads(gpu_clocks=clocks),
        )
        assert float(serve._gemm(m, n, k)) == train
    r = sustained_ratio("h100-sxm")
    assert r == clock_ratio("h100-sxm") == 0.848  # the default regime is sustained
    assert clock_ratio("h100-sxm", "boost") == 1.0
    sustained = _training("h100-sxm", bf16)._gemm(m, n, k)
    assert sustained == pytest.approx(_h100_gemm_s(m, n, k, 989e12 * r, 2.0), rel=1e-9)
    assert _training("h100-sxm", bf16, gpu_clocks="boost")._gemm(m, n, k) == pytest.approx(
        _h100_gemm_s(m, n, k, 989e12, 2.0), rel=1e-9
    )
    # a bandwidth-bound GEMV barely moves (its compute roof is a small share of the smooth max)
    gemv = [
        _training("h100-sxm", bf16, gpu_clocks=c)._gemm(1, n, k) for c in ("sustained", "boost")
    ]
    assert gemv[0] / gemv[1] == pytest.approx(1.0, abs=0.01)
    with pytest.raises(ValueError, match="gpu_clocks"):
        clock_ratio("h100-sxm", "turbo")


def test_serving_hot_path_prices_prefill_attention_at_the_same_clock() -> None:
    # step_s (the serving hot path) has its own scalar copy of the prefill-attention
    # formula: it must take the clock regime as attention_prefill_time_s does
    b = prefill_batch(3000)
    for clocks in ("sustained", "boost"):
        tc = TransformerCost(
            LLAMA, device_spec("h100-sxm"), overheads=EngineOverheads(gpu_clocks=clocks)
        )
        args = (b.tokens, b.sampled, b.prefill_tokens, b.prefill_ctx, b.cross_units,
                b.self_units, b.decode_seqs, b.decode_ctx)  # fmt: skip
        assert tc.step_s(*args) == pytest.approx(tc.iteration_s(b), rel=1e-12)
    slow = TransformerCost(LLAMA, device_spec("h100-sxm")).attention_s(b)[0]
    fast = TransformerCost(
        LLAMA, device_spec("h100-sxm"), overheads=EngineOverheads(gpu_clocks="boost")
    ).attention_s(b)[0]
    assert slow > fast


def test_borrowed_ratio_and_scales_appear_in_borrowed_fits() -> None:
    fp8 = Precision.uniform("fp8")
    trust = model_trust([TransformerCost(LLAMA, device_spec("h800"), precision=fp8)], 512, 128)
    listed = str(trust["borrowed_fits"]).split(";")
    assert "h800.sustained<-h200" in listed
    assert "h800.gemm.fp8_scale<-h100-sxm" in listed
    own = model_trust([TransformerCost(LLAMA, device_spec("h200"), precision=fp8)], 512, 128)
    assert "sustained" not in str(own["borrowed_fits"])  # measured on H200 itself
    assert "fp8_scale" not in str(own["borrowed_fits"])  # its own K03 point
    at_boost = TransformerCost(
        LLAMA, device_spec("h800"), precision=fp8, overheads=EngineOverheads(gpu_clocks="boost")
    )
    assert "sustained" not in str(model_trust([at_boost], 512, 128)["borrowed_fits"])


def test_a_serving_run_takes_the_regime_from_its_scenario() -> None:
    import hetsim
    from tests.conftest import ROOT

    path = ROOT / "validation" / "v38.yaml"  # one 5,000-token FP8 prompt on 2x H100
    sustained = float(hetsim.run(path).summary.iloc[0]["ttft_mean_s"])
    boost = hetsim.run(path, overrides={"workload.gpu_clocks": "boost"}).summary.iloc[0]
    # its GEMMs keep the K03 FP8 scale in both regimes; its prefill attention speeds up
    assert float(boost["ttft_mean_s"]) < sustained
    assert "sustained" not in str(boost["borrowed_fits"])
