"""``hetsim fidelity``: hetsim's predictions against published end-to-end measurements.

The measurements are ``endtoend.csv`` (shipped as ``validation/data/endtoend.csv``, a copy
of the shared calibration data with every row's source; ``--calibration-dir`` reads another
copy): a **validation set**, never used to fit anything.
``validation/rows.yaml`` says, for every id of that file, either how hetsim predicts it
(``rows:`` a scenario under ``validation/``, the summary column to read, and how to
scale it into the published unit) or what hetsim lacks to predict it (``unexpressed:``).

For each expressed row the scenario is run and

* ``predicted = scale * column`` (or ``scale / column`` with ``invert: true``);
* ``signed_error = predicted / published - 1`` and ``abs_error = |signed_error|``;
* ``optimistic``: whether the prediction is faster than the measurement (a higher rate
  for a unit per second, a shorter time for a unit of time), or for an energy (``J...``)
  lower; empty for other units;
* ``model_fits``, ``kernel_classes`` and ``borrowed_fits`` are copied from the run's
  summary columns of those names when the workload reports them.

A row marked ``pending: <capability>`` is skipped, with that reason, while its scenario
does not validate or build (it needs something still being added); once it does, it runs.

With ``--cv`` every ran row is also **cross-validated** (:mod:`simulator.crossval`): the
fitted parts of the cost model that the row reads are refitted without one calibration
source, or one hardware platform, at a time and the row re-run; ``cv_predicted`` /
``cv_error`` are the fold furthest from the measurement (named in ``cv_fold``) and
``cv_low`` / ``cv_high`` the range of the signed error over the row's folds. The group
table then gives the in-sample and the cross-validated error side by side; a row that no
registered part reaches has no cross-validated value, and the table says how many rows
of each group were cross-validated. ``--group`` / ``--ids`` run a subset of the rows.

Outputs (written atomically): ``report.csv`` (one line per expressed row) and
``report.md`` (median and 90th-percentile absolute error overall and per group, rows
expressed per group, the worst rows, the full table, and the unexpressed rows with
what each lacks). No absolute path of the machine is written.
"""

from __future__ import annotations

import csv
import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hetsim.simulator.crossval import RowCV
from hetsim.simulator.errors import ScenarioError, dotted
from hetsim.simulator.version import __version__

ENDTOEND = "endtoend.csv"
ENERGY = "energy.csv"
"""Published end-to-end energy measurements (ids ``E01``...), same columns as
:data:`ENDTOEND`, beside it; validation only, like it (docs/energy.md)."""
TIMING = ("training", "decode", "serving", "cpu", "offload", "collective", "tee")
"""The groups of time and throughput rows (``all`` in the report)."""
GROUPS = (*TIMING, "energy")
INFERENCE = ("decode", "serving", "cpu", "offload", "collective")
HOST = ("cpu", "offload", "tee")  # issue 17's target group: work on or through the host
"""The groups of issue 15's target (inference and collective rows)."""
COPIED = ("model_fits", "kernel_classes", "borrowed_fits")
COLUMNS = ("id", "group", "metric", "published", "unit", "predicted", "signed_error",
           "abs_error", "optimistic", "model_fits", "kernel_classes", "borrowed_fits",
           "in_sample", "cv_predicted", "cv_error", "cv_fold", "cv_low", "cv_high", "status",
           "scenario")  # fmt: skip
WORST = 5
_ID = re.compile(r"^[VE]\d{2,3}$")

Group = Literal["training", "decode", "serving", "cpu", "offload", "collective", "tee", "energy"]


def repo_root() -> Path:
    """The repository holding this module (the ``simulator/`` folder's parent)."""
    return Path(__file__).resolve().parent.parent


def default_rows() -> Path:
    """``validation/rows.yaml`` of the repository."""
    return repo_root() / "validation" / "rows.yaml"


def default_calibration_dir() -> Path:
    """``validation/data``: the shipped copy of ``endtoend.csv`` (in a clone and in a wheel)."""
    return repo_root() / "validation" / "data"


def shared_calibration_dir() -> Path:
    """``../shared/calibration`` beside the repository: the optional richer source the
    shipped copy was taken from (absent from a wheel and from most clones)."""
    return repo_root().parent / "shared" / "calibration"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Row(_Strict):
    """An expressed row: the scenario that predicts a published measurement."""

    group: Group
    scenario: str = Field(min_length=1)
    column: str = Field(min_length=1)
    scale: float = 1.0
    invert: bool = False
    fast: bool = False
    note: str = ""
    pending: str | None = None
    in_sample: bool | None = None

    @field_validator("scale")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v) or v == 0:
            raise ValueError(f"must be finite and non-zero, got {v}")
        return v


class Unexpressed(_Strict):
    """A row hetsim cannot express yet, and the capability it lacks."""

    group: Group
    lacks: str = Field(min_length=1)
    issue: int | None = None


class RowsFile(_Strict):
    """``validation/rows.yaml``."""

    rows: dict[str, Row] = Field(default_factory=dict)
    unexpressed: dict[str, Unexpressed] = Field(default_factory=dict)

    @field_validator("rows", "unexpressed")
    @classmethod
    def _ids(cls, v: dict[str, Any]) -> dict[str, Any]:
        bad = [k for k in v if not _ID.match(k)]
        if bad:
            raise ValueError(f"ids must look like V01 (or E01: energy), got {bad}")
        return v


@dataclass(frozen=True)
class Published:
    """One row of ``endtoend.csv``."""

    id: str
    what: str
    metric: str
    value: float
    unit: str


@dataclass
class Outcome:
    """One expressed row after its run (``predicted`` is None unless status is ok)."""

    id: str
    row: Row
    published: Published
    scenario: str
    status: str = "ok"
    predicted: float | None = None
    copied: dict[str, str] = field(default_factory=dict)
    cv: RowCV | None = None

    @property
    def cv_predicted(self) -> float | None:
        """The cross-validated prediction (the fold furthest from the measurement)."""
        w = None if self.cv is None else self.cv.worst(self.published.value)
        return None if w is None else w.predicted

    @property
    def cv_signed_error(self) -> float | None:
        """cv_predicted / published - 1."""
        v = self.cv_predicted
        return None if v is None else v / self.published.value - 1.0

    def direction(self, err: float | None) -> bool | None:
        """Whether ``err`` (a signed error of this row) is optimistic."""
        if err is None:
            return None
        unit = self.published.unit.strip()
        if "/s" in unit:
            return err > 0
        if unit in ("s", "ms", "us") or unit.startswith("J"):  # a time, an energy: less
            return err < 0
        return None

    @property
    def ok(self) -> bool:
        """Whether the row ran and gave a prediction."""
        return self.predicted is not None

    @property
    def signed_error(self) -> float | None:
        """predicted / published - 1."""
        if self.predicted is None:
            return None
        return self.predicted / self.published.value - 1.0

    @property
    def optimistic(self) -> bool | None:
        """Faster (or, for an energy, cheaper) than measured: a higher rate, a shorter time,
        less energy (None: other units)."""
        return self.direction(self.signed_error)


class CalibrationMissing(Exception):
    """The calibration data (``endtoend.csv``) is not where it was looked for."""


def load_published(calibration_dir: Path) -> dict[str, Published]:
    """Rows of ``endtoend.csv`` and, when it is there, ``energy.csv`` by id
    (CalibrationMissing if ``endtoend.csv`` is absent)."""
    path = calibration_dir / ENDTOEND
    if not path.is_file():
        raise CalibrationMissing(
            f"hetsim fidelity: no {ENDTOEND} in {calibration_dir} (the calibration data; "
            "give --calibration-dir)"
        )
    out = _read_published(path)
    energy = calibration_dir / ENERGY
    if not energy.is_file():  # a --calibration-dir copy without it: the shipped one
        energy = default_calibration_dir() / ENERGY
    if energy.is_file():
        out.update(_read_published(energy))
    return out


def _read_published(path: Path) -> dict[str, Published]:
    out: dict[str, Published] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        for n, rec in enumerate(csv.DictReader(fh), start=2):
            try:
                out[rec["id"]] = Published(
                    rec["id"], rec["what"], rec["metric"], float(rec["value"]), rec["unit"]
                )
            except (KeyError, TypeError, ValueError) as e:
                raise ScenarioError(path.name, f"line {n}", f"unreadable row ({e})") from None
    return out


def load_rows(path: Path) -> RowsFile:
    """The rows file at ``path`` (ScenarioError naming file and field if bad)."""
    from hetsim.simulator.boundary import read_text

    name = path.name
    try:
        raw = yaml.safe_load(read_text(path, name))  # a regular file only, size-limited
    except yaml.YAMLError as e:
        raise ScenarioError(name, "", f"not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ScenarioError(name, "", "expected a mapping with 'rows' and 'unexpressed'")
    try:
        rows = RowsFile.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        raise ScenarioError(name, dotted(err["loc"]), err["msg"]) from None
    both = sorted(set(rows.rows) & set(rows.unexpressed))
    if both:
        raise ScenarioError(name, "unexpressed", f"{both} also listed under rows")
    return rows


def check_ids(rows: RowsFile, published: dict[str, Published], name: str) -> None:
    """Every listed id must be a row of ``endtoend.csv``."""
    for section in ("rows", "unexpressed"):
        unknown = sorted(set(getattr(rows, section)) - set(published))
        if unknown:
            raise ScenarioError(name, section, f"{unknown} are not ids of {ENDTOEND} or {ENERGY}")


def _id_key(row_id: str) -> tuple[bool, int]:
    return (row_id[0] != "V", int(row_id[1:]))


def _predict(value: float, row: Row) -> float:
    return row.scale / value if row.invert else row.scale * value


def _one_line(text: str, base: Path) -> str:
    """An error message on one line, with ``base``'s absolute path cut out."""
    first = str(text).strip().splitlines()[0] if str(text).strip() else type(text).__name__
    return first.replace(f"{base.resolve()}/", "").replace(f"{base}/", "")


def run_row(row_id: str, row: Row, published: Published, rows_dir: Path) -> Outcome:
    """Run one expressed row's scenario and compute its prediction."""
    from hetsim.devices.memory import OutOfMemory
    from hetsim.simulator.engine import InvariantViolation
    from hetsim.simulator.runner import as_scenario, simulate

    shown = f"{rows_dir.name}/{row.scenario}"
    out = Outcome(row_id, row, published, shown)

    def bad_input(e: ScenarioError) -> Outcome:
        reason = _one_line(str(e), rows_dir)
        out.status = (
            f"skipped: pending {row.pending} ({reason})" if row.pending else f"failed: {reason}"
        )
        return out

    try:
        sc = as_scenario(rows_dir / row.scenario)
    except ScenarioError as e:
        return bad_input(e)
    try:
        summary = simulate(sc).summary_row
    except ScenarioError as e:  # bad input only building can find (a missing price...)
        return bad_input(e)
    except (OutOfMemory, InvariantViolation, ValueError, KeyError) as e:
        out.status = f"failed: {type(e).__name__}: {_one_line(str(e), rows_dir)}"
        return out
    except Exception as e:  # a bug: recorded like a sweep point's error, the report goes on
        out.status = f"failed: {type(e).__name__} (bug): {_one_line(str(e), rows_dir)}"
        return out
    out.copied = {k: str(summary[k]) for k in COPIED if k in summary}
    if row.column not in summary:
        out.status = f"failed: the run has no summary column {row.column!r}"
        return out
    value = float(summary[row.column])
    if not math.isfinite(value) or (row.invert and value == 0):
        out.status = f"failed: column {row.column} = {value}"
        return out
    out.predicted = _predict(value, row)
    return out


def evaluate(
    rows: RowsFile, published: dict[str, Published], rows_dir: Path, fast: bool = False,
    select: Callable[[str, Row], bool] | None = None,
) -> list[Outcome]:  # fmt: skip
    """Run every expressed row (only ``fast: true`` ones with ``fast``; only those
    ``select`` accepts), by id order."""
    ids = sorted(rows.rows, key=_id_key)
    return [
        run_row(i, rows.rows[i], published[i], rows_dir)
        for i in ids
        if (not fast or rows.rows[i].fast) and (select is None or select(i, rows.rows[i]))
    ]


def cross_validate(
    outcomes: Sequence[Outcome], rows_dir: Path, progress: Callable[[str], None] | None = None
) -> None:
    """Fill each ran outcome's ``cv`` (module doc; :func:`simulator.crossval.cross_validate`)."""
    from hetsim.simulator import crossval

    def rerun(o: Outcome) -> Callable[[], float | None]:
        return lambda: run_row(o.id, o.row, o.published, rows_dir).predicted

    items = [(o.id, rows_dir / o.row.scenario, rerun(o)) for o in outcomes if o.ok]
    energy = frozenset(o.id for o in outcomes if o.ok and o.row.group == "energy")
    got = crossval.cross_validate(items, progress=progress, energy_rows=energy)
    for o in outcomes:
        if o.ok:
            o.cv = got[o.id]


# ---- tables and report ---------------------------------------------------------------


def _g(x: float | None) -> str:
    return "" if x is None else f"{x:.6g}"


def table_rows(outcomes: Sequence[Outcome]) -> list[dict[str, str]]:
    """One dict per outcome with the :data:`COLUMNS` as strings (the CSV's lines)."""
    out = []
    for o in outcomes:
        err = o.signed_error
        opt = o.optimistic
        rng = None if o.cv is None else o.cv.error_range(o.published.value)
        worst = None if o.cv is None else o.cv.worst(o.published.value)
        out.append({
            "id": o.id,
            "group": o.row.group,
            "metric": o.published.metric,
            "published": _g(o.published.value),
            "unit": o.published.unit,
            "predicted": _g(o.predicted),
            "signed_error": _g(err),
            "abs_error": _g(None if err is None else abs(err)),
            "optimistic": "" if opt is None else str(opt).lower(),
            **{k: o.copied.get(k, "") for k in COPIED},
            "in_sample": "" if o.row.in_sample is None else str(o.row.in_sample).lower(),
            "cv_predicted": _g(o.cv_predicted),
            "cv_error": _g(o.cv_signed_error),
            "cv_fold": "" if worst is None else worst.fold,
            "cv_low": "" if rng is None else _g(rng[0]),
            "cv_high": "" if rng is None else _g(rng[1]),
            "status": o.status,
            "scenario": o.scenario,
        })  # fmt: skip
    return out


def error_stats(errors: Sequence[float]) -> tuple[float, float] | None:
    """(median, 90th percentile) of absolute errors; None when there are none."""
    if not errors:
        return None
    a = np.abs(np.asarray(errors, dtype=float))
    return float(np.median(a)), float(np.percentile(a, 90))


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:+.1f}%"


def _apct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _cv_range(t: dict[str, str]) -> str:
    if not t["cv_low"]:
        return ""
    return f"{100 * float(t['cv_low']):+.1f}..{100 * float(t['cv_high']):+.1f}%"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _cv_cells(got: Sequence[Outcome]) -> str:
    """The cross-validated cells of a group line: rows, median, p90, pessimistic."""
    errs = [(o, o.cv_signed_error) for o in got if o.cv_signed_error is not None]
    stats = error_stats([e for _, e in errs])
    pess = sum(1 for o, e in errs if o.direction(e) is False)
    med, p90 = ("", "") if stats is None else (_apct(stats[0]), _apct(stats[1]))
    return f" {len(errs)} | {med} | {p90} | {pess} of {len(errs)} |"


def report_markdown(
    outcomes: Sequence[Outcome],
    rows: RowsFile,
    published: dict[str, Published],
    fast: bool = False,
) -> str:
    """The Markdown report (module doc)."""
    ran = [o for o in outcomes if o.ok]
    lines = [
        "# hetsim fidelity report",
        "",
        f"Generated by `hetsim fidelity{' --fast' if fast else ''}` (hetsim {__version__}) "
        f"from `validation/rows.yaml` against `{ENDTOEND}` of the calibration data "
        f"({len(published)} published end-to-end measurements; a validation set, never "
        "used to fit the cost model). Rerun it after any change to the cost model.",
        "",
        "signed error = predicted / published - 1; |error| its absolute value; "
        "optimistic = the prediction is faster than the measurement (a higher rate or a "
        "shorter time).",
        "",
    ]
    if fast:
        lines += ["**Fast subset only** (rows with `fast: true`).", ""]
    cv = any(o.cv is not None for o in ran)
    if cv:
        lines += [
            "Cross-validated (`--cv`): every fitted part a row reads is refitted without one "
            "calibration source or hardware platform at a time (simulator/crossval.py) and "
            "the row re-run; a row's cross-validated error is its fold furthest from the "
            "measurement. cv rows = rows some registered part reaches; the others have no "
            "cross-validated value.", ""]  # fmt: skip
    head = "| group | rows | expressed | ran | median abs error | p90 abs error | optimistic |"
    rule = "|---|---:|---:|---:|---:|---:|---:|"
    if cv:
        head += " cv rows | cv median | cv p90 | cv pessimistic |"
        rule += "---:|---:|---:|---:|"
    lines += ["## Error by group", "", head, rule]
    groups = {i: r.group for i, r in rows.rows.items()}
    groups.update({i: u.group for i, u in rows.unexpressed.items()})
    blocks = [(g, g, {g}) for g in GROUPS]
    blocks += [("inference + collective", "**inference + collective**", set(INFERENCE)),
               ("offload + CPU + TEE", "**offload + CPU + TEE**", set(HOST)),
               ("all", "**all**", set(TIMING))]  # fmt: skip
    for key, name, members in blocks:
        listed = [i for i, g in groups.items() if g in members]
        expressed = [i for i, r in rows.rows.items() if r.group in members]
        got = [o for o in ran if o.row.group in members]
        stats = error_stats([o.signed_error or 0.0 for o in got])
        opt = sum(1 for o in got if o.optimistic)
        med, p90 = ("", "") if stats is None else (_apct(stats[0]), _apct(stats[1]))
        if key not in GROUPS or listed:
            line = (
                f"| {name} | {len(listed)} | {len(expressed)} | {len(got)} | {med} | {p90} | "
                f"{opt} of {len(got)} |"
            )
            if cv:
                line += _cv_cells(got)
            lines.append(line)
    missing = sorted(set(published) - set(rows.rows) - set(rows.unexpressed), key=_id_key)
    if missing:
        lines += ["", f"Not yet listed in rows.yaml: {', '.join(missing)}."]
    worst = sorted(ran, key=lambda o: -abs(o.signed_error or 0.0))[:WORST]
    lines += ["", "## Worst rows", "", "| id | group | what | published | predicted | error |",
              "|---|---|---|---:|---:|---:|"]  # fmt: skip
    for o in worst:
        p = o.published
        lines.append(
            f"| {o.id} | {o.row.group} | {_md_escape(p.what)} | {p.value:.6g} {p.unit} | "
            f"{_g(o.predicted)} {p.unit} | {_pct(o.signed_error)} |"
        )
    lines += ["", "## Every expressed row", "",
              "| id | group | metric | published | predicted | error | cv error | cv range | "
              "cv fold | in sample | model fits | kernel classes | borrowed fits | status | "
              "scenario |",
              "|---|---|---|---:|---:|---:|---:|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for t, o in zip(table_rows(outcomes), outcomes, strict=True):
        unit = f" {_md_escape(t['unit'])}"
        lines.append(
            f"| {t['id']} | {t['group']} | {_md_escape(t['metric'])} | {t['published']} "
            f"{_md_escape(t['unit'])} | {t['predicted']}{unit if t['predicted'] else ''} | "
            f"{_pct(o.signed_error)} | {_pct(o.cv_signed_error)} | {_cv_range(t)} | "
            f"{t['cv_fold']} | {t['in_sample']} | {t['model_fits']} | {t['kernel_classes']} | "
            f"{t['borrowed_fits']} | {_md_escape(t['status'])} | `{t['scenario']}` |"
        )
    lines += ["", "Mapping of each published metric to the run's column:", ""]
    for o in outcomes:
        how = f"{o.row.scale:g} / {o.row.column}" if o.row.invert else (
            f"{o.row.scale:g} x {o.row.column}" if o.row.scale != 1 else o.row.column
        )  # fmt: skip
        note = f": {_md_escape(o.row.note)}" if o.row.note else ""
        lines.append(f"- {o.id} = {how}{note}")
    lines += ["", "## Rows hetsim cannot express yet", "", "| id | group | what | lacks | issue |",
              "|---|---|---|---|---|"]  # fmt: skip
    for i in sorted(rows.unexpressed, key=_id_key):
        u = rows.unexpressed[i]
        what = _md_escape(published[i].what) if i in published else ""
        issue = f"#{u.issue}" if u.issue is not None else ""
        lines.append(f"| {i} | {u.group} | {what} | {_md_escape(u.lacks)} | {issue} |")
    return "\n".join(lines) + "\n"


def write_report(
    out_dir: Path, outcomes: Sequence[Outcome], markdown: str, *, force: bool = False
) -> None:
    """Write ``report.csv`` and ``report.md`` into ``out_dir`` by the rules of ``run
    --out`` (:func:`simulator.outdir.output_dir`: a new, empty or hetsim fidelity
    folder, atomically; ``force``: beside the user's files, never over one)."""
    from hetsim.simulator.outdir import output_dir

    with output_dir(out_dir, "fidelity", force=force) as tmp:
        with (tmp / "report.csv").open("w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(COLUMNS), lineterminator="\n")
            w.writeheader()
            w.writerows(table_rows(outcomes))
        (tmp / "report.md").write_text(markdown, encoding="utf-8")


def main(
    rows_path: Path | None = None,
    calibration_dir: Path | None = None,
    out_dir: Path | None = None,
    fast: bool = False,
    quiet: bool = False,
    cv: bool = False,
    groups: Sequence[str] = (),
    ids: Sequence[str] = (),
    force: bool = False,
) -> int:
    """``hetsim fidelity``: 0 on success, 1 if an expressed (not pending) row failed, 2
    when the calibration data or the rows file is missing or bad."""
    from hetsim.simulator.outdir import check_output_dir

    rows_path = rows_path or default_rows()
    if out_dir is not None:  # refuse before running, not after
        check_output_dir(out_dir, "fidelity", force=force)
    try:
        published = load_published(calibration_dir or default_calibration_dir())
    except CalibrationMissing as e:
        print(str(e), file=sys.stderr)
        return 2
    rows = load_rows(rows_path)
    check_ids(rows, published, rows_path.name)
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        print(f"hetsim fidelity: --group {unknown[0]}: not one of {', '.join(GROUPS)}",
              file=sys.stderr)  # fmt: skip
        return 2
    bad = sorted(set(ids) - set(rows.rows))
    if bad:
        print(f"hetsim fidelity: --ids {bad[0]}: not an expressed row", file=sys.stderr)
        return 2

    def select(i: str, r: Row) -> bool:
        return (not groups or r.group in groups) and (not ids or i in ids)

    outcomes = evaluate(rows, published, rows_path.parent, fast, select)
    if cv:
        cross_validate(outcomes, rows_path.parent,
                       None if quiet else (lambda m: print(m, file=sys.stderr)))  # fmt: skip
    markdown = report_markdown(outcomes, rows, published, fast)
    if out_dir is not None:
        write_report(out_dir, outcomes, markdown, force=force)
    if not quiet:
        for t in table_rows(outcomes):
            err = t["signed_error"] and f"{100 * float(t['signed_error']):+.1f}%"
            shown = err or t["status"]
            if t["cv_error"]:
                shown += f"  cv {100 * float(t['cv_error']):+.1f}% ({t['cv_fold']})"
            print(f"{t['id']:<4} {t['group']:<10} published {t['published']:>9} "
                  f"predicted {t['predicted'] or '-':>9} {t['unit']:<10} {shown}")  # fmt: skip
        if out_dir is not None:
            print(f"report: {out_dir}/report.md, {out_dir}/report.csv")
    failed = [o for o in outcomes if o.status.startswith("failed")]
    return 1 if failed else 0
