"""The fidelity harness (simulator/fidelity.py), validation/rows.yaml and the collective
microbenchmark workload, on closed forms over the abstract ``ideal`` link (1 GB/s, no
latency, full efficiency)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from hetsim.simulator.cli import main as cli_main
from hetsim.simulator.errors import ScenarioError
from hetsim.simulator.fidelity import (
    RowsFile,
    default_calibration_dir,
    default_rows,
    evaluate,
    load_published,
    load_rows,
    main,
    shared_calibration_dir,
)
from hetsim.simulator.runner import as_scenario, run

# Two ideal servers joined by one ideal link: a ring all-reduce of S bytes over n = 2
# ranks sends 2(n-1)/n x S = S bytes per rank at 1e9 B/s, with alpha = 0: S / 1e9 s.
PAIR = """
name: pair
seed: 0
cluster:
  nodes:
    - name: box
      devices:
        s: {type: ideal-server, count: 2}
      links:
        - {type: ideal, between: [s0, s1]}
workload:
  kind: collective
  op: all_reduce
  nbytes: 1000000000
  devices: [box/s0, box/s1]
  repetitions: 3
"""

ENDTOEND = """id,what,hardware,model,settings,metric,value,unit,source
V01,hand row one,-,-,-,time,2.0,s,hand
V02,hand row two,-,-,-,bandwidth,0.8e9,B/s,hand
V03,hand row three,-,-,-,throughput,5,tokens/s,hand
"""

ROWS = """
rows:
  V01: {group: collective, scenario: pair.yaml, column: median_time_s, fast: true,
        note: "s"}
  V02: {group: collective, scenario: pair.yaml, column: median_time_s, scale: 1e9,
        invert: true, note: "bytes / time"}
unexpressed:
  V03: {group: decode, lacks: "a hand capability", issue: 99}
"""


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    cal = tmp_path / "calibration"
    cal.mkdir()
    (cal / "endtoend.csv").write_text(ENDTOEND)
    rows_dir = tmp_path / "validation"
    rows_dir.mkdir()
    (rows_dir / "pair.yaml").write_text(PAIR)
    (rows_dir / "rows.yaml").write_text(ROWS)
    return cal, rows_dir / "rows.yaml"


def test_collective_closed_form() -> None:
    import yaml

    from hetsim.simulator.scenario import from_dict

    res = run(from_dict(yaml.safe_load(PAIR), "pair.yaml", Path(".")))
    s = res.summary_row
    assert s["median_time_s"] == pytest.approx(1.0, rel=1e-12)
    assert s["collective_fabric"] == "topology-ring" and s["ranks"] == 2
    assert s["busbw_Bps"] == pytest.approx(1e9 * 2 * (2 - 1) / 2, rel=1e-12)


def _hub_ring(order: list[str]) -> dict[str, object]:
    """Two nodes of two ideal servers behind a hub each, the hubs on an ideal network:
    a ring that crosses between nodes twice in the same direction shares an uplink."""
    import yaml

    text = f"""
name: hubs
seed: 0
cluster:
  nodes:
    - name: n0
      devices: {{g: {{type: ideal-server, count: 2}}, hub: {{type: ideal-server}}}}
      links: [{{type: ideal, between: [g, hub]}}]
    - name: n1
      devices: {{g: {{type: ideal-server, count: 2}}, hub: {{type: ideal-server}}}}
      links: [{{type: ideal, between: [g, hub]}}]
  network: {{type: ideal, attach: hub}}
workload: {{kind: collective, op: all_reduce, nbytes: 1000000000, devices: {order},
           repetitions: 1}}
"""
    out: dict[str, object] = yaml.safe_load(text)
    return out


@pytest.mark.parametrize(
    ("order", "expected_s"),
    [
        # each cross-node hop used once per direction: 1.5 x S at 1 GB/s
        (["n0/g0", "n0/g1", "n1/g0", "n1/g1"], 1.5),
        # n0 -> n1 crossed twice in the same direction: each pair gets 0.5 GB/s
        (["n0/g0", "n1/g0", "n0/g1", "n1/g1"], 3.0),
    ],
)
def test_ring_fabric_shares_a_hop(order: list[str], expected_s: float) -> None:
    from hetsim.simulator.scenario import from_dict

    res = run(from_dict(_hub_ring(order), "hubs.yaml", Path(".")))
    assert res.summary_row["median_time_s"] == pytest.approx(expected_s, rel=1e-12)


def test_collective_rejects_bad_algorithm(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(PAIR.replace("repetitions: 3", "repetitions: 3\n  algorithm: nvls-x"))
    with pytest.raises(ScenarioError, match="algorithm"):
        as_scenario(path)


def test_signed_errors_by_hand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cal, rows_path = _setup(tmp_path)
    out = tmp_path / "report"
    assert main(rows_path, cal, out) == 0
    with (out / "report.csv").open() as fh:
        table = {r["id"]: r for r in csv.DictReader(fh)}
    assert set(table) == {"V01", "V02"}
    # V01: predicted 1.0 s vs 2.0 s published: 1/2 - 1 = -0.5, faster: optimistic
    assert float(table["V01"]["predicted"]) == pytest.approx(1.0)
    assert float(table["V01"]["signed_error"]) == pytest.approx(-0.5)
    assert float(table["V01"]["abs_error"]) == pytest.approx(0.5)
    assert table["V01"]["optimistic"] == "true"
    # V02: 1e9 / 1.0 s = 1e9 B/s vs 0.8e9: +0.25, a higher rate: optimistic
    assert float(table["V02"]["predicted"]) == pytest.approx(1e9)
    assert float(table["V02"]["signed_error"]) == pytest.approx(0.25)
    assert table["V02"]["scenario"] == "validation/pair.yaml"
    md = (out / "report.md").read_text()
    # median of |-0.5|, |0.25| = 0.375; p90 (linear) = 0.25 + 0.9 x 0.25 = 0.475
    assert "| collective | 2 | 2 | 2 | 37.5% | 47.5% | 2 of 2 |" in md
    assert "| V03 | decode | hand row three | a hand capability | #99 |" in md
    for text in (md, (out / "report.csv").read_text()):
        assert str(tmp_path) not in text


def test_combined_groups_by_hand(tmp_path: Path) -> None:
    # V02 moved to the offload group: the inference + collective line holds both rows
    # (median 37.5%, p90 47.5% as above), offload + CPU + TEE only V02 (25.0%), all both
    cal, rows_path = _setup(tmp_path)
    rows_path.write_text(ROWS.replace("V02: {group: collective", "V02: {group: offload"))
    out = tmp_path / "report"
    assert main(rows_path, cal, out) == 0
    md = (out / "report.md").read_text()
    assert "| **inference + collective** | 3 | 2 | 2 | 37.5% | 47.5% | 2 of 2 |" in md
    assert "| **offload + CPU + TEE** | 1 | 1 | 1 | 25.0% | 25.0% | 1 of 1 |" in md
    assert "| **all** | 3 | 2 | 2 | 37.5% | 47.5% | 2 of 2 |" in md


def test_fast_subset_and_pending(tmp_path: Path) -> None:
    cal, rows_path = _setup(tmp_path)
    # V02 now names a scenario that does not exist, and is pending a capability
    pending = ROWS.replace("scale: 1e9,", "scale: 1e9, pending: precision,").replace(
        "scenario: pair.yaml, column: median_time_s, scale", "scenario: nope.yaml, "
        "column: median_time_s, scale"
    )  # fmt: skip
    rows_path.write_text(pending)
    rows = load_rows(rows_path)
    published = load_published(cal)
    fast = evaluate(rows, published, rows_path.parent, fast=True)
    assert [o.id for o in fast] == ["V01"]
    full = evaluate(rows, published, rows_path.parent)
    assert full[1].status.startswith("skipped: pending precision")
    assert str(tmp_path) not in full[1].status


def test_missing_calibration_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, rows_path = _setup(tmp_path)
    code = cli_main(["fidelity", "--rows", str(rows_path), "--calibration-dir",
                     str(tmp_path / "absent")])  # fmt: skip
    assert code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_bad_rows_file_names_the_field(tmp_path: Path) -> None:
    _, rows_path = _setup(tmp_path)
    rows_path.write_text(ROWS.replace("fast: true", "fast: true, colour: red"))
    with pytest.raises(ScenarioError, match=r"rows.yaml: rows.V01.colour"):
        load_rows(rows_path)
    rows_path.write_text(ROWS + "  V01: {group: decode, lacks: twice}\n")
    with pytest.raises(ScenarioError, match="also listed under rows"):
        load_rows(rows_path)


# ---- the repository's validation/rows.yaml ------------------------------------------

CALIBRATION = default_calibration_dir() / "endtoend.csv"
SHARED_ENDTOEND = shared_calibration_dir() / "endtoend.csv"


def test_the_validation_set_ships_with_the_package() -> None:
    """Everything ``hetsim fidelity`` reads lies under ``hetsim/`` and is matched by a
    package-data pattern of pyproject.toml, so a wheel carries it."""
    import fnmatch
    import tomllib

    root = default_rows().parents[1]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = data["package-data"]["hetsim"]
    needed = [
        CALIBRATION,
        default_rows(),
        *(default_rows().parent / r.scenario for r in load_rows(default_rows()).rows.values()),
    ]
    for path in needed:
        assert path.is_file(), path
        rel = (root / "hetsim" / path.relative_to(root)).relative_to(root / "hetsim")
        assert any(fnmatch.fnmatch(str(rel), p) for p in patterns), rel


def test_shipped_rows_match_the_shared_copy() -> None:
    """Rows in both copies are identical (the shared copy may have rows added later)."""
    if not SHARED_ENDTOEND.is_file():
        pytest.skip("shared calibration folder not present")

    def by_id(path: Path) -> dict[str, dict[str, str]]:
        with path.open(newline="", encoding="utf-8") as fh:
            return {r["id"]: r for r in csv.DictReader(fh)}

    shipped, shared = by_id(CALIBRATION), by_id(SHARED_ENDTOEND)
    assert shipped
    differ = [i for i in shipped if i in shared and shipped[i] != shared[i]]
    assert differ == [], f"rows differ from the shared copy: {differ}"


def test_every_endtoend_id_listed_once() -> None:
    rows = load_rows(default_rows())  # also refuses an id in both sections
    ids = set()
    for path in (CALIBRATION, CALIBRATION.with_name("energy.csv")):
        with path.open(newline="") as fh:
            ids |= {r["id"] for r in csv.DictReader(fh)}
    listed = set(rows.rows) | set(rows.unexpressed)
    assert listed - ids == set(), "ids not in endtoend.csv or energy.csv"
    assert ids - listed == set(), "endtoend ids missing from validation/rows.yaml"


ROWS_FILE = load_rows(default_rows())
EXPRESSED = sorted(ROWS_FILE.rows)
FAST = sorted(i for i, r in ROWS_FILE.rows.items() if r.fast)


@pytest.mark.parametrize("row_id", EXPRESSED)
def test_listed_scenario_validates(row_id: str) -> None:
    """The scenario file validates (building it is left to the fast-subset run: some
    domains' rows take seconds to build)."""
    row = ROWS_FILE.rows[row_id]
    if row.pending:
        pytest.skip(f"pending {row.pending}: checked once it validates")
    sc = as_scenario(default_rows().parent / row.scenario)
    assert row.column in sc.workload_cls.metrics, f"{row_id}: no metric {row.column}"


@pytest.mark.slow
@pytest.mark.parametrize("row_id", FAST)
def test_fast_subset_runs(row_id: str) -> None:
    rows = RowsFile(rows={row_id: ROWS_FILE.rows[row_id]})
    (outcome,) = evaluate(
        rows, load_published(default_calibration_dir()), default_rows().parent, fast=True
    )
    assert outcome.ok or outcome.status.startswith("skipped"), outcome.status
