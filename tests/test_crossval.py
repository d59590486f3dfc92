"""Cross-validation of fitted parts (simulator/crossval.py, hetsim fidelity --cv), worked
by hand on the abstract ``ideal`` link (1 GB/s, no latency, efficiency 1.0)."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from hetsim.devices import fit_overrides
from hetsim.devices.fit_overrides import FitOverrides
from hetsim.simulator import crossval
from hetsim.simulator.crossval import CalPoint, Fold, Keep, Part
from hetsim.simulator.fidelity import main
from tests.test_fidelity import _setup

# A hand part fitting the ideal link's efficiency: the median of the kept points.
POINTS = {"a1": ("A", "box-1", 0.5), "b1": ("B", "box-2", 1.0), "b2": ("B", "box-1", 1.0)}


def _hand_part() -> Part:
    cal = [CalPoint("hand", k, s, p) for k, (s, p, _) in POINTS.items()]

    def refit(keep: Keep) -> FitOverrides:
        kept = [POINTS[c.id][2] for c in cal if keep(c)]
        return FitOverrides(link_max_eff={"ideal": statistics.median(kept)} if kept else {})

    return Part("hand", cal, refit)


def test_folds_leave_out_sources_then_distinct_platforms() -> None:
    # sources A {a1}, B {b1, b2}; platforms box-1 {a1, b2}, box-2 {b1}: all distinct sets
    labels = [f.label for f in crossval.folds([_hand_part()])]
    assert labels == ["source:A", "source:B", "platform:box-1", "platform:box-2"]
    assert not Fold("source", "A").keeps(CalPoint("hand", "a1", "A", "box-1"))


def test_only_changed_entries_are_applied() -> None:
    part = _hand_part()
    base = crossval.refit_all([part])  # median(0.5, 1, 1) = 1.0
    assert base.link_max_eff == {"ideal": 1.0}
    no_b = crossval.refit_all([part], Fold("source", "B").keeps)  # only a1: 0.5
    assert crossval.only_changed(base, no_b).link_max_eff == {"ideal": 0.5}
    no_a = crossval.refit_all([part], Fold("source", "A").keeps)  # 1.0: unchanged
    assert crossval.only_changed(base, no_a).is_empty()
    assert crossval.changed_names(base, no_b) == {"ideal"}


def test_overrides_reach_the_link_and_only_inside_the_block() -> None:
    from hetsim.devices.catalogue import shipped_links

    spec = shipped_links()["ideal"]
    with fit_overrides.applied(FitOverrides(link_max_eff={"ideal": 0.25})):
        assert fit_overrides.link(spec).effective_bandwidth_Bps(1) == pytest.approx(0.25e9)
        with pytest.raises(RuntimeError), fit_overrides.applied(FitOverrides()):
            pass
    assert fit_overrides.link(spec) is spec


def test_cpu_fields_merge_star_then_cpu() -> None:
    o = FitOverrides(cpu={"*": {"gemm_efficiency": 0.4, "dequant_weights_per_cycle": {"q4_0": 1}},
                          "x": {"dequant_weights_per_cycle": {"q8_0": 2}}})  # fmt: skip
    with fit_overrides.applied(o):
        got = fit_overrides.cpu_fields("x")
    assert got == {"gemm_efficiency": 0.4, "dequant_weights_per_cycle": {"q4_0": 1, "q8_0": 2}}


def test_fidelity_cv_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # V01: all-reduce of 1 GB over the ideal link, 1.0 s in sample vs 2.0 s published.
    # Folds: source:B and platform:box-2 leave a1 (or a1, b2: median 0.75) ...
    #   source:A -> median(1, 1) = 1.0: unchanged, not run
    #   source:B -> 0.5: 2.0 s, error 0
    #   platform:box-1 -> b1 only: 1.0, unchanged
    #   platform:box-2 -> median(0.5, 1.0) = 0.75: 1.333 s, error -1/3
    # worst fold platform:box-2 (-33.3%), range -33.3%..0.0%; pessimistic: neither
    monkeypatch.setattr(crossval, "parts", lambda: [_hand_part()])
    cal, rows_path = _setup(tmp_path)
    out = tmp_path / "report"
    assert main(rows_path, cal, out, cv=True, ids=["V01"], quiet=True) == 0
    with (out / "report.csv").open() as fh:
        table = {r["id"]: r for r in csv.DictReader(fh)}
    assert set(table) == {"V01"}
    row = table["V01"]
    assert float(row["predicted"]) == pytest.approx(1.0)
    assert float(row["cv_predicted"]) == pytest.approx(4.0 / 3.0, rel=1e-4)  # 6 digits in the CSV
    assert row["cv_fold"] == "platform:box-2"
    assert float(row["cv_low"]) == pytest.approx(-1.0 / 3.0, rel=1e-4)
    assert float(row["cv_high"]) == pytest.approx(0.0, abs=1e-12)
    md = (out / "report.md").read_text()
    assert "| collective | 2 | 2 | 1 | 50.0% | 50.0% | 1 of 1 | 1 | 33.3% | 33.3% | 0 of 1 |" in md


def test_subset_options_reject_unknown(tmp_path: Path) -> None:
    cal, rows_path = _setup(tmp_path)
    assert main(rows_path, cal, None, groups=["nope"], quiet=True) == 2
    assert main(rows_path, cal, None, ids=["V99"], quiet=True) == 2


def test_registered_parts_refit_to_the_shipped_values() -> None:
    # with every point kept, each part reproduces what the catalogues ship (a fold moves
    # only what its held-out points move)
    from hetsim.devices.catalogue import shipped_devices, shipped_links
    from hetsim.devices.cpu import cpu_kernels

    base = crossval.refit_all(crossval.parts())
    k = cpu_kernels("ryzen-7950x")
    star = base.cpu["*"]
    assert star["gemv_bandwidth_efficiency"] == pytest.approx(k.gemv_bandwidth_efficiency)
    assert star["die_link_efficiency"] == pytest.approx(k.die_link_efficiency)
    for fmt, rate in star["dequant_weights_per_cycle"].items():
        assert rate == pytest.approx(k.dequant_weights_per_cycle[fmt])
    amx = cpu_kernels("xeon-8480")
    assert base.cpu["xeon-8480"]["gemm_efficiency_full_socket"] == pytest.approx(
        amx.gemm_efficiency_full_socket, abs=1e-4)  # fmt: skip
    assert base.cpu["xeon-8480"]["gemm_efficiency"] == pytest.approx(amx.gemm_efficiency, abs=0.01)
    devs, links = shipped_devices(), shipped_links()
    for name, eff in base.memory_max_eff.items():
        assert eff == pytest.approx(devs[name].memory_efficiency.max_eff)
    for name, eff in base.link_max_eff.items():
        assert eff == pytest.approx(links[name].efficiency.max_eff)
