"""Zen GEMM calibration (devices/cpu_zen_gemm_calibration.py, cpu_kernels.yaml B10): the
points' independence from the validation set, the ratios and fit worked out by hand, the
shipped block equal to a refit, and the Zen 4 entries' GEMM priced without an all-core
falloff."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from hetsim.devices.cpu import CpuModel, cpu_kernels
from hetsim.devices.cpu_zen_gemm_calibration import (
    ZEN4_CPUS,
    fit,
    load_points,
    report,
    stored_fit,
)
from hetsim.devices.spec import DeviceSpec, EfficiencyCurve
from tests.validation_sources import is_validation_source, validation_keys


def test_no_point_shares_a_source_with_a_validation_row() -> None:
    threads, files = validation_keys()
    assert threads and files
    for p in load_points():
        repo = p.source_repo.lower()
        assert not is_validation_source(repo, p.source_ref), p.id
        # V49's validation sources and its own setup (ik_llama.cpp whole-model runs)
        assert "ik_llama" not in repo and "ik_llama" not in p.source, p.id


def test_ratios_and_fit_by_hand() -> None:
    pts = {p.id: p for p in load_points()}
    # Z02: 930 GFLOP/s on 8 cores x 4.0 GHz x 32 fp32 FLOP/cycle (2 x 256-bit FMA)
    assert pts["Z02"].ratio() == pytest.approx(930e9 / (8 * 4.0e9 * 32))
    assert pts["Z02"].ratio(5.2e9) == pytest.approx(930e9 / (8 * 5.2e9 * 32))
    f = fit(load_points())
    # one core: two sources (OpenBLAS #2430 SGEMM 108 / (3.6 x 32), #2185 DGEMM 52 /
    # (3.6 x 16)): the median of two is their mean
    assert f.one_core == pytest.approx((108 / (3.6 * 32) + 52 / (3.6 * 16)) / 2)
    # all cores: one source's four in-cache points, median = mean of the middle two
    # (925 and 930 over 8 x 4 x 32; the hand kernels 1100 / 1024 and 1600 / 2048 flank)
    assert f.all_cores == pytest.approx((925 + 930) / 2 / (8 * 4.0 * 32))
    assert f.all_over_one == pytest.approx(f.all_cores / f.one_core)
    assert f.engine_out_of_llc == pytest.approx(540 / (8 * 4.0 * 32))
    # Zen shows no AMX-like falloff (B9: 0.173 / 0.502 = 0.34)
    assert f.all_over_one > 0.9
    # the bf16 dot ran above what 32 FLOP/cycle allows even at the top clock
    bf16 = pts["Z05"]
    assert bf16.achieved_flops > bf16.threads * bf16.top_clock_hz * 32


def test_shipped_block_equals_a_refit_and_zen4_entries_follow_it() -> None:
    f = fit(load_points())
    stored = stored_fit()
    for key, value in dataclasses.asdict(f).items():
        assert stored[key] == pytest.approx(value, abs=5e-5), key
    for cpu in ZEN4_CPUS:
        k = cpu_kernels(cpu)
        assert k.gemm_efficiency_full_socket == 0.0, cpu  # no all-core falloff
        assert k.gemm_efficiency_at(16, 16) == k.gemm_efficiency, cpu
        # the 0.5 default and the tinyBLAS all-core point beyond the L3 agree within 6%
        assert abs(k.gemm_efficiency / stored["engine_out_of_llc"] - 1) < 0.06, cpu
        assert k.matrix_flops_per_cycle == 2 * k.vector_flops_per_cycle, cpu
    assert "all / one" in report()


def test_zen4_prefill_gemm_by_hand() -> None:
    """A compute-bound GEMM on every core of a 16-core Zen 4 at the shipped constants:
    2 P n / (16 x 4.5 GHz x 64 x 0.5) + the dequantise-once term."""
    k = dataclasses.replace(cpu_kernels("ryzen-7950x"), call_overhead_s=0.0,
                            call_overhead_per_doubling_s=0.0)  # fmt: skip
    spec = DeviceSpec(name="toy", display_name="toy", vendor="x", kind="cpu",
                      peak_flops={"fp32": 1e12}, memory_bytes=1 << 40,
                      memory_bandwidth_Bps=1e15, memory_efficiency=EfficiencyCurve(1.0),
                      cores=16)  # fmt: skip
    m = CpuModel(spec, dataclasses.replace(k, dies=0.0), threads=16)
    assert m.gemm_efficiency == pytest.approx(0.5)
    params, n = 4096 * 14336, 512
    gemm = 2 * params * n / (16 * 4.5e9 * 64 * 0.5)
    once = params / (16 * 4.5e9 * k.dequant_rate("q8_0"))
    got = m.matmul_times_s(params, np.array([n]), params * 1.0625, "q8_0")[0]
    assert got == pytest.approx(gemm + once, rel=1e-6)


def test_bad_point_names_file_row_and_field(tmp_path: Path) -> None:
    src = Path(load_points.__defaults__[0])  # type: ignore[index]
    rows = src.read_text().splitlines()
    bad = tmp_path / "pts.csv"
    bad.write_text("\n".join([rows[0], rows[1].replace(",all,", ",most,", 1)]) + "\n")
    with pytest.raises(ValueError, match=r"pts\.csv: row Z01: role"):
        load_points(bad)
    bad.write_text("\n".join([rows[0], rows[1].replace(",925e9,", ",,", 1)]) + "\n")
    with pytest.raises(ValueError, match=r"pts\.csv: row Z01: achieved_flops"):
        load_points(bad)
