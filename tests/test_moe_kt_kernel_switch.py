"""kt-kernel's AMX/AVX-512 kernel switch on the CPU experts (workloads/moe/costs.py,
``cpu_amx_tokens_per_expert``), worked out by hand on a made-up model and CPU."""

from __future__ import annotations

import pytest

from hetsim.devices.catalogue import device_spec
from hetsim.devices.cpu import CpuKernels, CpuModel
from hetsim.devices.spec import DeviceSpec, EfficiencyCurve
from hetsim.workloads.models.moe import MoEModel
from hetsim.workloads.moe.costs import MoECosts

# 8 experts of 3 x 1024 x 2048 = 6,291,456 weights, top-2
MODEL = MoEModel(name="toy", layers=2, hidden=1024, routed_experts=8, top_k=2,
                 expert_ffn=2048, attention_params=4 * 1024 * 1024, kv_bytes_per_token=1024,
                 vocab=1000)  # fmt: skip
SPEC = DeviceSpec(name="toy", display_name="toy", vendor="x", kind="cpu",
                  peak_flops={"fp32": 1e12}, memory_bytes=1 << 40, memory_bandwidth_Bps=1e12,
                  memory_efficiency=EfficiencyCurve(1.0), cores=4)  # fmt: skip
# 4 threads x 1 GHz; int4 vector rate 4 weights/cycle/core: one token row of one expert
# = 6,291,456 / (4e9 x 4) = 393.216 us; AMX: 1024 FLOP/cycle x 0.5 x 2 (int8 path)
KERN = CpuKernels(clock_hz=1e9, vector_flops_per_cycle=32, matrix_flops_per_cycle=1024,
                  core_bandwidth_Bps=1e12, dequant_weights_per_cycle={"int4": 4.0},
                  remote_bandwidth_ratio=0.5, gemm_efficiency=0.5, call_overhead_s=0.0,
                  int8_gemm_speedup=2.0)  # fmt: skip
ROW_S = 3 * 1024 * 2048 / (4e9 * 4.0)
MATRIX_S_PER_TOKEN = 2.0 * 3 * 1024 * 2048 / (4e9 * 1024 * 0.5 * 2.0)


def _costs(switch: float | None) -> MoECosts:
    cpu = CpuModel(SPEC, KERN, threads=4)
    return MoECosts(
        MODEL, device_spec("l40s"), SPEC, 0.001, expert_bits=4.0, dense_bits=16,
        gpu_dtype="fp16", cpu_dtype="fp32", max_tokens=64, cpu_model=cpu, cpu_format="int4",
        cpu_calls_per_expert=1, cpu_amx_tokens_per_expert=switch,
    )  # fmt: skip


def test_decode_batch_runs_the_vector_kernel_whose_time_grows_with_tokens() -> None:
    # loads (3, 3, 2): 8 expert-tokens <= 4 x 8 experts = 32 -> AVX-512 vector path:
    # each expert 3, 3, 2 token rows (memory: 3.1 MB at 1 TB/s = 3 us, not binding)
    _, cpu = _costs(4.0).expert_times((3, 3, 2))
    assert cpu == pytest.approx((3 * ROW_S, 3 * ROW_S, 2 * ROW_S), rel=1e-9)
    # the old rule (null) takes the AMX path at 3 tokens: one dequantise + the GEMM
    _, auto = _costs(None).expert_times((3, 3, 2))
    assert auto[0] == pytest.approx(ROW_S + 3 * MATRIX_S_PER_TOKEN, rel=1e-9)
    assert auto[0] < cpu[0]


def test_more_than_four_tokens_per_expert_switches_to_amx() -> None:
    # 8 experts x 5 tokens = 40 > 32 expert-tokens: AMX path (one dequantise + GEMM)
    _, cpu = _costs(4.0).expert_times((5,) * 8)
    assert cpu[0] == pytest.approx(ROW_S + 5 * MATRIX_S_PER_TOKEN, rel=1e-9)
    # exactly 4 per expert (32) stays on the vector path (kt-kernel: qlen > 4 E / k)
    _, cpu = _costs(4.0).expert_times((4,) * 8)
    assert cpu[0] == pytest.approx(4 * ROW_S, rel=1e-9)


def test_switch_ignored_outside_the_int8_path_formats() -> None:
    kern = CpuKernels(**{**KERN.__dict__, "dequant_weights_per_cycle": {"q4_k": 4.0}})
    cpu = CpuModel(SPEC, kern, threads=4)
    costs = MoECosts(
        MODEL, device_spec("l40s"), SPEC, 0.001, expert_bits=4.0, dense_bits=16,
        gpu_dtype="fp16", cpu_dtype="fp32", max_tokens=64, cpu_model=cpu, cpu_format="q4_k",
        cpu_calls_per_expert=1, cpu_amx_tokens_per_expert=4.0,
    )  # fmt: skip
    assert costs.cpu_matrix_s is None
    # q4_k is not on the int8 matrix path: GEMM at the bf16 rate, min with the GEMV
    _, cpu_s = costs.expert_times((3,))
    assert cpu_s[0] == pytest.approx(min(3 * ROW_S, ROW_S + 3 * 2 * MATRIX_S_PER_TOKEN))
