"""The shipped catalogue reproduces every calibration point; the fit is deterministic."""

import csv
import shutil
from pathlib import Path

import pytest
import yaml

from hetsim.devices import calibration
from hetsim.devices.calibration import (
    Catalogues,
    current_params,
    fit_all,
    model_state_bytes,
    points,
    predict,
    write_fits,
)
from hetsim.devices.calibration_points import DATA_FILE, FITS, HEADLINES, UNMODELLED, Point
from hetsim.devices.catalogue import DEVICE_FILE, LINK_FILE
from tests.approx import assert_close_tree

SHARED_CSV = Path(__file__).resolve().parents[2] / "shared" / "calibration" / "microbenchmarks.csv"


Fits = dict[str, dict[str, float]]


@pytest.fixture(scope="module")
def fits() -> Fits:
    return fit_all()


def _measured(p: Point) -> bool:
    return p.weight == 1.0


#: points another calibration source contradicts, checked against both (test below);
#: Vidur's plateau points (row "VP") are checked in tests/test_tp_allreduce.py
_CONTESTED = {"A100 ring 1 MiB"}


def _held_to_10_percent(p: Point) -> bool:
    return _measured(p) and p.row != "VP" and p.label not in _CONTESTED


@pytest.mark.parametrize(
    "point", [p for p in points() if _held_to_10_percent(p)], ids=lambda p: p.label
)
def test_shipped_catalogue_reproduces_point_within_10_percent(point: Point) -> None:
    assert predict(point) == pytest.approx(point.value, rel=0.10)


def test_a100_one_mib_lies_between_its_two_sources() -> None:
    # 8x A100, 1 MiB: C01 (nccl-tests, Azure ND A100 v4) 36.22 GB/s busbw = 50.7 us; Vidur's
    # a100_dgx sweep at the same size 0.064 ms. The joint fit with Vidur's small-message
    # plateau (about 46 us for any size below 250 KiB) cannot meet C01 here: it must land
    # between the two measurements, within 10% of neither bound's outside.
    (point,) = [p for p in points() if p.label == "A100 ring 1 MiB"]
    c01_s = point.size * 1.75 / point.value
    predicted_s = point.size * 1.75 / predict(point)
    assert 0.9 * c01_s < predicted_s < 1.1 * 64e-6


@pytest.mark.parametrize("point", [p for p in points() if not _measured(p)], ids=lambda p: p.label)
def test_latency_anchors_within_factor_two(point: Point) -> None:
    # README A.3's derived 1 KiB floors: no monotone curve meets both them and the 1 MiB
    # points (NCCL changes protocol), so they are fitted at low weight; hold to 2x.
    assert 0.5 < predict(point) / point.value < 2.0


def test_every_csv_row_is_predicted() -> None:
    with DATA_FILE.open(newline="") as f:
        rows = {row["id"] for row in csv.DictReader(f)}
    assert rows == set(HEADLINES)
    headline = {p.row for p in points()[: len(rows)]}
    assert headline == rows


def test_shipped_csv_matches_the_shared_copy() -> None:
    if not SHARED_CSV.exists():
        pytest.skip("shared calibration folder not present")
    assert DATA_FILE.read_text() == SHARED_CSV.read_text()


def test_every_fit_has_points_and_every_point_a_known_fit() -> None:
    keys = {p.fit for p in points() if p.fit}
    assert keys == set(FITS)
    assert all(len(what) > 0 and len(why) > 0 for _, what, why in UNMODELLED)


def test_fit_is_deterministic(fits: Fits) -> None:
    assert fit_all() == fits


def test_shipped_catalogue_holds_the_fitted_values(fits: Fits) -> None:
    shipped = Catalogues.shipped()
    for p in points():
        if not p.fit:
            continue
        current = current_params(p, shipped)
        for name, value in fits[p.fit].items():
            # the YAML keeps 4 significant digits
            assert current[name] == pytest.approx(value, rel=1e-3, abs=1e-12), (p.fit, name)


def test_write_fits_round_trips(tmp_path: Path, fits: Fits) -> None:
    copies = [tmp_path / DEVICE_FILE.name, tmp_path / LINK_FILE.name]
    shutil.copy(DEVICE_FILE, copies[0])
    shutil.copy(LINK_FILE, copies[1])
    written = write_fits(fits, copies)
    assert written >= len(FITS)
    for copy, shipped in zip(copies, (DEVICE_FILE, LINK_FILE), strict=True):
        mine, theirs = copy.read_text().splitlines(), shipped.read_text().splitlines()
        assert len(mine) == len(theirs)
        # only the `# fit:` lines are rewritten, to the committed numbers within the refit
        # tolerance (a refit's last digit depends on the machine: tests/approx.py)
        changed = [i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b]
        assert all("# fit:" in theirs[i] for i in changed), [theirs[i] for i in changed]
        assert_close_tree(yaml.safe_load(copy.read_text()), yaml.safe_load(shipped.read_text()))


def test_model_state_bytes_by_hand() -> None:
    psi, n = 7.5e9, 64
    assert model_state_bytes(psi, n, 0) == pytest.approx(120e9)  # 16 B x 7.5e9 (M01)
    assert model_state_bytes(psi, n, 3) == pytest.approx(1.875e9)  # 120 GB / 64 (M02)
    assert model_state_bytes(psi, n, 1) == pytest.approx(31.40625e9)  # 7.5e9 x (4 + 12/64)
    assert model_state_bytes(psi, n, 2) == pytest.approx(16.640625e9)  # 7.5e9 x (2 + 14/64)


def test_predictions_use_the_cost_model() -> None:
    # a constant-curve copy: bytes / (latency + bytes / (bw * eff)); pcie3 at 32 MiB
    h03 = next(p for p in points() if p.row == "H03")
    link = Catalogues.shipped().links["pcie3-x16"]
    expected = h03.size / (link.latency_s + h03.size / (15.75e9 * link.efficiency.max_eff))
    assert calibration.predict(h03) == pytest.approx(expected, rel=1e-12)
