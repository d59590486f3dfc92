"""CPU GEMV compute-rate calibration (devices/cpu_dequant_calibration.py): the points'
independence from the validation set, their unit conversions worked by hand, and the
shipped rates against a refit of the CSV."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from hetsim.devices.cpu import KERNEL_FILE, cpu_kernels
from hetsim.devices.cpu_dequant_calibration import (
    DATA_FILE,
    DEFAULT_FAMILY,
    catalogue_fit,
    fit_formats,
    fit_rate,
    load_points,
    report,
    shipped_defaults,
)
from hetsim.simulator.fidelity import default_calibration_dir

ENDTOEND = default_calibration_dir() / "endtoend.csv"
# "owner/repo ... PR|issue #N" or ik_llama.cpp's "pull_requests/'N - ..." files
_REF = re.compile(r"([\w.-]+/[\w.-]+)[^#']*?(?:#|pull_requests/')(\d+)")


def _refs(text: str) -> set[tuple[str, str]]:
    return {(repo.lower(), num) for repo, num in _REF.findall(text)}


def test_no_point_comes_from_a_validation_source() -> None:
    with ENDTOEND.open(newline="") as fh:
        validation = [r["source"] for r in csv.DictReader(fh)]
    used: set[tuple[str, str]] = set().union(*(_refs(s) for s in validation))
    assert ("ikawrakow/ik_llama.cpp", "534") in used  # the parser sees V51-V52's thread
    readme = any("ik_llama.cpp README" in s for s in validation)
    assert readme  # V47-V50's source is a README, not a thread: no point may cite it
    for p in load_points():
        mine = _refs(p.source)
        assert mine, f"{p.id}: source names no repository thread"
        assert not mine & used, f"{p.id}: source shared with a validation row"
        # ik_llama.cpp PRs other than a validation row's thread may be cited, its README not
        assert "README" not in p.source, p.id
        assert re.search(r"\b(issue|PR)\b", p.source), p.id


def test_rdtsc_cycles_are_base_clock_cycles() -> None:
    pts = {p.id: p for p in load_points()}
    # llama.cpp #27590: q5_K 3.61 TSC cycles per 32 values on a 4.3 GHz-base Ryzen 9 9950X
    q01 = pts["Q01"]
    assert q01.per_cycle("base") == pytest.approx(32 / 3.61)
    assert q01.values_per_s == pytest.approx(32 / 3.61 * 4.3e9, rel=1e-4)
    assert q01.per_cycle("high") == pytest.approx(32 / 3.61 * 4.3 / 5.7, rel=1e-4)
    # Arm: no cycle counter; GiB/s of 4-byte values (Pi 4 q8_0, 9.51 GiB/s at 1.5 GHz)
    q12 = pts["Q12"]
    assert q12.tsc_cycles_per_32 is None
    assert q12.per_cycle("base") == pytest.approx(9.51 * 2**30 / 4 / 1.5e9, rel=1e-4)


def test_q4_0_proxy_is_the_median_of_the_q1_0_sizes() -> None:
    # llama.cpp #21561 (Ryzen 7 5800X): 6.3, 5.6, 5.8, 6.0 TSC cycles per 32 at L1..DRAM;
    # one source, so the fit is the median of its four rates: the mean of the middle two
    rates = sorted(32 / c for c in (6.3, 5.6, 5.8, 6.0))
    expected = (rates[1] + rates[2]) / 2
    pts = load_points()
    assert fit_rate(pts, DEFAULT_FAMILY, "q4_0") == pytest.approx(expected)
    assert fit_rate(pts, DEFAULT_FAMILY, "q1_0") == pytest.approx(expected)
    by = {(f.family, f.format): f for f in fit_formats(pts)}
    q40 = by[(DEFAULT_FAMILY, "q4_0")]
    assert q40.proxy and not by[(DEFAULT_FAMILY, "q1_0")].proxy
    assert q40.high_end == pytest.approx(32 / 5.6)  # the L2 size is the fastest
    assert q40.low_end == pytest.approx(32 / 6.3 * 3.8 / 4.7)  # L1 on the top-clock convention
    assert q40.residuals["Q05"] == pytest.approx(expected / (32 / 6.3) - 1)
    # points of another ISA path or family never price the x86 defaults
    assert fit_rate(pts, DEFAULT_FAMILY, "q3_k") is None
    assert fit_rate(pts, DEFAULT_FAMILY, "q8_0") is None
    assert fit_rate(pts, "x86-avx2", "q6_k") == pytest.approx(32 / 2.84)  # not Q04's 1.97


def test_shipped_rates_equal_a_refit_and_the_rest_stay_reconstructions() -> None:
    refit = catalogue_fit()
    assert set(refit) == {"iq3_k", "q1_0", "q4_0", "q4_k", "q5_k", "q6_k"}
    shipped = shipped_defaults()
    for fmt, rate in refit.items():
        assert shipped[fmt] == pytest.approx(rate, abs=1e-3), fmt
        assert cpu_kernels("ryzen-7950x").dequant_rate(fmt) == shipped[fmt]
    # every format the data do not cover keeps its (marked) reconstruction
    text = KERNEL_FILE.read_text()
    for fmt in set(shipped) - set(refit):
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(f"{fmt}:"))
        assert "reconstruction" in line, fmt
    # the Apple override has no Apple-core point: unchanged
    assert cpu_kernels("apple-m2-max-cpu").dequant_rate("q4_0") == 8.0
    assert "no leave-one-source-out" in report()


def test_bad_rows_name_file_row_and_field(tmp_path: Path) -> None:
    head, *rows = DATA_FILE.read_text().splitlines()
    bad = tmp_path / "points.csv"
    bad.write_text(head + "\n" + rows[0].replace(",38.116e9,", ",48.0e9,") + "\n")
    with pytest.raises(ValueError, match=r"points\.csv: row Q01: values_per_s"):
        load_points(bad)
    bad.write_text(head + "\n" + rows[0].replace(",3.61,", ",fast,") + "\n")
    with pytest.raises(ValueError, match=r"row Q01: tsc_cycles_per_32: not a number"):
        load_points(bad)


def test_token_generation_points_convert_by_weights_per_token() -> None:
    # ik_llama.cpp #145, LLaMA-3.1-8B: 32 layers x (2 x 4096^2 + 2 x 4096 x 1024 +
    # 3 x 4096 x 14336) = 6,979,321,856 layer weights per token
    weights = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    pts = {p.id: p for p in load_points()}
    i03 = pts["I03"]  # 5975WX (3.6 GHz base), IQ3_K_R4, 2 threads, 6.83 t/s
    assert i03.weights_per_token == weights and i03.threads == 2
    assert i03.per_cycle("base") == pytest.approx(6.83 * weights / 2 / 3.6e9, rel=1e-4)
    i04 = pts["I04"]  # 4 threads, 12.51 t/s
    expected = (6.83 * weights / 2 + 12.51 * weights / 4) / 2 / 3.6e9  # median of two
    assert fit_rate(list(pts.values()), DEFAULT_FAMILY, "iq3_k") == pytest.approx(
        expected, rel=1e-4
    )
    assert i04.per_cycle("high") == pytest.approx(12.51 * weights / 4 / 4.5e9, rel=1e-4)
    # the Zen4 (AVX-512) points form their own fit and never price the AVX2 defaults
    assert fit_rate(list(pts.values()), "x86-avx512", "iq3_k") == pytest.approx(
        (5.64 * weights + 10.50 * weights / 2) / 2 / 4.5e9, rel=1e-4
    )
    assert not pts["I05"].fit and not pts["I06"].fit  # un-interleaved rows: printed only


def test_token_generation_point_needs_both_figures(tmp_path: Path) -> None:
    head, *rows = DATA_FILE.read_text().splitlines()
    row = next(r for r in rows if r.startswith("I03,"))
    bad = tmp_path / "points.csv"
    bad.write_text(head + "\n" + row.replace(",6.83,", ",,") + "\n")
    with pytest.raises(ValueError, match=r"row I03: needs tsc_cycles_per_32, gib_per_s"):
        load_points(bad)
