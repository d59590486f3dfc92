"""The 500 W H100 96GB HBM2e variant and the sustained tensor-core ratio of the training
step cost (workloads/training/step_cost.py), by hand. FP8 GEMMs are scaled once, in the
kernel layer, in every domain: tests/test_clock_regime.py."""

from __future__ import annotations

import pytest

import hetsim
from hetsim.devices.catalogue import device_spec, fabric_spec
from hetsim.devices.kernels import kernel_fits
from hetsim.devices.precision import Precision
from hetsim.devices.sustained import sustained_ratio, sustained_table
from hetsim.workloads.training.parallel_comm import Fabrics, Layout
from hetsim.workloads.training.step_cost import DenseModel, MicroBatchCost, StepKnobs
from tests.conftest import ROOT

GPT = DenseModel("gpt", 8, 4096, 32, 32, 16384, 32000, gated_mlp=False)
FAB = Fabrics(fabric_spec("h100-nvswitch"), fabric_spec("h100-ib-ndr-multinode"), 400e9, 8)
BF16 = Precision("bf16", "bf16", "bf16")


def _cost(device: str = "h100-sxm", prec: Precision = BF16, **knobs: object) -> MicroBatchCost:
    kn = StepKnobs(**{"micro_batch": 2, "seq_len": 4096, **knobs})  # type: ignore[arg-type]
    return MicroBatchCost(device_spec(device), GPT, Layout(), FAB, kn, prec)


def test_h100_96gb_variant_is_the_500w_hbm2e_part_with_borrowed_h100_fits() -> None:
    v, h = device_spec("h100-96gb-hbm2e"), device_spec("h100-sxm")
    assert v.memory_bandwidth_Bps == 2.4e12  # torchtitan: "2.4 TB/s"
    assert v.memory_bytes == 96 * 2**30
    assert v.tdp_w == 500
    assert v.memory_type == "HBM2e"
    assert v.peak_flops == h.peak_flops  # same GH100 SMs and clocks
    ref, own = kernel_fits(v), kernel_fits(h)
    assert ref.kind == "borrowed" and ref.fitted_on == own.fitted_on
    assert ref.fits.gemm.compute == own.fits.gemm.compute  # efficiencies over FLOPs move as is


def test_variant_bandwidth_prices_bandwidth_bound_kernels() -> None:
    # elementwise time = floor + bytes / (bandwidth x efficiency(bytes)); at 40 GB both
    # size curves sit at their peak, so the time above the floor scales by 3.35 / 2.4
    nbytes = 4e10
    floor = kernel_fits(device_spec("h100-sxm")).fits.elementwise.floor_s
    t_h = _cost("h100-sxm")._ew(nbytes, "add") - floor
    t_v = _cost("h100-96gb-hbm2e")._ew(nbytes, "add") - floor
    assert t_v / t_h == pytest.approx(3.35 / 2.4, rel=1e-3)
    # a compute-bound GEMM barely moves (same peaks and compute fit; its memory roof, about
    # 1% of the compute roof, enters the smooth max): slower, by under 1%
    g_v = _cost("h100-96gb-hbm2e")._gemm(16384, 16384, 16384)
    g_h = _cost("h100-sxm")._gemm(16384, 16384, 16384)
    assert 1.0 < g_v / g_h < 1.01


def test_sustained_ratio_scales_compute_roofs_only() -> None:
    r = 0.848
    base = _cost(attention_kernel="fa2", gpu_clocks="boost")  # the fits' burst rates
    slow = _cost(attention_kernel="fa2", sustained_matmul_ratio=r)
    # published attention kernel: FLOPs / (peak x efficiency), so exactly 1 / r
    fa, fb = base._attention(32.0, 32.0)
    sa, sb = slow._attention(32.0, 32.0)
    assert sa / fa == pytest.approx(1 / r, rel=1e-12)
    assert sb / fb == pytest.approx(1 / r, rel=1e-12)
    # a large GEMM is compute-bound: its memory roof is ~1% of the compute roof, so the
    # smooth max (sharpness 1.36) moves it by 1/r to within a few percent
    g, gs = base._gemm(16384, 16384, 16384), slow._gemm(16384, 16384, 16384)
    assert gs / g == pytest.approx(1 / r, rel=0.03)
    assert gs / g < 1 / r  # never more than the compute roof's own scaling
    # bandwidth-bound kernels do not move
    assert slow._ew(1e9, "norm") == base._ew(1e9, "norm")
    assert slow._gemm(1, 16384, 16384) == pytest.approx(base._gemm(1, 16384, 16384), rel=0.01)


def test_sustained_ratios_are_the_msmf_over_mamf_measurements() -> None:
    # Bekman's mamf-finder, all 8 GPUs busy: H200 BF16 698.6 / 823.9, B200 1426.4 / 1751.2
    assert sustained_ratio("h200") == round(698.6 / 823.9, 3) == 0.848
    assert sustained_ratio("b200") == round(1426.4 / 1751.2, 3) == 0.815
    for gh100 in ("h100-sxm", "h800", "h100-96gb-hbm2e"):  # same die and clocks as H200
        assert sustained_ratio(gh100) == 0.848
    assert sustained_ratio("a100-80gb") == 1.0  # none measured: the fits' own rates
    assert all(e.source for e in sustained_table().values())


def test_workload_prices_the_device_ratio_unless_the_scenario_sets_one() -> None:
    path = ROOT / "scenarios" / "training-power-limit.yaml"
    own = hetsim.run(path).summary.iloc[0]
    assert float(own["sustained_matmul_ratio"]) == 0.848
    set_ = hetsim.run(path, overrides={"workload.sustained_matmul_ratio": 0.848}).summary.iloc[0]
    assert float(set_["tokens_per_s_per_gpu"]) == float(own["tokens_per_s_per_gpu"])


def test_power_limit_sweep_is_monotone_in_the_ratio() -> None:
    path = ROOT / "scenarios" / "training-power-limit.yaml"
    tput = [float(hetsim.run(path, overrides={"workload.sustained_matmul_ratio": r}).summary
                  .iloc[0]["tokens_per_s_per_gpu"]) for r in (1.0, 0.848, 0.7)]  # fmt: skip
    assert tput[0] > tput[1] > tput[2]
    # compute (GEMMs and attention) is most but not all of the step: the throughput falls
    # by less than the ratio
    assert 0.7 < tput[2] / tput[0] < 1.0


def test_fsdp_reduce_scatter_moves_gradients_at_their_width() -> None:
    # Composer's FSDP "DEFAULT" mixed precision reduces gradients in fp32: 4 B per
    # parameter in the reduce-scatter, 2 B in the all-gather of bf16 parameters
    from hetsim.simulator.engine import Simulation
    from hetsim.simulator.runner import build
    from hetsim.simulator.scenario import load_scenario

    path = ROOT / "scenarios" / "training-power-limit.yaml"
    for width in (2, 4):
        sc = load_scenario(path, {"workload.grad_bytes_per_param": width})
        w = build(sc, Simulation(0))
        n = w.model.params_per_layer
        assert w._layer_fsdp_s(False, "reduce_scatter") == w.fabrics.time_s(
            "reduce_scatter", w.layout, "dpcp", n * width
        )
        assert w._layer_fsdp_s(False, "all_gather") == w.fabrics.time_s(
            "all_gather", w.layout, "dpcp", n * 2
        )


# ---- torchtitan's eager elementwise kernels (workloads/training/eager_ops.py) -----------
def test_eager_norm_is_its_six_streaming_kernels_by_hand() -> None:
    from hetsim.workloads.training.eager_ops import eager_op_s

    spec = device_spec("h100-sxm")
    fit = kernel_fits(spec).fits.elementwise
    n = 2 * 8192 * 4096.0  # t h elements
    stream = 3.35e12 * 0.9032  # catalogue bandwidth x its K01 triad efficiency (constant)
    # x.float() 6, pow 8, mean 4, x * rstd 8, type_as 6, * weight 4: 36 B per element
    hand = 6 * fit.floor_s + 36 * n / stream
    assert eager_op_s(spec, fit, "norm", "fwd", n) == pytest.approx(hand, rel=1e-12)
    # rotary: float 6, complex multiply 8, type_as 6 = 20 B per element, both directions
    hand_r = 3 * fit.floor_s + 20 * n / stream
    assert eager_op_s(spec, fit, "rotary", "bwd", n) == pytest.approx(hand_r, rel=1e-12)


def test_repeat_kv_copies_by_hand() -> None:
    from hetsim.workloads.training.eager_ops import repeat_kv_bytes

    assert repeat_kv_bytes(4) == (10.0, 10.0)  # read 2, write 4 x 2; backward the reverse
    assert repeat_kv_bytes(1) == (0.0, 0.0)  # no GQA: a view, no copy


def test_eager_layer_replaces_norm_rotary_and_swiglu_only() -> None:
    from hetsim.workloads.training.eager_ops import eager_op_s, stream_kernel_s

    llama = DenseModel("l", 2, 4096, 32, 8, 14336, 32000, gated_mlp=True)
    kn = StepKnobs(micro_batch=1, seq_len=4096, elementwise_impl="torchtitan-eager")
    spec = device_spec("h100-sxm")
    eager = MicroBatchCost(spec, llama, Layout(), FAB, kn)
    fused = MicroBatchCost(spec, llama, Layout(), FAB, StepKnobs(micro_batch=1, seq_len=4096))
    fit = kernel_fits(spec).fits.elementwise
    t, h, d = 4096.0, 4096, 128
    add = 2 * fused._ew(3 * t * h * 2, "add")  # the two residual adds, as in the fused case
    hand = (add + 2 * eager_op_s(spec, fit, "norm", "fwd", t * h)
            + eager_op_s(spec, fit, "rotary", "fwd", t * 32 * d)
            + eager_op_s(spec, fit, "rotary", "fwd", t * 8 * d)
            + eager_op_s(spec, fit, "swiglu", "fwd", t * 14336)
            + 2 * stream_kernel_s(spec, fit, 10 * t * 8 * d))  # fmt: skip
    assert eager.layer["fwd_elementwise"] == pytest.approx(hand, rel=1e-12)
    assert eager.layer["fwd_gemm"] == fused.layer["fwd_gemm"]
    assert eager.layer["fwd_elementwise"] > fused.layer["fwd_elementwise"]
    assert eager.layer["bwd_elementwise"] > fused.layer["bwd_elementwise"]
