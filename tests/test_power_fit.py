"""The memory-bound GPU draw fitted to the component power table (devices/power_fit.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from hetsim.devices import power_fit
from hetsim.devices.power import power_table
from tests.approx import REFIT_REL


def test_shipped_memory_activity_is_the_fit_of_the_component_table() -> None:
    shipped = power_table().gpu["memory_activity"].value
    assert math.isclose(power_fit.fit_memory_activity(), shipped, rel_tol=REFIT_REL)


def test_implied_activity_is_the_hand_ratio() -> None:
    rows = {r.id: r for r in power_fit.load_table()}
    # Splitwise H100 token phase: 380 W on a 700 W board idling at 80.3 W
    assert power_fit.implied_activity(rows["P02"]) == pytest.approx((380 - 80.3) / (700 - 80.3))
    # A100-80GB: 250 W of 400 W, idle 62 W
    assert power_fit.implied_activity(rows["P01"]) == pytest.approx((250 - 62) / (400 - 62))


def test_each_source_counts_once_and_loso_brackets_the_fit() -> None:
    rows = power_fit.load_table()
    est = power_fit.source_estimates(rows)
    assert set(est) == {"splitwise", "ma2026"}  # check and excluded rows never fit
    fit = power_fit.fit_memory_activity(rows)
    assert fit == pytest.approx(sum(est.values()) / len(est))
    folds = power_fit.loso(rows)
    assert min(folds.values()) < fit < max(folds.values())
    assert folds["splitwise"] == pytest.approx(est["ma2026"])  # what is left


def test_the_fit_reproduces_each_source_within_the_sources_spread() -> None:
    """With one coefficient for every GPU, the model's memory-bound draw sits between the
    sources' readings: within the spread of the per-source estimates of each row."""
    rows = power_fit.load_table()
    est = power_fit.source_estimates(rows)
    fit = power_fit.fit_memory_activity(rows)
    spread = max(est.values()) - min(est.values())
    for r in rows:
        if r.use != "memory":
            continue
        model_W = power_fit.predicted_memory_W(r, fit)
        idle = power_fit.idle_W(r.device, r.tdp_W)
        assert abs(model_W - r.power_W) <= spread * (r.tdp_W - idle) * (1 + 1e-9), r.id
        # a source's own mean reading is reproduced by its own estimate exactly
        own = power_fit.predicted_memory_W(r, est[r.source])
        assert idle < own < r.tdp_W


def test_compute_bound_check_rows_sit_at_the_board_limit() -> None:
    for r in power_fit.load_table():
        if r.use == "check":
            assert r.power_W == pytest.approx(r.tdp_W, rel=0.05), r.id  # u = 1 draws the limit


def test_a_bad_row_is_one_error_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "power_measurements.csv"
    bad.write_text("id,source,device,kernel_class,settings,power_W,tdp_W,use,reference\n"
                   "X1,s,h100-sxm,decode,x,abc,700,memory,r\n", encoding="utf-8")  # fmt: skip
    with pytest.raises(ValueError, match=r"power_measurements\.csv"):
        power_fit.load_table(bad)
