"""Pageable host<->GPU copies (devices/host_copy.py) and their price in the offload
workload's copy paths, by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetsim.devices import fit_overrides, host_copy
from hetsim.devices.fit_overrides import FitOverrides
from hetsim.devices.host_copy import CopyPoint
from hetsim.devices.spec import EfficiencyCurve, LinkSpec
from hetsim.workloads.offload.costs import CopyPaths


def _p(src: str, d: str, mem: str, size: float, bw: float) -> CopyPoint:
    return CopyPoint(f"{src}{d}{mem}{size}", src, "box", "pcie4-x16", d, mem, size, bw)


def test_ratio_at_each_sources_largest_size_median_over_sources() -> None:
    pts = [
        _p("a", "h2d", "pinned", 1, 10), _p("a", "h2d", "pageable", 1, 9),  # 0.9 small
        _p("a", "h2d", "pinned", 8, 10), _p("a", "h2d", "pageable", 8, 5),  # 0.5 largest
        _p("b", "h2d", "pinned", 4, 20), _p("b", "h2d", "pageable", 4, 14),  # 0.7
        _p("c", "h2d", "pinned", 4, 20), _p("c", "h2d", "pageable", 4, 18),  # 0.9
    ]  # fmt: skip
    f = host_copy.fit(pts)
    assert f.pageable_h2d_ratio == pytest.approx(0.7)  # median(0.5, 0.7, 0.9)
    assert f.pageable_d2h_ratio is None  # no d2h pair: the prior applies


def test_shipped_points_fit() -> None:
    # cuda-oxide PR #976 (RTX 4090, Gen4 x16): 64 MiB H2D 12.88 / 23.90, 16 MiB D2H 12.34 / 26.55
    f = host_copy.fit(host_copy.load_points())
    assert f.pageable_h2d_ratio == pytest.approx(12.88 / 23.90)
    assert f.pageable_d2h_ratio == pytest.approx(12.34 / 26.55)
    c = host_copy.per_call_s(host_copy.load_points())
    assert c is not None and 1e-6 < c < 5e-6  # (1 MiB / 22.51 - 1 MiB / 23.90) GB/s: 2.7 us


def test_bad_point_names_file_and_row(tmp_path: Path) -> None:
    text = host_copy.DATA_FILE.read_text().replace(
        ",h2d,pageable,1048576", ",up,pageable,1048576", 1
    )
    bad = tmp_path / "pts.csv"
    bad.write_text(text)
    with pytest.raises(ValueError, match=r"pts.csv row P01: direction"):
        host_copy.load_points(bad)


def _paths(h2d: float | None, d2h: float | None) -> CopyPaths:
    link = LinkSpec(name="l", display_name="l", kind="pcie", bandwidth_Bps=10e9, latency_s=0.0,
                    efficiency=EfficiencyCurve(1.0))  # fmt: skip
    return CopyPaths(link=link, pageable_Bps=3e9, d2h_bandwidth_ratio=1.0,
                     ssd_bandwidth_Bps=1e9, secure=None, pageable_h2d_ratio=h2d,
                     pageable_d2h_ratio=d2h)  # fmt: skip


def test_pageable_copy_prices() -> None:
    n = 1e9
    assert _paths(0.5, 0.4).h2d_s(n, pinned=True) == pytest.approx(0.1)  # link rate
    assert _paths(0.5, 0.4).h2d_s(n, pinned=False) == pytest.approx(0.2)  # 0.5 x 10 GB/s
    assert _paths(0.5, 0.4).d2h_s(n, pinned=False) == pytest.approx(0.25)  # 0.4 x 10 GB/s
    # prior (no fit): the staging memcpy at pageable_Bps = 3 GB/s
    assert _paths(None, None).h2d_s(n, pinned=False) == pytest.approx(1 / 3)


def test_cross_validation_override_reaches_the_ratios() -> None:
    with fit_overrides.applied(FitOverrides(host_copy={"pageable_h2d_ratio": None,
                                                       "pageable_d2h_ratio": 0.3})):  # fmt: skip
        r = host_copy.pageable_ratios()
    assert r.pageable_h2d_ratio is None and r.pageable_d2h_ratio == pytest.approx(0.3)
    assert host_copy.pageable_ratios().pageable_h2d_ratio == pytest.approx(12.88 / 23.90)
