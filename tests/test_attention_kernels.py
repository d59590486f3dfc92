"""Attention kernels by implementation: the published microbenchmarks come back out."""

from __future__ import annotations

import pytest

from hetsim.devices.attention_kernels import attention_kernel_time_s, kernel_profile
from hetsim.devices.catalogue import device_spec, fabric_spec
from hetsim.workloads.training.parallel_comm import Fabrics, Layout
from hetsim.workloads.training.step_cost import DenseModel, MicroBatchCost, StepKnobs

H100 = device_spec("h100-sxm")
NV = fabric_spec("h100-nvswitch")
FAB = Fabrics(NV, NV, NV.bandwidth_Bps, 8)
#: FlashAttention-3 paper, BF16 forward (causal) and backward figures, head dim 128,
#: H100 SXM5: TFLOP/s at 512 and 16k (devices/attention_kernels.yaml)
FA2_FWD_CAUSAL = {512: 191.0, 16384: 335.0}
CUDNN_FWD_CAUSAL = {512: 315.0, 16384: 539.0}


def _bench_fwd_flops(seq: int, causal: bool = True) -> float:
    """The paper's setting: batch x seqlen = 16k tokens, 16 heads of 128; 4 s^2 d h b,
    halved with a causal mask."""
    batch, heads, d = 16384 // seq, 16, 128
    return 4.0 * seq * seq * d * heads * batch / (2.0 if causal else 1.0)


@pytest.mark.parametrize(("kernel", "points"), [("fa2", FA2_FWD_CAUSAL),
                                                ("cudnn", CUDNN_FWD_CAUSAL)])  # fmt: skip
def test_benchmark_shape_gives_the_published_rate(kernel: str, points: dict) -> None:
    prof = kernel_profile(H100, kernel).profile
    for seq, tflops in points.items():
        flops = _bench_fwd_flops(seq)
        t = attention_kernel_time_s(H100, prof, "forward", flops, seq)
        assert flops / t / 1e12 == pytest.approx(tflops, rel=1e-9)


def test_between_points_log_interpolated_and_held_at_the_ends() -> None:
    prof = kernel_profile(H100, "fa2").profile
    peak = H100.peak("bf16") / 1e12
    # 2^11.5 lies half-way between 2k (298) and 4k (319) in log2
    assert prof.efficiency("forward", 2**11.5) * peak == pytest.approx((298 + 319) / 2)
    assert prof.efficiency("forward", 65536) * peak == pytest.approx(335.0)
    assert prof.efficiency("forward", 128) * peak == pytest.approx(191.0)
    assert not prof.in_range(65536) and prof.in_range(8192)


def test_causal_backward_is_the_backward_panel_times_the_forward_causal_ratio() -> None:
    prof = kernel_profile(H100, "fa2").profile
    peak = H100.peak("bf16") / 1e12
    # backward panel 322 at 16k; forward causal / non-causal 335 / 370 at 16k
    assert prof.efficiency("backward", 16384) * peak == pytest.approx(322 * 335 / 370)


def test_hopper_borrows_h100_profile_and_a100_has_only_fa2() -> None:
    ref = kernel_profile(device_spec("h200"), "cudnn")
    assert ref.borrowed and ref.profile.device == "h100-sxm"
    assert not kernel_profile(H100, "cudnn").borrowed
    with pytest.raises(ValueError, match=r"no profile for a100-80gb .* it has fa2"):
        kernel_profile(device_spec("a100-80gb"), "fa3")
    with pytest.raises(ValueError, match="valid: fitted"):
        kernel_profile(H100, "fitted")


def test_training_step_prices_attention_with_the_named_kernel() -> None:
    """A whole-sequence causal layer on one GPU: forward = 2 s^2 d h b at the 8k point,
    backward 2.5x that at the backward efficiency; cuDNN faster than FA2, as published."""
    md = DenseModel("m", 2, 2048, 16, 16, 8192, 32000)
    s, b = 8192, 1
    times = {}
    for k in ("fa2", "cudnn"):
        # the published profiles' own (burst) rates: boost clocks
        kn = StepKnobs(b, s, attention_kernel=k, gpu_clocks="boost")
        c = MicroBatchCost(H100, md, Layout(), FAB, kn)
        times[k] = c._attention(16.0, 16.0)
        prof = kernel_profile(H100, k).profile
        flops = 2.0 * s * s * 128 * 16 * b
        assert times[k][0] == pytest.approx(flops / (H100.peak("bf16") * prof.efficiency(
            "forward", s)))  # fmt: skip
        assert times[k][1] == pytest.approx(2.5 * flops / (H100.peak("bf16") * prof.efficiency(
            "backward", s)))  # fmt: skip
    assert times["cudnn"][0] < times["fa2"][0] and times["cudnn"][1] < times["fa2"][1]
    # ring context parallelism: the rank's share of the causal work, at key length s / cp
    kn = StepKnobs(b, s, attention_kernel="fa2", gpu_clocks="boost")
    ring = MicroBatchCost(H100, md, Layout(cp=4), FAB, kn)
    prof = kernel_profile(H100, "fa2").profile
    flops = 2.0 * s * s * 128 * 16 * b / 4
    assert ring._attention(16.0, 16.0)[0] == pytest.approx(
        flops / (H100.peak("bf16") * prof.efficiency("forward", s / 4)))  # fmt: skip


def test_dynamic_fp8_scaling_adds_one_amax_read_per_activation_and_gradient() -> None:
    """Dynamic (current) scaling reads each 16-bit GEMM input (forward) and output
    gradient (backward) once more, 2 B per element, before its cast."""
    from hetsim.devices.kernels import elementwise_time_s, kernel_fits
    from hetsim.devices.precision import Precision

    md = DenseModel("m", 2, 2048, 16, 16, 8192, 32000)
    fp8 = Precision("fp8", "fp8", "bf16")
    cost = {sc: MicroBatchCost(H100, md, Layout(), FAB, StepKnobs(1, 4096, fp8_scaling=sc), fp8)
            for sc in ("delayed", "dynamic")}  # fmt: skip
    gemms = cost["delayed"]._layer_gemms()
    fit = kernel_fits(H100).fits.elementwise
    ew = lambda b: float(elementwise_time_s(H100, fit, b, "activation"))  # noqa: E731
    d_f, d_b = (a - b for a, b in zip(cost["dynamic"]._fp8_casts(gemms),
                                      cost["delayed"]._fp8_casts(gemms), strict=True))  # fmt: skip
    assert d_f == pytest.approx(sum(ew(2.0 * m * k) for m, _, k in gemms))
    assert d_b == pytest.approx(sum(ew(2.0 * m * n) for m, n, _ in gemms))
    assert d_f > 0 and d_b > 0


A100 = device_spec("a100-80gb")


def test_a100_fa2_points_are_the_published_rates_over_the_a100_peak() -> None:
    """FlashAttention-2 paper, A100 80GB SXM4, head dim 128, causal: forward 187 TFLOP/s
    at 2k (Fig. 5(d)), backward 186 at 16k (Fig. 6(d), used as published, not derived);
    efficiency = TFLOP/s / 312 (A100 BF16 dense peak); log2 interpolation between 2k
    (187) and 4k (198); A100-40GB borrows the profile at the same peak."""
    prof = kernel_profile(A100, "fa2").profile
    assert prof.efficiency("forward", 2048) == pytest.approx(187 / 312)
    assert prof.efficiency("backward", 16384) == pytest.approx(186 / 312)
    assert prof.efficiency("forward", 2**11.5) == pytest.approx((187 + 198) / 2 / 312)
    flops = _bench_fwd_flops(2048)
    t = attention_kernel_time_s(A100, prof, "forward", flops, 2048)
    assert flops / t / 1e12 == pytest.approx(187.0, rel=1e-9)
    ref40 = kernel_profile(device_spec("a100-40gb"), "fa2")
    assert ref40.borrowed and ref40.profile.efficiency("forward", 2048) == pytest.approx(
        187 / 312)  # fmt: skip


@pytest.mark.parametrize(("seq", "fwd_bwd_tflops"), [(512, 99.0), (2048, 155.0), (16384, 189.0)])
def test_a100_fa2_forward_and_backward_compose_to_the_published_fwd_bwd_figure(
    seq: int, fwd_bwd_tflops: float
) -> None:
    """Cross-check of the transcription against a figure not stored: the paper's
    forward + backward panel (Fig. 4(d), causal, head dim 128: 99 / 155 / 189 TFLOP/s at
    512 / 2k / 16k) is 3.5 F over (F / fwd + 2.5 F / bwd); within the bar labels' rounding."""
    prof = kernel_profile(A100, "fa2").profile
    peak = A100.peak("bf16") / 1e12
    fwd = prof.efficiency("forward", seq) * peak
    bwd = prof.efficiency("backward", seq) * peak
    assert 3.5 / (1.0 / fwd + 2.5 / bwd) == pytest.approx(fwd_bwd_tflops, abs=1.0)


@pytest.mark.parametrize(("device", "kernel"), [("v100", "fa2"), ("t4", "fa2"), ("b200", "fa3")])
def test_a_kernel_the_device_cannot_run_is_refused_even_when_borrowable(
    device: str, kernel: str
) -> None:
    # v100/t4 borrow a100-80gb's fits, which has an fa2 profile; b200 borrows h100's fa3
    with pytest.raises(ValueError, match="does not run on"):
        kernel_profile(device_spec(device), kernel)
