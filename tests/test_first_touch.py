"""First touch of freshly mapped host memory (devices/first_touch.py): glibc's mmap
threshold decides which blocks fault every time, the rate by hand, and the ZeRO-Inference
KV-offload prices that use it (workloads/offload/costs.py) worked out by hand."""

from __future__ import annotations

import pytest

import hetsim
from hetsim.devices.first_touch import MMAP_THRESHOLD_MAX_BYTES, FirstTouch, fresh_every_allocation


def test_glibc_threshold_and_rate_by_hand() -> None:
    # glibc's highest dynamic mmap threshold on 64-bit: 4 MiB x sizeof(long) = 32 MiB
    assert MMAP_THRESHOLD_MAX_BYTES == 33_554_432
    assert not fresh_every_allocation(33_554_431) and fresh_every_allocation(33_554_432)
    ft = FirstTouch()
    # the measurement the default comes from: 1 GiB in 0.3266 s on one thread
    assert ft.time_s(1 << 30) == pytest.approx(0.3266)
    # default cap: pft-threads on 2 x Xeon 8336C, 24 threads between the 21- and
    # 30-thread points, 5,814,379 + (6,153,685 - 5,814,379) x 3/9 = 5,927,481 faults/s,
    # over 898,782 on one thread = 6.595; 4 threads are under the cap, 24 over it
    assert ft.time_s(1 << 30, threads=24) == pytest.approx(0.3266 * 898_782 / 5_927_481, rel=1e-6)
    assert ft.time_s(1 << 30, threads=24) == pytest.approx(0.04952, abs=5e-5)
    assert ft.time_s(1 << 30, threads=4) == pytest.approx(0.3266 / 4)
    one = FirstTouch(parallel_faulters=1.0)  # the sweep's low end: no faster than one
    assert one.time_s(1 << 30, threads=24) == pytest.approx(0.3266)
    # with 4 parallel faulters, 8 threads run at 4x
    four = FirstTouch(parallel_faulters=4.0)
    assert four.time_s(1 << 30, threads=8) == pytest.approx(0.3266 / 4)
    assert four.time_s(1 << 30, threads=2) == pytest.approx(0.3266 / 2)
    # a block below the threshold comes back from the heap: no faults
    assert ft.block_s(33_554_431) == 0.0
    assert ft.block_s(33_554_432) == pytest.approx(33_554_432 * 0.3266 / (1 << 30))
    with pytest.raises(ValueError, match="first_touch_parallel_faulters"):
        FirstTouch(parallel_faulters=0.5)


def _costs(first_touch: FirstTouch | None, **kw: float) -> object:
    from hetsim.devices.catalogue import device_spec
    from hetsim.devices.cpu import CpuModel, cpu_kernels
    from hetsim.workloads.models.dense import model_spec
    from hetsim.workloads.offload.costs import DenseCosts

    spec = device_spec("threadripper-7965wx")
    cpu = CpuModel(spec, cpu_kernels(spec.name))  # 24 threads
    return DenseCosts(
        model_spec("opt-30b"), device_spec("rtx-a6000"), cpu,  # 14336 KV values/token
        weight_bits=4.5, kv_bits=16.0, gpu_dtype="fp16", cpu_format="int4",
        gpu_dequant_s_per_gb=0.0, cpu_calls_per_layer=16, first_touch=first_touch, **kw,
    )  # fmt: skip


def test_upcast_tensors_fault_only_above_the_threshold() -> None:
    ft = FirstTouch(thread_Bps=3.0e9, parallel_faulters=2.0)  # 24 threads -> 6 GB/s
    up, plain = _costs(ft, cpu_kv_upcast_bits=32.0), _costs(None, cpu_kv_upcast_bits=32.0)
    # 24 sequences, 1 new token after 512: 12,312 tokens x 14,336 values x 4 bytes
    # = 706,019,328 bytes of fp32 K and V, two fresh 353 MB blocks: 0.1177 s at 6 GB/s
    extra = up.cpu_attention_s(24, 1, 512) - plain.cpu_attention_s(24, 1, 512)  # type: ignore[attr-defined]
    assert extra == pytest.approx(706_019_328 / 6.0e9)
    # 4 sequences after 99: 400 x 14,336 x 4 = 22.9 MB, two 11.5 MB blocks reused from
    # the heap: no first touch
    small = up.cpu_attention_s(4, 1, 99) - plain.cpu_attention_s(4, 1, 99)  # type: ignore[attr-defined]
    assert small == 0.0


def test_host_kv_buffer_and_staging_first_touch_by_hand() -> None:
    ft = FirstTouch(thread_Bps=3.0e9, parallel_faulters=2.0)
    c = _costs(ft)
    # prompt of 24 x 512 tokens, fp16 host KV: 12,288 x 28,672 = 352,321,536 bytes; the
    # buffer pages by the copy's 24 threads (2 faulting at 3 GB/s each), the K and V
    # staging tensors (176 MB each, fresh) by the one thread receiving the copy
    want = 352_321_536 / 6.0e9 + 352_321_536 / 3.0e9
    assert c.host_kv_first_touch_s(24 * 512, staged=True) == pytest.approx(want)  # type: ignore[attr-defined]
    # one decode token per sequence: 688,128 bytes of new buffer pages, staging 344 KB
    # each (heap)
    assert c.host_kv_first_touch_s(24, staged=True) == pytest.approx(688_128 / 6.0e9)  # type: ignore[attr-defined]
    assert _costs(None).host_kv_first_touch_s(24 * 512, staged=True) == 0.0  # type: ignore[attr-defined]


def test_first_touch_slows_bloom_kv_offload_and_threads_recover_it() -> None:
    # BLOOM-176B, ZeRO-Inference KV offload (v56 setup), 2 decode steps after 64 tokens
    base = {
        "workload.model": "bloom-176b", "workload.batch": 24, "workload.prompt_tokens": 64,
        "workload.output_tokens": 2, "workload.weight_bits": 4.5,
        "workload.cpu_format": "int4", "workload.cpu_kv_upcast_bits": 32,
        "workload.cpu_attention_in_prefill": False,
        "workload.copies_share_cpu_thread": True,
    }  # fmt: skip
    scen = "scenarios/first-touch-robustness.yaml"
    off = hetsim.run(scen, overrides={**base, "workload.host_first_touch": False}).summary
    on = hetsim.run(scen, overrides=base).summary
    wide = hetsim.run(
        scen, overrides={**base, "workload.first_touch_parallel_faulters": 24}
    ).summary
    one = hetsim.run(scen, overrides={**base, "workload.first_touch_parallel_faulters": 1}).summary
    assert (
        one.tbt_mean_s.iloc[0]
        > on.tbt_mean_s.iloc[0]
        > wide.tbt_mean_s.iloc[0]
        > off.tbt_mean_s.iloc[0]
    )
    assert on.ttft_s.iloc[0] >= off.ttft_s.iloc[0]
