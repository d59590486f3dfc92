"""AMX GEMM calibration (devices/cpu_amx_calibration.py): the points' independence from the
validation set, the fit and the thread interpolation worked out by hand, and the shipped
constants equal to a refit."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from hetsim.devices.cpu import KERNEL_FILE, CpuModel, _yaml_load, cpu_kernels
from hetsim.devices.cpu_amx_calibration import (
    AMX_CPUS,
    fit,
    load_points,
    predicted,
    report,
    stored_fit,
)
from hetsim.devices.spec import DeviceSpec, EfficiencyCurve
from tests.validation_sources import is_validation_source, validation_keys

# the kt-kernel tutorials behind V57-V62 (endtoend.csv sources): never a calibration point
VALIDATION_DOCS = ("MiniMax-M2.1-Tutorial.md", "Kimi-K2-Thinking-Native.md", "Kimi-K2-Thinking.md")


def test_no_point_shares_a_source_with_a_validation_row() -> None:
    _, files = validation_keys()
    assert ("kvcache-ai/ktransformers", "doc/en/kt-kernel/MiniMax-M2.1-Tutorial.md") in files
    for p in load_points():
        assert not is_validation_source(p.source_repo, p.source_ref), p.id
        assert not any(doc in p.source or doc in p.source_ref for doc in VALIDATION_DOCS), p.id


def test_ratios_and_fit_by_hand() -> None:
    pts = {p.id: p for p in load_points()}
    # A01: 21 TFLOP/s over 64 cores x 2.2 GHz x 1024 bf16 FLOP/cycle
    kt_bf16 = 21e12 / (64 * 2.2e9 * 1024)
    assert pts["A01"].ratio() == pytest.approx(kt_bf16)
    assert kt_bf16 == pytest.approx(0.1457, abs=1e-4)
    f = fit(load_points())
    # few: johnnyw3 median(1279/(2.4 x 1024), 4810/(4 x 2.4 x 1024)) GFLOP, #1214 0.5;
    # two sources: the median is their mean
    johnnyw3 = (1279e9 / (2.4e9 * 1024) + 4810e9 / (4 * 2.4e9 * 1024)) / 2
    assert f.few == pytest.approx((johnnyw3 + 0.5) / 2)
    # full: kt 0.1457 and oneDNN #1992's stated 0.20
    assert f.full == pytest.approx((kt_bf16 + 0.20) / 2)
    # int8 over bf16, same sentence and machine: 35 / 21
    assert f.int8_speedup == pytest.approx(35 / 21)


def test_thread_interpolation_closed_form() -> None:
    k = dataclasses.replace(cpu_kernels("xeon-8480"), gemm_efficiency=0.5,
                            gemm_efficiency_full_socket=0.2)  # fmt: skip
    assert k.gemm_efficiency_at(1, 56) == 0.5
    assert k.gemm_efficiency_at(4, 56) == 0.5
    assert k.gemm_efficiency_at(56, 56) == pytest.approx(0.2)
    # halfway in log(threads / 4) between 4 and 64 (16 threads): the geometric mean
    assert k.gemm_efficiency_at(16, 64) == pytest.approx(math.sqrt(0.5 * 0.2))
    # unset (0): no thread dependence
    flat = dataclasses.replace(k, gemm_efficiency_full_socket=0.0)
    assert flat.gemm_efficiency_at(56, 56) == 0.5
    # the held-out oneDNN 16-of-56-core point: model -13% of the stated 0.33
    chk = next(p for p in load_points() if p.role == "check")
    assert predicted(chk, fit(load_points())) / 0.33 - 1 == pytest.approx(-0.131, abs=2e-3)


def test_gemm_time_uses_the_interpolated_efficiency_and_int8_speedup() -> None:
    spec = DeviceSpec(name="toy", display_name="toy", vendor="x", kind="cpu",
                      peak_flops={"fp32": 1e12}, memory_bytes=1 << 40,
                      memory_bandwidth_Bps=1e15, memory_efficiency=EfficiencyCurve(1.0),
                      cores=16)  # fmt: skip
    k = dataclasses.replace(cpu_kernels("xeon-8480"), clock_hz=1e9, call_overhead_s=0.0,
                            call_overhead_per_doubling_s=0.0, gemm_efficiency=0.5,
                            gemm_efficiency_full_socket=0.125, int8_gemm_speedup=2.0,
                            dequant_weights_per_cycle={"bf16": 1.0, "int4": 1.0})  # fmt: skip
    m = CpuModel(spec, k, threads=16)  # every core: efficiency 0.125
    assert m.gemm_efficiency == pytest.approx(0.125)
    n, params = 4096, 1e6
    # compute-bound GEMM (the GEMV path, P n / (16 x 1 GHz x 1 weight/cycle), is slower):
    # 2 P n / (16 x 1 GHz x 1024 x 0.125) + the dequantise-once term P / (16 x 1 GHz x 1)
    bf16 = 2 * params * n / (16e9 * 1024 * 0.125)
    once = params / 16e9
    got = m.matmul_times_s(params, np.array([n]), 1.0, "bf16")[0]
    assert got == pytest.approx(bf16 + once, rel=1e-6)
    assert m.matmul_times_s(params, np.array([n]), 1.0, "int4")[0] == pytest.approx(
        bf16 / 2 + once, rel=1e-6
    )


def test_shipped_constants_equal_a_refit() -> None:
    f = fit(load_points())
    stored = stored_fit()
    assert stored["few"] == pytest.approx(f.few, abs=5e-5)
    assert stored["full"] == pytest.approx(f.full, abs=5e-5)
    assert stored["int8_speedup"] == pytest.approx(f.int8_speedup, abs=5e-5)
    one = [dataclasses.replace(p, threads=p.threads / p.sockets, sockets=1.0)
           if p.source_key == "ktransformers-AMX.md" and p.threads and p.sockets else p
           for p in load_points()]  # fmt: skip
    assert stored["full_one_socket_attribution"] == pytest.approx(fit(one).full, abs=5e-5)
    for cpu in AMX_CPUS:
        k = cpu_kernels(cpu)
        assert k.gemm_efficiency_full_socket == stored["full"], cpu
        assert k.int8_gemm_speedup == stored["int8_speedup"], cpu
        assert abs(k.gemm_efficiency - f.few) < 0.01, cpu  # the 0.5 default stands
    # CPUs without AMX keep no thread dependence and no int8 path
    raw = _yaml_load(KERNEL_FILE.read_text())
    assert "gemm_efficiency_full_socket" not in raw["defaults"]
    assert cpu_kernels("epyc-9355").gemm_efficiency_full_socket == 0.0
    assert "gemm_efficiency_full_socket" in report()


def test_bad_point_names_file_row_and_field(tmp_path: Path) -> None:
    src = Path(load_points.__defaults__[0])  # type: ignore[index]
    rows = src.read_text().splitlines()
    bad = tmp_path / "pts.csv"
    bad.write_text("\n".join([rows[0], rows[1].replace(",full,", ",most,", 1)]) + "\n")
    with pytest.raises(ValueError, match=r"pts\.csv: row A01: role"):
        load_points(bad)
