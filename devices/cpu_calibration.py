"""Fit of the CPU GEMV weight-stream efficiency (``gemv_bandwidth_efficiency``) to published
CPU decode and GEMV measurements that come with a bandwidth measurement of the same machine.

Data: ``devices/data/cpu_decode_points.csv`` (a calibration set; none of its sources is an
``endtoend.csv`` row's source, thread or page: ``tests/test_cpu_calibration.py`` checks it).
Each point gives a weight-streaming rate (a whole-model decode: file bytes x tokens/s, or a
kernel microbenchmark's GB/s) and the same machine's STREAM-type or read-only bandwidth, or
the source's own ratio to one of them.

The model's denominator (:class:`hetsim.devices.cpu.CpuModel`) is the STREAM-fitted socket
rate (catalogue ``memory_efficiency``, fitted to STREAM triad, K05). A point measured
against a read-only kernel is moved onto that scale by the read-only / triad ratio:
the same machine's where it has both, otherwise the median of the four public MLC
outputs of ``devices/cpu_kernels.yaml`` B5 (``ALL Reads`` over ``Stream-triad like``).

Fit: per source, the median ratio of its memory-bound points; across sources, the median
(the least-absolute-deviation estimate, so no source's point count outweighs another's),
capped at 1 (the model's domain, ``(0, 1]``). Points whose source says the kernel is
compute-bound (``memory_bound: no``: an unpack or shuffle port binds) or limited by NUMA
placement are printed, not fitted: :mod:`hetsim.devices.cpu` prices those with
``dequant_weights_per_cycle`` and ``remote_bandwidth_ratio``. The report prints each
point's residual and a leave-one-source-out refit.

Run ``python -m hetsim.devices.cpu_calibration`` (also printed at the end of
``python -m hetsim.devices.calibration``).
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hetsim.devices.cpu import KERNEL_FILE, _yaml_load

DATA_FILE = Path(__file__).resolve().parent / "data" / "cpu_decode_points.csv"
# devices/cpu_kernels.yaml B5: MLC 'ALL Reads' / 'Stream-triad like' (GB/s) of five hosts
B5_READ_TRIAD_GBps: tuple[tuple[float, float], ...] = (
    (225.1, 190.3),
    (222.6, 201.4),
    (190.9, 157.8),
    (105.7, 94.0),
    (181.2235, 147.9425),  # cncf/cnf-testbed issue #129 (MLC v3.5, 2 nodes)
)
MemoryBound = Literal["yes", "no", "numa"]
_COLUMNS = ("id", "source_key", "cpu", "engine", "kernel", "weight_format", "threads",
            "memory_bound", "achieved_Bps", "stream_Bps", "read_Bps", "stated_ratio",
            "ratio_of", "note", "source")  # fmt: skip


def b5_read_over_triad() -> float:
    """Median read-only / triad ratio of the B5 MLC outputs."""
    return statistics.median(r / t for r, t in B5_READ_TRIAD_GBps)


@dataclass(frozen=True)
class DecodePoint:
    """One published weight-streaming rate with its machine's bandwidth reference."""

    id: str
    source_key: str
    cpu: str
    engine: str
    kernel: str
    weight_format: str
    threads: str
    memory_bound: MemoryBound
    achieved_Bps: float | None
    stream_Bps: float | None
    read_Bps: float | None
    stated_ratio: float | None
    ratio_of: Literal["stream", "read", ""]
    source: str

    def ratio(self) -> tuple[float, str]:
        """(achieved rate / reference, reference kind ``stream`` or ``read``)."""
        if self.stated_ratio is not None:
            return self.stated_ratio, self.ratio_of or "stream"
        assert self.achieved_Bps is not None  # checked at load
        if self.stream_Bps is not None:
            return self.achieved_Bps / self.stream_Bps, "stream"
        assert self.read_Bps is not None
        return self.achieved_Bps / self.read_Bps, "read"

    def stream_ratio(self, read_over_triad: float) -> float:
        """Achieved rate over the machine's STREAM-triad-equivalent bandwidth."""
        value, kind = self.ratio()
        return value if kind == "stream" else value * read_over_triad


def positive_number(path: Path, row: dict[str, str], key: str) -> float | None:
    """A points CSV's field as a number > 0 (None if empty); ValueError names the file,
    row and field (shared by the CPU calibration sets)."""
    text = (row.get(key) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(
            f"{path.name}: row {row.get('id')}: {key}: not a number: {text!r}"
        ) from None
    if not value > 0:
        raise ValueError(f"{path.name}: row {row.get('id')}: {key}: must be > 0")
    return value


def read_rows(path: Path, columns: Sequence[str]) -> list[dict[str, str]]:
    """A points CSV's rows; ValueError names the file and any missing column."""
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path.name}: missing columns {missing}")
        return list(reader)


def load_points(path: Path = DATA_FILE) -> list[DecodePoint]:
    """The calibration set; ValueError names the file, row and field of any bad entry."""
    rows = read_rows(path, _COLUMNS)
    out = []
    for row in rows:
        where = f"{path.name}: row {row['id']}"
        if row["memory_bound"] not in ("yes", "no", "numa"):
            raise ValueError(f"{where}: memory_bound: yes, no or numa, got {row['memory_bound']!r}")
        if row["ratio_of"] not in ("stream", "read", ""):
            raise ValueError(f"{where}: ratio_of: stream, read or empty, got {row['ratio_of']!r}")
        if not row["source"].strip():
            raise ValueError(f"{where}: source: empty")
        nums = {k: positive_number(path, row, k) for k in
                ("achieved_Bps", "stream_Bps", "read_Bps", "stated_ratio")}  # fmt: skip
        if nums["stated_ratio"] is None and (
            nums["achieved_Bps"] is None
            or (nums["stream_Bps"] is None and nums["read_Bps"] is None)
        ):
            raise ValueError(
                f"{where}: needs stated_ratio, or achieved_Bps with stream_Bps or read_Bps"
            )
        out.append(DecodePoint(
            id=row["id"], source_key=row["source_key"], cpu=row["cpu"], engine=row["engine"],
            kernel=row["kernel"], weight_format=row["weight_format"], threads=row["threads"],
            memory_bound=row["memory_bound"],  # type: ignore[arg-type]
            achieved_Bps=nums["achieved_Bps"], stream_Bps=nums["stream_Bps"],
            read_Bps=nums["read_Bps"], stated_ratio=nums["stated_ratio"],
            ratio_of=row["ratio_of"],  # type: ignore[arg-type]
            source=row["source"],
        ))  # fmt: skip
    return out


def read_over_triad(point: DecodePoint, borrowed: float | None = None) -> float:
    """The point's machine's read-only / triad ratio where it has both, else ``borrowed``
    (default: B5's median)."""
    if point.stream_Bps is not None and point.read_Bps is not None:
        return point.read_Bps / point.stream_Bps
    return b5_read_over_triad() if borrowed is None else borrowed


def source_ratios(
    points: Sequence[DecodePoint], exclude: str | None = None, borrowed: float | None = None
) -> dict[str, float]:
    """Median STREAM-equivalent ratio of each source's memory-bound points."""
    by_source: dict[str, list[float]] = {}
    for p in points:
        if p.memory_bound == "yes" and p.source_key != exclude:
            ratio = p.stream_ratio(read_over_triad(p, borrowed))
            by_source.setdefault(p.source_key, []).append(ratio)
    return {k: statistics.median(v) for k, v in by_source.items()}


def fit(
    points: Sequence[DecodePoint], exclude: str | None = None, borrowed: float | None = None
) -> tuple[float, float]:
    """(fitted efficiency capped at 1, uncapped median across sources); ``borrowed``
    replaces B5's read-only / triad ratio for machines that lack one (1.0: take a
    read-only reference as if it were STREAM)."""
    per_source = source_ratios(points, exclude, borrowed)
    if not per_source:
        raise ValueError("cpu_decode_points: no memory-bound point to fit")
    raw = statistics.median(per_source.values())
    return min(1.0, raw), raw


@dataclass(frozen=True)
class FitReport:
    """Fitted value, residuals of the fitted points and the leave-one-source-out refits."""

    efficiency: float
    uncapped: float
    residuals: dict[str, float]  # point id -> predicted / measured - 1 (fitted points)
    loso: dict[str, tuple[float, float]]  # source -> (refit without it, its held-out residual)

    def p50(self) -> float:
        return float(statistics.median(abs(r) for r in self.residuals.values()))

    def p90(self) -> float:
        errs = sorted(abs(r) for r in self.residuals.values())
        return float(errs[min(len(errs) - 1, round(0.9 * (len(errs) - 1)))])


def fit_report(points: Sequence[DecodePoint]) -> FitReport:
    """Fit, in-sample residuals per point, and leave-one-source-out refits."""
    eff, raw = fit(points)
    res = {
        p.id: eff / p.stream_ratio(read_over_triad(p)) - 1.0
        for p in points
        if p.memory_bound == "yes"
    }
    loso: dict[str, tuple[float, float]] = {}
    sources = sorted(source_ratios(points))
    for s in sources:
        if len(sources) < 2:
            break
        held, _ = fit(points, exclude=s)
        loso[s] = (held, held / source_ratios(points)[s] - 1.0)
    return FitReport(eff, raw, res, loso)


def shipped_default() -> float:
    """``gemv_bandwidth_efficiency`` in ``devices/cpu_kernels.yaml``'s defaults."""
    data = _yaml_load(KERNEL_FILE.read_text(encoding="utf-8"))
    return float(data["defaults"]["gemv_bandwidth_efficiency"])


def report(path: Path = DATA_FILE) -> str:
    """The table printed by ``python -m hetsim.devices.cpu_calibration``."""
    points = load_points(path)
    rep = fit_report(points)
    lines = [
        "CPU GEMV weight-stream efficiency (devices/data/cpu_decode_points.csv; validation "
        "rows never used)",
        f"{'id':4} {'source':20} {'fmt':6} {'thr':>4} {'bound':5} {'ratio':>6} {'ref':6} "
        f"{'vs STREAM':>9} {'residual':>9}",
    ]
    for p in points:
        value, kind = p.ratio()
        stream = p.stream_ratio(read_over_triad(p))
        res = f"{rep.residuals[p.id]:+9.1%}" if p.id in rep.residuals else f"{'not fit':>9}"
        lines.append(
            f"{p.id:4} {p.source_key:20} {p.weight_format:6} {p.threads:>4} {p.memory_bound:5} "
            f"{value:6.3f} {kind:6} {stream:9.3f} {res}"
        )
    lines.append(
        f"read-only/triad where a machine lacks both: {b5_read_over_triad():.4f} (B5 median)"
    )
    per_source = source_ratios(points)
    lines.append(
        "per source (median of its memory-bound points, vs STREAM): "
        + ", ".join(f"{k} {v:.3f}" for k, v in sorted(per_source.items()))
    )
    lines.append(
        f"fit: gemv_bandwidth_efficiency = {rep.efficiency:.3f} (median across "
        f"{len(per_source)} sources {rep.uncapped:.4f}, capped at 1); |residual| p50 "
        f"{rep.p50():.1%}, p90 {rep.p90():.1%}; shipped default {shipped_default():.3f}"
    )
    for s, (held, err) in rep.loso.items():
        lines.append(f"  leave out {s:20}: refit {held:.4f}, held-out residual {err:+.1%}")
    plain, _ = fit(points, borrowed=1.0)
    lines.append(
        f"sensitivity: read-only references taken as STREAM (no B5 correction): {plain:.4f}"
    )
    return "\n".join(lines)


def shipped_line(block: str, stored: dict[str, float]) -> str:
    """The report line naming a fit block of ``devices/cpu_kernels.yaml`` and its values."""
    values = ", ".join(f"{k} {v:.4f}" for k, v in stored.items())
    return f"shipped (devices/cpu_kernels.yaml {block}): {values}"


def run_report_cli(
    report_fn: Callable[[Path], str], data_file: Path, doc: str | None,
    argv: Sequence[str] | None = None,
) -> None:  # fmt: skip
    """The CLI of a CPU calibration module: ``--data`` (default ``data_file``), print
    ``report_fn``'s table; the description is the first line of ``doc``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else "")
    parser.add_argument("--data", type=Path, default=data_file, help="points CSV")
    args = parser.parse_args(argv)
    print(report_fn(args.data))


def main(argv: Sequence[str] | None = None) -> None:
    """CLI: print the fit and its residuals."""
    run_report_cli(report, DATA_FILE, __doc__, argv)


if __name__ == "__main__":
    main()
