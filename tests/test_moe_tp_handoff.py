"""MoE hybrid engines: the per-layer GPU<->CPU hand-off and tensor parallelism on the GPU
side, worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

import hetsim
from hetsim.devices.catalogue import device_spec, link_spec
from hetsim.simulator.engine import Simulation
from hetsim.simulator.runner import build
from hetsim.workloads.models.moe import load_moe_models
from hetsim.workloads.moe.costs import MoECosts, StepCosts
from hetsim.workloads.moe.layer import timeline
from hetsim.workloads.moe.residency import Residency
from hetsim.workloads.moe.view import Placement, PlacementView
from hetsim.workloads.moe.workload import D2H_RATIO

A = np.asarray


def test_handoff_delays_the_cpu_path_but_is_not_cpu_work() -> None:
    # One CPU expert of 4 s; router at 10.5; intercept 0.3 and hand-off 0.2 (together the
    # view's cpu_first_s): CPU path ends at 10.5 + 0.5 + 4 = 15.0; the CPU is busy 4.3.
    view = PlacementView(0, "decode", (2,), (1,), (False,), (0.0,), (9.0,), (4.0,), 0.5, 2.0,
                         0.25, 0.0, 0.0, False, 0.75, 2.0)  # fmt: skip
    step = StepCosts(0.5, 1.5, 0.25, 0.5, 0.0, 0.0, handoff_s=0.2)
    router, end, _, cbusy, _, _, _ = timeline(
        view, Placement((), (2,)), Residency((0,), 3, 2.0), 10.0, step, False
    )
    assert router == 10.5 and end == pytest.approx(15.0) and cbusy == pytest.approx(4.3)


def _layers(handoff: bool) -> object:
    over = {
        "workload.output_tokens": 2, "workload.prompt_tokens": 4, "workload.phase": "decode",
        "workload.cache_fraction": 0.0, "workload.cpu_handoff": handoff,
        "policies": {"gating": "topk", "placement": "ktransformers", "prefetch": "none",
                     "cache": "static"},
    }  # fmt: skip
    r = hetsim.run("scenarios/hybrimoe.yaml", overrides=over)
    return r.tables["layers"]


def test_handoff_adds_two_copies_per_layer_by_hand() -> None:
    # Every routed expert on the CPU (no GPU cache): each MoE layer's barrier is the CPU
    # path, so the hand-off moves each layer's (end - router) by exactly one D2H + one H2D
    # of one token's fp16 hidden state (V2-Lite: 2048 x 2 B = 4096 B) over PCIe 3.0:
    # 2 x 5 us latency + 4096 / (B eff) / 0.854 + 4096 / (B eff).
    off, on = _layers(False), _layers(True)
    link = link_spec("pcie3-x16")
    nbytes = 2048 * 2.0
    bw = link.effective_bandwidth_Bps(nbytes)
    want = 2 * link.latency_s + nbytes / (bw * D2H_RATIO) + nbytes / bw
    d_on = (on.end_s - on.router_s).to_numpy()  # type: ignore[attr-defined]
    d_off = (off.end_s - off.router_s).to_numpy()  # type: ignore[attr-defined]
    assert (on.cpu_experts > 0).all()  # type: ignore[attr-defined]
    assert d_on - d_off == pytest.approx(np.full(len(d_on), want), rel=1e-9)
    assert on.cpu_busy_s.sum() == pytest.approx(off.cpu_busy_s.sum(), rel=1e-12)  # type: ignore[attr-defined]


def _costs(tp: int, allreduce: object = None) -> MoECosts:
    return MoECosts(
        load_moe_models()["mixtral-8x7b"], device_spec("l40s"), device_spec("xeon-8480"),
        0.001, expert_bits=16, dense_bits=16, gpu_dtype="fp16", cpu_dtype="fp32",
        max_tokens=8192, gpu_tp=tp, tp_allreduce_s=allreduce,  # type: ignore[arg-type]
    )  # fmt: skip


def test_tensor_parallel_splits_gpu_work_and_adds_two_allreduces() -> None:
    one = _costs(1)
    four = _costs(4, lambda nbytes: 1e-9 * nbytes)
    # a large prefill is GEMM-bound: the GPU share of each op falls close to 1/4
    ratio = four.gpu_expert_s[8192] / one.gpu_expert_s[8192]
    assert 0.25 <= ratio <= 0.3
    s1, s4 = one.step(8192, 0), four.step(8192, 0)
    # two all-reduces of 8192 x 4096 fp16 activations at 1 ns per byte
    reduce_s = 2 * 1e-9 * 8192 * 4096 * 2
    assert s4.attention_gpu_s > reduce_s
    assert (s4.attention_gpu_s - reduce_s) / s1.attention_gpu_s < 0.5
    assert s4.lm_head_s < s1.lm_head_s
    with pytest.raises(ValueError, match="gpu_tp"):
        _costs(2)  # tensor parallel without an all-reduce price


def test_tp_allreduce_is_a_ring_over_the_host_link_by_hand() -> None:
    # gpu_tp 4 on hybrimoe's A6000 + PCIe 3.0: 2 (n - 1) = 6 steps, each one link latency
    # plus a quarter of the bytes at the link's effective rate for that size.
    sc = hetsim.load_scenario("scenarios/hybrimoe.yaml").with_overrides(
        {"workload.gpu_tp": 4, "workload.output_tokens": 1}, keep_sweep=False
    )
    w = build(sc, Simulation(sc.seed, record_spans=False))
    link = link_spec("pcie3-x16")
    nbytes = 128 * 2048 * 2.0  # a 128-token prompt's fp16 hidden states (V2-Lite)
    chunk = nbytes / 4
    want = 6 * (link.latency_s + chunk / link.effective_bandwidth_Bps(chunk))
    assert w.costs.tp_allreduce_s(nbytes) == pytest.approx(want, rel=1e-12)
    assert w.costs._tp_reduce_s(128) == pytest.approx(2 * want, rel=1e-12)


def test_host_callbacks_add_their_latency_to_every_cpu_expert_layer() -> None:
    # DeepSeek-V3 (58 MoE layers, every routed expert on the CPU but the static 1%): two
    # host functions of 100 us per MoE layer lengthen each decode token by 58 x 2 x 100 us
    # when the CPU path is the critical one (it is: the CPU runs the experts).
    base = {"workload.output_tokens": 4, "workload.prompt_tokens": 16}
    path = "scenarios/hybrid-sync-robustness.yaml"
    tbt = {}
    for n in (0, 2):
        over = {**base, "workload.host_callbacks_per_layer": n}
        tbt[n] = hetsim.run(path, overrides=over).summary_row["tbt_mean_s"]
    assert tbt[2] - tbt[0] == pytest.approx(58 * 2 * 100e-6, rel=1e-6)


def test_sched_splits_add_two_per_cpu_expert_layer_and_match_the_published_split() -> None:
    # ggml's scheduler: a CPU-expert layer is cut into GPU | CPU | GPU, two boundaries of
    # sched_split_s each; 58 MoE layers, the CPU path critical -> + 58 x 2 x 40 us a token
    from hetsim.workloads.moe.workload import SCHED_SPLIT_HIGH_S, SCHED_SPLIT_S

    base = {"workload.output_tokens": 4, "workload.prompt_tokens": 16,
            "workload.host_callbacks_per_layer": 0}  # fmt: skip
    path = "scenarios/hybrid-sync-robustness.yaml"
    tbt = {}
    for s in (0.0, 40e-6):
        over = {**base, "workload.sched_split_s": s}
        tbt[s] = hetsim.run(path, overrides=over).summary_row["tbt_mean_s"]
    assert tbt[40e-6] - tbt[0.0] == pytest.approx(58 * 2 * 40e-6, rel=1e-6)
    # ik_llama.cpp PR #232: 11% of 11.53 s over 640 tokens x 25 CPU layers x 2 splits;
    # the whole 1.88 s residual over the same splits bounds it from above
    assert SCHED_SPLIT_S == pytest.approx(0.11 * 11.53 / 32000) == pytest.approx(39.63e-6, rel=1e-3)
    assert SCHED_SPLIT_S < SCHED_SPLIT_HIGH_S == pytest.approx(58.75e-6)


def test_shared_expert_after_cpu_experts_serialises_the_layer() -> None:
    # As the first test (router 10.5, CPU path ends 15.0, shared expert 0.25 s on the
    # GPU): overlapped, the layer ends at 15.0; in ggml's split order the shared expert
    # runs after the CPU split: 15.0 + 0.25. Busy times do not change.
    view = PlacementView(0, "decode", (2,), (1,), (False,), (0.0,), (9.0,), (4.0,), 0.5, 2.0,
                         0.25, 0.0, 0.0, False, 0.75, 2.0)  # fmt: skip
    step = StepCosts(0.5, 1.5, 0.25, 0.5, 0.0, 0.0, handoff_s=0.2)

    def run(placement: Placement, serial: bool) -> tuple:  # type: ignore[type-arg]
        res = Residency((0,), 3, 2.0)
        return timeline(view, placement, res, 10.0, step, False, shared_after_cpu=serial)

    runs = [run(Placement((), (2,)), serial) for serial in (False, True)]
    assert runs[0][1] == pytest.approx(15.0) and runs[1][1] == pytest.approx(15.25)
    assert runs[0][2:4] == runs[1][2:4]
    # a layer without CPU experts is not affected: GPU expert (9 s) after the shared one
    gpu_only = [run(Placement((2,), ()), serial)[1] for serial in (False, True)]
    assert gpu_only[0] == gpu_only[1]
