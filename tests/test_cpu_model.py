"""CPU compute model (devices/cpu.py): bandwidth thread scaling, NUMA, GEMV/GEMM paths and
per-call overhead, each worked out by hand on a made-up CPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hetsim.devices.catalogue import device_spec
from hetsim.devices.cpu import CpuKernels, CpuModel, cpu_kernels
from hetsim.devices.spec import DeviceSpec, EfficiencyCurve

SPEC = DeviceSpec(name="toy", display_name="toy", vendor="x", kind="cpu",
                  peak_flops={"fp32": 1e12}, memory_bytes=1 << 40, memory_bandwidth_Bps=100e9,
                  memory_efficiency=EfficiencyCurve(0.8), cores=8)  # fmt: skip
KERN = CpuKernels(clock_hz=1e9, vector_flops_per_cycle=32, matrix_flops_per_cycle=64,
                  core_bandwidth_Bps=20e9, dequant_weights_per_cycle={"q4_0": 8.0},
                  remote_bandwidth_ratio=0.5, gemm_efficiency=0.5, call_overhead_s=1e-6)  # fmt: skip


def test_thread_scaling_saturates_at_socket_bandwidth() -> None:
    # 2 cores x 20 GB/s = 40 GB/s < 0.8 x 100 GB/s; 8 cores -> capped at 80 GB/s
    assert CpuModel(SPEC, KERN, threads=2).bandwidth_Bps == pytest.approx(40e9)
    assert CpuModel(SPEC, KERN, threads=8).bandwidth_Bps == pytest.approx(80e9)


def test_two_sockets_speed_up_below_two() -> None:
    # interleaved weights: half remote at 0.5 x local -> per socket 2r/(1+r) = 2/3 of local;
    # two sockets: 2 x 80 x 2/3 = 106.7 GB/s, speed-up 4r/(1+r) = 1.333 (not 2)
    two = CpuModel(SPEC, KERN, threads=16, sockets=2)
    assert two.bandwidth_Bps == pytest.approx(2 * 80e9 * 2 / 3)
    assert two.two_socket_speedup() == pytest.approx(4 / 3)
    # one copy per socket (kTransformers' NUMA mode): local reads only, 2x
    rep = CpuModel(SPEC, KERN, threads=16, sockets=2, numa="replicate")
    assert rep.two_socket_speedup() == pytest.approx(2.0)
    # with the shipped H02 ratio (0.438) every catalogue CPU gets 4r/(1+r) = 1.218
    x = CpuModel(SPEC, cpu_kernels("xeon-8480"), threads=16, sockets=2)
    assert x.two_socket_speedup() == pytest.approx(4 * 0.438 / 1.438)


def test_gemv_and_gemm_paths() -> None:
    cpu = CpuModel(SPEC, KERN, threads=8)
    p, nbytes = 1e9, 0.5e9  # 4-bit weights
    # decode: memory 0.5e9 / 80e9 = 6.25 ms; GEMV 1e9 / (8 x 1e9 x 8) = 15.625 ms
    assert cpu.matmul_time_s(p, 1, nbytes, "q4_0") == pytest.approx(15.625e-3 + 1e-6)
    # 100 tokens: GEMM 2e11 / (8e9 x 64 x 0.5) + dequantise once 15.625 ms = 0.796875 s
    # (GEMV would take 1.5625 s)
    assert cpu.matmul_time_s(p, 100, nbytes, "q4_0") == pytest.approx(0.796875 + 1e-6)
    assert cpu.matmul_times_s(p, np.array([0]), nbytes, "q4_0")[0] == 0.0
    # a bandwidth-bound stream with the call overhead: 8e9 B / 80e9 B/s + 1 us
    assert cpu.stream_time_s(8e9) == pytest.approx(0.1 + 1e-6)


def test_forced_kernel_paths() -> None:
    # an engine that picks its kernel by its own rule (kt-kernel) forces one path:
    cpu = CpuModel(SPEC, KERN, threads=8)
    p, nbytes = 1e9, 0.5e9
    # vector at 100 tokens: the GEMV term, 100 x 15.625 ms (auto takes the GEMM's 0.797 s)
    assert cpu.matmul_time_s(p, 100, nbytes, "q4_0") == pytest.approx(0.796875 + 1e-6)
    t = cpu.matmul_times_s(p, np.array([100]), nbytes, "q4_0", path="vector")[0]
    assert t == pytest.approx(1.5625 + 1e-6)
    # matrix at 1 token: 2e9 / (8e9 x 64 x 0.5) = 7.8125 ms + dequantise once 15.625 ms
    # (auto takes the GEMV's 15.625 ms)
    t = cpu.matmul_times_s(p, np.array([1]), nbytes, "q4_0", path="matrix")[0]
    assert t == pytest.approx(23.4375e-3 + 1e-6)


def test_bad_kernel_fields_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"cpu_kernels\.gemm_efficiency"):
        cpu_kernels("xeon-8480", {"gemm_efficiency": 2.0})
    with pytest.raises(ValueError, match=r"cpu_kernels\.warp"):
        cpu_kernels("xeon-8480", {"warp": 1})
    with pytest.raises(ValueError, match="weight format 'q9'"):
        CpuModel(SPEC, KERN).matmul_time_s(1e6, 1, 1e6, "q9")
    with pytest.raises(ValueError, match="cpu_threads"):
        CpuModel(SPEC, KERN, threads=9)


def test_barrier_grows_per_doubling_of_threads_beyond_four() -> None:
    # B1 form: 1 us up to 4 threads, + 0.5 us per doubling: 8 threads 1.5 us, 2 threads 1 us
    import dataclasses

    k = dataclasses.replace(KERN, call_overhead_per_doubling_s=0.5e-6)
    assert CpuModel(SPEC, k, threads=2).call_overhead_s == pytest.approx(1e-6)
    assert CpuModel(SPEC, k, threads=8).call_overhead_s == pytest.approx(1.5e-6)
    cpu = CpuModel(SPEC, k, threads=8)
    assert cpu.stream_time_s(8e9) == pytest.approx(0.1 + 1.5e-6)
    # a CPU graph started from another backend: a pool wakes with one barrier, a spawning
    # engine creates and joins 7 threads
    k2 = dataclasses.replace(k, thread_spawn_s=10e-6)
    assert CpuModel(SPEC, k2, threads=8).launch_s("pool") == pytest.approx(1.5e-6)
    assert CpuModel(SPEC, k2, threads=8).launch_s("spawn") == pytest.approx(70e-6)


def test_gemv_bandwidth_efficiency_slows_only_the_weight_stream() -> None:
    import dataclasses

    k = dataclasses.replace(KERN, gemv_bandwidth_efficiency=0.5, dequant_weights_per_cycle={
        "q4_0": 1000.0})  # fmt: skip
    cpu = CpuModel(SPEC, k, threads=8)
    # weights 0.8e9 B at 0.5 x 80 GB/s = 20 ms, activations 4e6 B at 80 GB/s = 0.05 ms
    t = cpu.matmul_time_s(1e9, 1, 0.8e9, "q4_0", act_bytes_per_token=4e6)
    assert t == pytest.approx(20e-3 + 0.05e-3 + 1e-6)
    with pytest.raises(ValueError, match=r"cpu_kernels\.gemv_bandwidth_efficiency"):
        cpu_kernels("xeon-8480", {"gemv_bandwidth_efficiency": 0.0})


def test_die_fabric_ceiling_binds_below_the_socket() -> None:
    # 4 dies x (32 B x 0.5 GHz x 1 link x 0.75) = 4 x 12 GB/s = 48 GB/s < 80 GB/s socket
    chiplet = dataclasses.replace(KERN, dies=4, die_read_bytes_per_cycle=32,
                                  fabric_clock_hz=0.5e9, die_link_efficiency=0.75)  # fmt: skip
    assert chiplet.die_bandwidth_Bps == pytest.approx(12e9)
    assert CpuModel(SPEC, chiplet, threads=8).bandwidth_Bps == pytest.approx(48e9)
    # 2 threads spread over 2 dies: min(2 x 20, 2 x 12, 80) = 24 GB/s
    assert CpuModel(SPEC, chiplet, threads=2).bandwidth_Bps == pytest.approx(24e9)
    # two links per die double the ceiling: min(8 x 20, 4 x 24, 80) = 80 (the socket binds)
    wide = dataclasses.replace(chiplet, die_links=2)
    assert CpuModel(SPEC, wide, threads=8).bandwidth_Bps == pytest.approx(80e9)
    # a monolithic CPU (dies 0) has no per-die ceiling
    assert KERN.die_bandwidth_Bps == float("inf")
    with pytest.raises(ValueError, match="dies"):
        dataclasses.replace(KERN, dies=1.5)


def test_shipped_zen2_link_efficiency_reproduces_its_measurement() -> None:
    # B7: one Zen 2 CCD at a 1.333 GHz fabric clock (DDR4-2666) saturated at 36.9 GB/s
    zen2 = dataclasses.replace(cpu_kernels("epyc-9654"), fabric_clock_hz=2666e6 / 2)
    assert zen2.die_bandwidth_Bps == pytest.approx(36.9e9, rel=0.01)
    # the catalogue's 4-CCD workstation part wires two links per CCD (EPYC 9004's 4-CCD
    # mode): 4 x 2 x 32 x 1.8e9 x 0.865 = 398.6 GB/s, so its STREAM-fitted socket rate
    # (8 x 5200 MT/s x 8 B x 0.82 = 272.9 GB/s) binds; with one link the CCDs would
    # (4 x 32 x 1.8e9 x 0.865 = 199.3 GB/s)
    k = cpu_kernels("threadripper-7965wx")
    tr = CpuModel(device_spec("threadripper-7965wx"), k, threads=24)
    assert tr.bandwidth_Bps == pytest.approx(8 * 5200e6 * 8 * 0.82)
    narrow = cpu_kernels("threadripper-7965wx", {"die_links": 1})
    tr1 = CpuModel(device_spec("threadripper-7965wx"), narrow, threads=24)
    assert tr1.bandwidth_Bps == pytest.approx(4 * 32 * 1.8e9 * 0.865)
