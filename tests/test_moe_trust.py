"""A MoE run's error band and fits (workloads/moe/trust.py)."""

from __future__ import annotations

import pytest

import hetsim
from hetsim.devices.kernels import UNCALIBRATED_RESIDUAL, residual_band
from hetsim.workloads.moe.trust import moe_trust

SMALL = {"workload.output_tokens": 2, "workload.prompt_tokens": 4, "workload.phase": "decode"}


def _costs():  # type: ignore[no-untyped-def]
    from hetsim.simulator.engine import Simulation
    from hetsim.simulator.runner import build

    sc = hetsim.load_scenario("scenarios/hybrimoe.yaml", SMALL)
    return build(sc, Simulation(sc.seed, record_spans=False)).costs


def test_gpu_only_band_is_the_kernel_residuals_and_cpu_work_is_uncalibrated() -> None:
    costs = _costs()
    shares = costs.gpu_class_seconds(4, 2.0)
    assert shares["gemm"] > 0 and shares["attention_decode"] > 0
    g50, g90 = residual_band(costs.fits, shares)
    gpu = moe_trust(costs, 4, 2.0, gpu_busy_s=1.0, cpu_busy_s=0.0)
    assert (gpu["model_error_p50"], gpu["model_error_p90"]) == (round(g50, 4), round(g90, 4))
    assert gpu["model_fits"] == costs.fits.kind and "cpu" not in gpu["kernel_classes"]
    cpu = moe_trust(costs, 4, 2.0, gpu_busy_s=0.0, cpu_busy_s=1.0)
    assert cpu["model_error_p50"] == pytest.approx(UNCALIBRATED_RESIDUAL[0])
    assert cpu["model_fits"] == "uncalibrated" and cpu["kernel_classes"].endswith("cpu")
    half = moe_trust(costs, 4, 2.0, gpu_busy_s=1.0, cpu_busy_s=1.0)
    assert half["model_error_p90"] == pytest.approx((g90 + UNCALIBRATED_RESIDUAL[1]) / 2, abs=1e-4)


def test_gpu_class_seconds_add_up_to_the_priced_attention_block() -> None:
    costs = _costs()
    parts = costs.gpu_class_seconds(4, 0.0)  # no routed experts: attention + shared expert
    shared = costs.model.shared_ffn
    assert shared > 0  # DeepSeek-V2-Lite has shared experts
    mlp = sum(float(t) for t in costs._gpu_mlp_parts(shared, 1, costs.expert_precision))
    assert sum(parts.values()) == pytest.approx(costs._gpu_attention_s(1, 4, 1) + mlp)


def test_run_summary_carries_the_band() -> None:
    row = hetsim.run("scenarios/hybrimoe.yaml", overrides=SMALL).summary.iloc[0]
    assert 0 < row["model_error_p50"] <= row["model_error_p90"]
    assert row["model_fits"] in ("calibrated", "borrowed", "uncalibrated")
