"""CPU GEMV weight-stream calibration (devices/cpu_calibration.py): the points, their
independence from the validation set, and the fit worked out by hand from the CSV's numbers."""

from __future__ import annotations

import csv
import re
import statistics
from pathlib import Path

import pytest

from hetsim.devices.cpu import KERNEL_FILE, _yaml_load, cpu_kernels
from hetsim.devices.cpu_calibration import (
    b5_read_over_triad,
    fit,
    fit_report,
    load_points,
    report,
)
from hetsim.simulator.fidelity import default_calibration_dir

ENDTOEND = default_calibration_dir() / "endtoend.csv"
# "owner/repo ... issue|PR|pull request #N" or ik_llama.cpp's "pull_requests/'N - ..." files
_REF = re.compile(r"([\w.-]+/[\w.-]+)[^#']*?(?:#|pull_requests/')(\d+)")


def _refs(text: str) -> set[tuple[str, str]]:
    return {(repo.lower(), num) for repo, num in _REF.findall(text)}


def test_points_come_from_threads_no_validation_row_uses() -> None:
    with ENDTOEND.open(newline="") as fh:
        validation = [r["source"] for r in csv.DictReader(fh)]
    used: set[tuple[str, str]] = set().union(*(_refs(s) for s in validation))
    assert ("ikawrakow/ik_llama.cpp", "534") in used  # the parser sees V51's thread
    for p in load_points():
        mine = _refs(p.source)
        assert mine, f"{p.id}: source names no repository thread"
        assert not mine & used, f"{p.id}: source shared with a validation row"
        # no validation row's file (READMEs, docs) either: every point cites a thread
        assert re.search(r"\b(issue|PR)\b", p.source), p.id


def test_pi5_q8_point_is_file_size_times_rate() -> None:
    # llama.cpp #26484: 0.531 GB x 19.87 tok/s = 10.55 GB/s against 11.59 GB/s read-only
    d05 = {p.id: p for p in load_points()}["D05"]
    assert d05.achieved_Bps == pytest.approx(0.531e9 * 19.87, rel=1e-3)
    value, kind = d05.ratio()
    assert kind == "read"
    assert value == pytest.approx(10.55 / 11.59)


def test_fit_is_the_capped_median_of_source_medians() -> None:
    # B5 median of five ALL-Reads/triad pairs: sorted 1.105, 1.125, 1.183, 1.210, 1.225
    k = statistics.median([225.1 / 190.3, 222.6 / 201.4, 190.9 / 157.8, 105.7 / 94.0,
                           181.2235 / 147.9425])  # fmt: skip
    assert b5_read_over_triad() == pytest.approx(k)
    assert k == pytest.approx(225.1 / 190.3)
    # per source: Pi 5 median of 10.29, 10.09, 10.25, 9.76, 10.55 over 11.59, x k;
    # EPYC 7452: 42 x 989/440 GB/s over 83.6 STREAM; Xeon 6526Y: the stated 0.91
    pi5 = 10.25 / 11.59 * k
    epyc = 42.0 * 989 / 440 / 83.6
    assert pi5 == pytest.approx(1.0461, abs=1e-4)
    assert epyc == pytest.approx(1.129, abs=1e-3)
    eff, raw = fit(load_points())
    assert raw == pytest.approx(pi5, rel=1e-3)  # median of (0.91, 1.046, 1.129)
    assert eff == 1.0
    # without the EPYC source the median of two is their mean, below 1
    held, _ = fit(load_points(), exclude="ktransformers#2175")
    assert held == pytest.approx((0.91 + pi5) / 2, rel=1e-3)
    # read-only references taken as STREAM: median of (10.25/11.59, 1.129, 0.91) = 0.91
    assert fit(load_points(), borrowed=1.0)[0] == pytest.approx(0.91)


def test_shipped_default_and_stored_fit_match_a_refit() -> None:
    rep = fit_report(load_points())
    stored = _yaml_load(KERNEL_FILE.read_text())["gemv_bandwidth_fit"]
    assert cpu_kernels("xeon-8480").gemv_bandwidth_efficiency == rep.efficiency
    assert stored["efficiency"] == rep.efficiency
    assert stored["uncapped"] == pytest.approx(rep.uncapped, abs=1e-4)
    assert stored["residual_p50"] == pytest.approx(rep.p50(), abs=1e-3)
    assert stored["residual_p90"] == pytest.approx(rep.p90(), abs=1e-3)
    refits = [held for held, _ in rep.loso.values()]
    assert stored["leave_one_source_out"] == pytest.approx([min(refits), max(refits)], abs=1e-4)
    assert stored["no_read_triad_correction"] == pytest.approx(
        fit(load_points(), borrowed=1.0)[0], abs=1e-3
    )
    # compute- and NUMA-limited points are shown but never fitted
    assert {"D06", "D09", "D10", "D11", "D12"}.isdisjoint(rep.residuals)
    assert "not fit" in report()


def test_bad_rows_name_file_row_and_field(tmp_path: Path) -> None:
    from hetsim.devices.cpu_calibration import DATA_FILE

    head, *rows = DATA_FILE.read_text().splitlines()
    bad = tmp_path / "points.csv"
    bad.write_text(head + "\n" + rows[0].replace(",yes,", ",maybe,", 1) + "\n")
    with pytest.raises(ValueError, match=r"points\.csv: row D01: memory_bound"):
        load_points(bad)
    bad.write_text(head + "\n" + rows[0].replace("10.29e9", "fast") + "\n")
    with pytest.raises(ValueError, match=r"row D01: achieved_Bps: not a number"):
        load_points(bad)
