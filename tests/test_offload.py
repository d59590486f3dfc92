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
