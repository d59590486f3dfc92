"""Fit of the memory-bound GPU draw (``memory_activity``, ``devices/power.yaml``) to the
component power table ``devices/data/power_measurements.csv``.

Each row of the table is the draw of one GPU while it runs one kind of kernel, with its
source. A row with ``use = memory`` (a decode / token-generation reading) gives an implied
activity

``a = (power_W - idle_W) / (tdp_W - idle_W)``

with ``idle_W`` the power model's own idle reading of that device (:mod:`devices.power`), so
that the model's ``memory_W = idle_W + a x (tdp_W - idle_W)`` reproduces the row. The
reading is taken as ``u = 0`` (no compute term): a source that does not state its batch
size, or whose decode GEMMs are partly compute-bound, gives an upper bound on ``a``.

The fit weights every **source** once, whatever its number of rows: the estimate of a
source is the mean of its rows' activities, and ``memory_activity`` is the mean of the
sources' estimates. Leave-one-source-out folds (:func:`loso`) refit without each source in
turn. Rows with ``use = check`` (prefill, busy clusters) test the compute-bound end of the
model (``u = 1`` draws the board limit) and are not fitted; rows with ``use = excluded``
come from the benchmark the energy validation rows are taken from and are never fitted.

``python -m hetsim.devices.power_fit`` prints the table, the per-source estimates, the fit
and its folds; ``--validate`` also runs the energy validation rows (``validation/e0*.yaml``)
under the fit and under every fold.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

TABLE = Path(__file__).resolve().parent / "data" / "power_measurements.csv"
USES = ("memory", "check", "excluded")


@dataclass(frozen=True)
class PowerReading:
    """One row of the component power table."""

    id: str
    source: str
    device: str
    kernel_class: str
    settings: str
    power_W: float
    tdp_W: float
    use: str
    reference: str


def load_table(path: Path = TABLE) -> list[PowerReading]:
    """The rows of the component table (``#`` lines are the file's note). ValueError
    naming the file, line and field for a bad row."""
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if not ln.startswith("#")]
    out: list[PowerReading] = []
    for n, rec in enumerate(csv.DictReader(lines), start=1):
        try:
            row = PowerReading(
                rec["id"], rec["source"], rec["device"], rec["kernel_class"], rec["settings"],
                float(rec["power_W"]), float(rec["tdp_W"]), rec["use"], rec["reference"],
            )  # fmt: skip
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path.name}: data row {n}: unreadable ({e})") from None
        if row.use not in USES:
            raise ValueError(f"{path.name}: row {row.id}: use {row.use!r} not one of {USES}")
        if not (row.power_W > 0 and row.tdp_W > 0):
            raise ValueError(f"{path.name}: row {row.id}: power_W and tdp_W must be > 0")
        out.append(row)
    return out


def idle_W(device: str, tdp_W: float) -> float:
    """The power model's idle draw of ``device`` (its own reading in ``power.yaml``, else
    the GPU ``idle_fraction`` of ``tdp_W``)."""
    from hetsim.devices.power import power_table

    tab = power_table()
    own = tab.devices.get(device, {}).get("idle_W")
    if own is not None:
        return own.value
    frac = tab.gpu.get("idle_fraction")
    return (0.0 if frac is None else frac.value) * tdp_W


def implied_activity(row: PowerReading) -> float:
    """``(power_W - idle_W) / (tdp_W - idle_W)`` of a decode reading (module doc)."""
    idle = idle_W(row.device, row.tdp_W)
    return (row.power_W - idle) / (row.tdp_W - idle)


def source_estimates(rows: list[PowerReading], leave_out: str | None = None) -> dict[str, float]:
    """Per source (``use = memory`` rows only, ``leave_out`` dropped): the mean implied
    activity of its rows."""
    by: dict[str, list[float]] = {}
    for r in rows:
        if r.use == "memory" and r.source != leave_out:
            by.setdefault(r.source, []).append(implied_activity(r))
    return {s: statistics.fmean(v) for s, v in sorted(by.items())}


def fit_memory_activity(
    rows: list[PowerReading] | None = None, leave_out: str | None = None
) -> float:
    """``memory_activity``: the mean of the sources' estimates (each source once)."""
    est = source_estimates(load_table() if rows is None else rows, leave_out)
    if not est:
        raise ValueError("power_measurements.csv: no use=memory row left to fit")
    return statistics.fmean(est.values())


def loso(rows: list[PowerReading] | None = None) -> dict[str, float]:
    """Leave-one-source-out refits: held-out source -> ``memory_activity``."""
    rows = load_table() if rows is None else rows
    return {s: fit_memory_activity(rows, s) for s in source_estimates(rows)}


def predicted_memory_W(row: PowerReading, memory_activity: float) -> float:
    """The model's memory-bound draw of ``row``'s device at ``memory_activity``."""
    idle = idle_W(row.device, row.tdp_W)
    return idle + memory_activity * (row.tdp_W - idle)


def main(argv: list[str] | None = None) -> int:
    """Print the table, the fit and its folds (the energy rows under each fold:
    ``python -m hetsim.simulator.energy_diagnosis --validate``)."""
    del argv
    rows = load_table()
    print("id   source       device      class    power_W  idle_W  tdp_W  use       activity")
    for r in rows:
        act = f"{implied_activity(r):.3f}" if r.use != "check" else "-"
        print(f"{r.id:4} {r.source:12} {r.device:11} {r.kernel_class:8} {r.power_W:7.0f} "
              f"{idle_W(r.device, r.tdp_W):7.1f} {r.tdp_W:6.0f}  {r.use:9} {act}")  # fmt: skip
    for s, v in source_estimates(rows).items():
        print(f"source {s}: {v:.4f}")
    fit = fit_memory_activity(rows)
    print(f"memory_activity (fit): {fit:.4f}")
    folds = loso(rows)
    for s, v in folds.items():
        print(f"  without {s}: {v:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
