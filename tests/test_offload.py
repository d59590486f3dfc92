"""Dense offloading (workloads/offload): the zig-zag block schedule by hand on a 3-layer
toy, CPU-attention pipelining, and the directions of effect of streaming, overlap,
pinned memory, FlexGen's search and confidential-computing copies on short runs."""

from __future__ import annotations

import pytest

import hetsim
from hetsim.workloads.offload.schedule import Clocks, LayerWork, run_layer, zigzag_order


def _three_layers(
    copy_s: float, overlap: bool
) -> tuple[float, list[tuple[str, int, int, float, float]]]:
    # layer 0's weights arrive at 2 s (copied before the step); 2 micro-batches of 1 s each
    c = Clocks(h2d_s=2.0, weights_ready_s=2.0)
    trace: list[tuple[str, int, int, float, float]] = []
    t = 0.0
    for layer in range(3):
        nxt = copy_s if layer < 2 else 0.0
        t = run_layer(c, layer, 2, LayerWork(nxt, 0.0, 1.0, 0.0, 0.0), t, overlap, trace)
    return t, trace


def test_zigzag_block_schedule_on_three_layers() -> None:
    assert zigzag_order(0, 3) == [0, 1, 2] and zigzag_order(1, 3) == [2, 1, 0]
    # overlap, copy 2 s = compute of a layer: 2 (first copy) + 3 layers x 2 s = 8 s
    end, trace = _three_layers(2.0, True)
    assert end == pytest.approx(8.0)
    gpu = [(layer, b) for r, layer, b, _, _ in trace if r == "gpu"]
    assert gpu == [(0, 0), (0, 1), (1, 1), (1, 0), (2, 0), (2, 1)]  # zig-zag
    assert ("h2d-w", 1, -1, 2.0, 4.0) in trace and ("h2d-w", 2, -1, 4.0, 6.0) in trace
    # copy 3 s > compute 2 s: layer 1 waits for its weights until 5, layer 2 until 8
    assert _three_layers(3.0, True)[0] == pytest.approx(10.0)
    # no overlap (accelerate-style): copy after each layer: 2 + 2 + 2 + 2 + 2 + 2 = 12 s
    assert _three_layers(2.0, False)[0] == pytest.approx(12.0)


def test_cpu_attention_pipelines_across_micro_batches() -> None:
    # GPU pre 1 s, CPU attention 2 s, GPU post 1 s, 2 micro-batches:
    # pre b0 0-1, b1 1-2; CPU b0 1-3, b1 3-5; post b0 3-4, b1 5-6
    c = Clocks()
    assert run_layer(c, 0, 2, LayerWork(0.0, 0.0, 1.0, 2.0, 1.0), 0.0, True) == 6.0
    assert (c.cpu_busy_s, c.gpu_busy_s) == (4.0, 4.0)


def _run(path: str, **over: object) -> hetsim.Result:
    return hetsim.run(path, overrides=over)  # type: ignore[arg-type]


def test_streaming_directions_of_effect() -> None:
    base = {"workload.output_tokens": 2, "workload.prompt_tokens": 64}
    fixed = "fixed"
    r = {}
    for name, pol in {
        "overlap": {"name": fixed, "weights_gpu": 0.0, "weights_cpu": 1.0},
        "serial": {"name": fixed, "weights_gpu": 0.0, "weights_cpu": 1.0, "overlap": False},
        "stream": {"name": "layer-stream"},
    }.items():
        r[name] = _run("scenarios/flexgen.yaml", **base, **{"policies.placement": pol}).summary
    t = {k: v.throughput_tokens_per_s.iloc[0] for k, v in r.items()}
    # overlapping copies with compute beats copy-then-compute; pageable beats neither
    assert t["overlap"] > t["serial"] > t["stream"]
    assert r["overlap"].h2d_bytes.iloc[0] == r["stream"].h2d_bytes.iloc[0] > 0


def test_flexgen_plan_fits_and_beats_streaming() -> None:
    base = {"workload.output_tokens": 2, "workload.prompt_tokens": 64}
    fg = _run("scenarios/flexgen.yaml", **base).summary
    st = _run("scenarios/flexgen.yaml", **base, **{"policies.placement": "layer-stream"}).summary
    assert fg.throughput_tokens_per_s.iloc[0] > st.throughput_tokens_per_s.iloc[0]


def test_confidential_copies_slow_streaming_only() -> None:
    base = {"workload.output_tokens": 2, "workload.prompt_tokens": 64,
            "policies.placement": {"name": "fixed", "weights_gpu": 0.0, "weights_cpu": 1.0}}  # fmt: skip
    plain = _run("scenarios/flexgen.yaml", **base).summary
    cc = _run("scenarios/flexgen.yaml", **base, **{"workload.tee": "h100-cc"}).summary
    assert cc.throughput_tokens_per_s.iloc[0] < plain.throughput_tokens_per_s.iloc[0]


def test_bounce_buffer_copy_by_hand() -> None:
    from hetsim.devices.enclave import enclave_preset
    from hetsim.devices.secure_copy import SecureCopy

    spec = enclave_preset("h100-cc")
    cc = SecureCopy.preset("h100-cc", crypto_throughput_Bps=4e9)
    # 1 GB: the CPU encrypts at 4 GB/s (0.25 s + toll), slower than a 0.05 s PCIe copy
    assert cc.copy_time_s(0.05, 10**9) == pytest.approx(spec.setup_latency_s + 0.25)
    # a copy slower than the crypto path is unchanged
    assert cc.copy_time_s(1.0, 10**9) == 1.0


def test_confidential_serving_adds_two_tolls_per_iteration() -> None:
    from hetsim.devices.enclave import enclave_preset
    from hetsim.workloads.serving.params import ServingParams

    spec = enclave_preset("h100-cc")
    plain = ServingParams.model_validate({"requests": {"num_requests": 10}})
    cc = ServingParams.model_validate({"requests": {"num_requests": 10}, "tee": "h100-cc"})
    toll = 2 * (spec.setup_latency_s + 4096 / spec.crypto_throughput_Bps)
    got = cc.overheads().framework_s - plain.overheads().framework_s
    assert got == pytest.approx(toll)


def test_spawned_cpu_split_costs_thread_creation_per_layer() -> None:
    # llama.cpp -nkvo on 16 threads of a Ryzen 7950X-class CPU: one CPU graph per layer.
    # Spawning instead of waking a pool adds, per layer, 15 x 20 us (create/join) minus
    # one barrier (1.96 + 2 x 1.08 us at 16 threads): 32 layers per decode token.
    over = {"workload.output_tokens": 2}
    pool = _run("scenarios/offload-cpu-robustness.yaml", **over,
                **{"workload.cpu_graph_launch": "pool"}).summary  # fmt: skip
    spawn = _run("scenarios/offload-cpu-robustness.yaml", **over).summary
    dt = 1 / spawn.decode_tokens_per_s.iloc[0] - 1 / pool.decode_tokens_per_s.iloc[0]
    assert dt == pytest.approx(32 * (15 * 20e-6 - (1.96e-6 + 2 * 1.08e-6)), rel=1e-6)


def test_pageable_copies_and_cpu_attention_share_the_host_thread() -> None:
    # one micro-batch; next weights 3 s, GPU pre 1 s, CPU attention 2 s, GPU post 1 s.
    # Separate threads: copy 0-3 beside pre 0-1, CPU 1-3, post 3-4 -> layer ends at 4.
    w = LayerWork(3.0, 0.0, 1.0, 2.0, 1.0)
    c = Clocks()
    assert run_layer(c, 0, 1, w, 0.0, True) == 4.0
    # One host thread (pageable copy staged by the thread that runs the CPU kernels):
    # the CPU attention waits for the copy, 3-5, post 5-6; the next layer's copy is
    # issued at its start (6 s), after the CPU is free.
    c = Clocks()
    trace: list[tuple[str, int, int, float, float]] = []
    assert run_layer(c, 0, 1, w, 0.0, True, trace, host_shared=True) == 6.0
    assert ("cpu", 0, 0, 3.0, 5.0) in trace
    assert run_layer(c, 1, 1, w, 6.0, True, trace, host_shared=True) == 12.0
    assert ("h2d-w", 2, -1, 6.0, 9.0) in trace


def test_host_kv_width_and_upcast_bytes_by_hand() -> None:
    from hetsim.devices.catalogue import device_spec
    from hetsim.devices.cpu import CpuModel, cpu_kernels
    from hetsim.workloads.models.dense import model_spec
    from hetsim.workloads.offload.costs import DenseCosts

    spec = device_spec("threadripper-7965wx")
    cpu = CpuModel(spec, cpu_kernels(spec.name))
    model = model_spec("opt-30b")  # 56 heads x 128 = 7168 hidden: 14336 KV values/token
    kw = {"weight_bits": 4.5, "kv_bits": 16.0, "gpu_dtype": "fp16", "cpu_format": "int4",
          "gpu_dequant_s_per_gb": 0.0, "cpu_calls_per_layer": 16}  # fmt: skip
    gpu = device_spec("rtx-a6000")
    plain = DenseCosts(model, gpu, cpu, **kw)  # type: ignore[arg-type]
    fp32 = DenseCosts(model, gpu, cpu, host_kv_bits=32.0, **kw)  # type: ignore[arg-type]
    up = DenseCosts(model, gpu, cpu, cpu_kv_upcast_bits=32.0, **kw)  # type: ignore[arg-type]
    assert plain.host_kv_bytes_per_token_layer == 14336 * 2
    assert fp32.host_kv_bytes_per_token_layer == 14336 * 4
    # 4 sequences, 1 new token after 99: 400 tokens of KV; flops 4 x 4 x 100 x 7168
    flops = 4.0 * 4 * 1 * 100.0 * 7168
    for costs, per_token in ((plain, 2), (fp32, 4), (up, 2 + 2 * 4)):
        want = cpu.stream_time_s(400 * 14336 * per_token, flops)
        assert costs.cpu_attention_s(4, 1, 99) == pytest.approx(want)
    # bandwidth-bound at these sizes, so the three prices differ in the bytes' ratio
    t = [c.cpu_attention_s(4, 1, 99) - cpu.call_overhead_s for c in (plain, fp32, up)]
    assert t[1] / t[0] == pytest.approx(2.0) and t[2] / t[0] == pytest.approx(5.0)


def test_zero_inference_kv_offload_switches_by_direction() -> None:
    # V55-style run on the flexgen node: weights streamed from pageable host memory, KV on
    # the host, attention on the CPU. Sharing the host thread serialises the weight copies
    # with the CPU attention (decode slower); attending on the GPU during the prefill
    # removes the prefill's CPU attention (TTFT shorter); fp32 host KV doubles the CPU
    # attention's bytes (decode slower still).
    base = {"workload.batch": 8, "workload.prompt_tokens": 64, "workload.output_tokens": 2,
            "policies.placement": {"name": "fixed", "weights_gpu": 0.0, "weights_cpu": 1.0,
                                   "kv_gpu": 0.0, "attention_on_cpu": True, "pinned": False}}  # fmt: skip
    plain = _run("scenarios/flexgen.yaml", **base).summary
    shared = _run("scenarios/flexgen.yaml", **base,
                  **{"workload.copies_share_cpu_thread": True}).summary  # fmt: skip
    gpu_pre = _run("scenarios/flexgen.yaml", **base,
                   **{"workload.cpu_attention_in_prefill": False}).summary  # fmt: skip
    wide = _run("scenarios/flexgen.yaml", **base, **{"workload.copies_share_cpu_thread": True,
                                                     "workload.host_kv_bits": 32}).summary  # fmt: skip
    assert shared.tbt_mean_s.iloc[0] > plain.tbt_mean_s.iloc[0]
    assert wide.tbt_mean_s.iloc[0] > shared.tbt_mean_s.iloc[0]
    assert gpu_pre.ttft_s.iloc[0] < plain.ttft_s.iloc[0]


def test_streamed_embeddings_add_two_fetches_per_step() -> None:
    # OPT-30B fp16 on the flexgen node, weights streamed from pageable memory (copy-bound).
    # Streaming the embedding and the LM head adds, to every step, two copies of the
    # 50272 x 7168 matrix (720,699,392 bytes) at the pageable rate: half the Xeon 5220R
    # core bandwidth, 7.5 GB/s (below PCIe 3.0's 12.2 GB/s), plus 5 us link latency each.
    base = {"workload.batch": 8, "workload.prompt_tokens": 64, "workload.output_tokens": 3,
            "policies.placement": {"name": "fixed", "weights_gpu": 0.0, "weights_cpu": 1.0,
                                   "pinned": False}}  # fmt: skip
    a = _run("scenarios/flexgen.yaml", **base).summary
    b = _run("scenarios/flexgen.yaml", **base, **{"workload.embeddings_streamed": True}).summary
    # the pageable rate is the measured pageable/pinned ratio of devices/host_copy.py
    # (0.539 for H2D) times the pinned PCIe 3.0 rate: the same two fetches in every step
    fetch = b.ttft_s.iloc[0] - a.ttft_s.iloc[0]
    assert b.tbt_mean_s.iloc[0] - a.tbt_mean_s.iloc[0] == pytest.approx(fetch, rel=1e-9)
    rate = 720_699_392 / (fetch / 2 - 5e-6)
    assert 0.45 * 12.2e9 < rate < 0.6 * 12.2e9
    assert b.h2d_bytes.iloc[0] - a.h2d_bytes.iloc[0] == 4 * 2 * 720_699_392
