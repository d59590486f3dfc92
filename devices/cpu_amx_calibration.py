"""Fit of the AMX GEMM constants of :mod:`hetsim.devices.cpu` to published kernel-level
measurements: ``gemm_efficiency`` (few threads), ``gemm_efficiency_full_socket`` (every
core of a socket) and ``int8_gemm_speedup`` (the int8 matrix path over the bf16 one).

Data: ``devices/data/cpu_amx_points.csv`` (none of its sources is an ``endtoend.csv``
row's source: ``tests/test_cpu_amx_calibration.py`` checks it). Each point is an achieved
GEMM rate (FLOP/s) with the threads, sockets and catalogue base clock of its machine, or
the source's own ratio to peak. Ratios are on one scale: achieved over ``threads x clock
x 1024`` (AMX bf16 FLOP per cycle per core, ``matrix_flops_per_cycle`` of the AMX CPUs),
at the base clock ``devices/cpu_kernels.yaml`` uses for compute rates.

Roles: ``few`` (1-4 threads) fit ``gemm_efficiency``; ``full`` (every core of the
socket(s)) fit ``gemm_efficiency_full_socket``; ``int8`` points give, against the same
source's ``full`` bf16 point on the same machine, ``int8_gemm_speedup``; ``check`` points
are held out and compared with the thread interpolation of
:meth:`hetsim.devices.cpu.CpuKernels.gemm_efficiency_at`; ``none`` is printed only (the
CPU or the threads are not stated). Each fit is the median over sources of each source's
median (no source's point count outweighs another's).

Run ``python -m hetsim.devices.cpu_amx_calibration`` (also printed at the end of
``python -m hetsim.devices.calibration``).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hetsim.devices.cpu import KERNEL_FILE, _yaml_load, cpu_kernels
from hetsim.devices.cpu_calibration import (
    positive_number,
    read_rows,
    run_report_cli,
    shipped_line,
)

DATA_FILE = Path(__file__).resolve().parent / "data" / "cpu_amx_points.csv"
AMX_BF16_FLOPS_PER_CYCLE = 1024.0  # per core (Intel AMX: 16x32 bf16 tile product / 16 cycles)
AMX_CPUS = ("xeon-8480", "xeon-8488c", "xeon-gold-6454s", "xeon-6980p")
Role = Literal["few", "full", "int8", "check", "none"]
_ROLES = ("few", "full", "int8", "check", "none")
_COLUMNS = ("id", "source_key", "source_repo", "source_ref", "cpu", "kernel", "dtype",
            "threads", "sockets", "cores_per_socket", "clock_hz", "achieved_flops",
            "stated_ratio", "role", "note", "source")  # fmt: skip


@dataclass(frozen=True)
class AmxPoint:
    """One published AMX GEMM rate with the machine it was measured on."""

    id: str
    source_key: str
    source_repo: str
    source_ref: str
    cpu: str
    dtype: str
    threads: float | None
    sockets: float | None
    cores_per_socket: float | None
    clock_hz: float | None
    achieved_flops: float | None
    stated_ratio: float | None
    role: Role
    source: str

    def ratio(self) -> float:
        """Achieved rate over ``threads x clock x 1024`` (the source's ratio if it states one)."""
        if self.stated_ratio is not None:
            return self.stated_ratio
        assert self.achieved_flops and self.threads and self.clock_hz  # checked at load
        return self.achieved_flops / (self.threads * self.clock_hz * AMX_BF16_FLOPS_PER_CYCLE)


def load_points(path: Path = DATA_FILE) -> list[AmxPoint]:
    """The calibration set; ValueError names the file, row and field of any bad entry."""
    rows = read_rows(path, _COLUMNS)
    out = []
    for row in rows:
        where = f"{path.name}: row {row['id']}"
        if row["role"] not in _ROLES:
            raise ValueError(f"{where}: role: one of {', '.join(_ROLES)}, got {row['role']!r}")
        for key in ("source_repo", "source_ref", "source"):
            if not row[key].strip():
                raise ValueError(f"{where}: {key}: empty")
        nums = {k: positive_number(path, row, k) for k in
                ("threads", "sockets", "cores_per_socket", "clock_hz", "achieved_flops",
                 "stated_ratio")}  # fmt: skip
        fitted = row["role"] != "none"
        if (
            fitted
            and nums["stated_ratio"] is None
            and not (nums["achieved_flops"] and nums["threads"] and nums["clock_hz"])
        ):
            raise ValueError(f"{where}: needs stated_ratio, or achieved_flops, threads, clock_hz")
        if row["role"] == "check" and not (nums["threads"] and nums["cores_per_socket"]):
            raise ValueError(f"{where}: a check point needs threads and cores_per_socket")
        out.append(AmxPoint(
            id=row["id"], source_key=row["source_key"], source_repo=row["source_repo"],
            source_ref=row["source_ref"], cpu=row["cpu"], dtype=row["dtype"],
            threads=nums["threads"], sockets=nums["sockets"],
            cores_per_socket=nums["cores_per_socket"], clock_hz=nums["clock_hz"],
            achieved_flops=nums["achieved_flops"], stated_ratio=nums["stated_ratio"],
            role=row["role"],  # type: ignore[arg-type]
            source=row["source"],
        ))  # fmt: skip
    return out


def _median_over_sources(points: Sequence[AmxPoint], role: Role, exclude: str | None) -> float:
    by_source: dict[str, list[float]] = {}
    for p in points:
        if p.role == role and p.source_key != exclude:
            by_source.setdefault(p.source_key, []).append(p.ratio())
    if not by_source:
        raise ValueError(f"cpu_amx_points: no {role!r} point to fit")
    return float(statistics.median(statistics.median(v) for v in by_source.values()))


def int8_speedups(points: Sequence[AmxPoint]) -> dict[str, float]:
    """Per source: its int8 points' median rate over its full-socket bf16 points' median."""
    out: dict[str, float] = {}
    for src in sorted({p.source_key for p in points if p.role == "int8"}):
        int8 = [p.ratio() for p in points if p.source_key == src and p.role == "int8"]
        bf16 = [p.ratio() for p in points if p.source_key == src and p.role == "full"]
        if not bf16:
            raise ValueError(f"cpu_amx_points: {src}: an int8 point needs a bf16 'full' point")
        out[src] = statistics.median(int8) / statistics.median(bf16)
    return out


@dataclass(frozen=True)
class AmxFit:
    """The three fitted constants."""

    few: float  # gemm_efficiency (1-4 threads)
    full: float  # gemm_efficiency_full_socket
    int8_speedup: float  # int8_gemm_speedup


def fit(points: Sequence[AmxPoint], exclude: str | None = None) -> AmxFit:
    """Medians over sources (``exclude``: leave that source out)."""
    speed = {k: v for k, v in int8_speedups(points).items() if k != exclude}
    if not speed:
        raise ValueError("cpu_amx_points: no int8/bf16 pair to fit")
    return AmxFit(
        few=_median_over_sources(points, "few", exclude),
        full=_median_over_sources(points, "full", exclude),
        int8_speedup=float(statistics.median(speed.values())),
    )


def predicted(point: AmxPoint, f: AmxFit) -> float:
    """The model's efficiency at the point's threads per socket (thread interpolation)."""
    assert point.threads and point.cores_per_socket
    k = dataclasses.replace(
        cpu_kernels("xeon-8480"), gemm_efficiency=f.few, gemm_efficiency_full_socket=f.full
    )
    per_socket = point.threads / (point.sockets or 1.0)
    return k.gemm_efficiency_at(per_socket, point.cores_per_socket)


def stored_fit() -> dict[str, float]:
    """The ``amx_gemm_fit`` block of ``devices/cpu_kernels.yaml``."""
    data = _yaml_load(KERNEL_FILE.read_text(encoding="utf-8"))
    return {k: float(v) for k, v in data["amx_gemm_fit"].items() if not isinstance(v, list)}


def report(path: Path = DATA_FILE) -> str:
    """The table printed by ``python -m hetsim.devices.cpu_amx_calibration``."""
    points = load_points(path)
    f = fit(points)
    lines = [
        "AMX GEMM efficiency (devices/data/cpu_amx_points.csv; ratio = achieved / (threads x "
        "base clock x 1024 bf16 FLOP/cycle); validation rows never used)",
        f"{'id':4} {'source':22} {'dtype':5} {'thr':>4} {'role':5} {'ratio':>6} {'model':>6}",
    ]
    for p in points:
        thr = f"{p.threads:.0f}" if p.threads else "-"
        if p.role == "none" and p.stated_ratio is None:
            lines.append(f"{p.id:4} {p.source_key:22} {p.dtype:5} {thr:>4} {p.role:5} "
                         f"{'-':>6} {'-':>6}  (CPU or threads not stated)")  # fmt: skip
            continue
        model = ""
        if p.role in ("few", "full", "check") and p.threads and p.cores_per_socket:
            model = f"{predicted(p, f):6.3f}"
        lines.append(f"{p.id:4} {p.source_key:22} {p.dtype:5} {thr:>4} {p.role:5} "
                     f"{p.ratio():6.3f} {model:>6}")  # fmt: skip
    lines.append(
        f"fit: gemm_efficiency (1-4 threads) = {f.few:.4f}; gemm_efficiency_full_socket = "
        f"{f.full:.4f}; int8_gemm_speedup = {f.int8_speedup:.4f}"
    )
    for p in points:
        if p.role == "check":
            err = predicted(p, f) / p.ratio() - 1.0
            lines.append(f"held-out check {p.id}: model {predicted(p, f):.3f} vs stated "
                         f"{p.ratio():.3f} ({err:+.1%})")  # fmt: skip
    for src in sorted({p.source_key for p in points if p.role == "full"}):
        held = fit(points, exclude=src) if src not in int8_speedups(points) else None
        full = _median_over_sources(points, "full", src)
        lines.append(
            f"  leave out {src:22}: gemm_efficiency_full_socket {full:.4f}"
            + (f", int8_gemm_speedup {held.int8_speedup:.4f}" if held else "")
        )
    one_socket = [
        dataclasses.replace(p, threads=p.threads / p.sockets, sockets=1.0)
        if p.source_key == "ktransformers-AMX.md" and p.threads and p.sockets
        else p
        for p in points
    ]
    lines.append(
        "sensitivity: KTransformers' 'Xeon4' figures on one 6454S socket instead of two: "
        f"gemm_efficiency_full_socket {fit(one_socket).full:.4f}"
    )
    lines.append(shipped_line("amx_gemm_fit", stored_fit()))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """CLI: print the fit, the held-out check and the sensitivities."""
    run_report_cli(report, DATA_FILE, __doc__, argv)


if __name__ == "__main__":
    main()
