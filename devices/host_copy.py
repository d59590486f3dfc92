"""Pageable host<->GPU copies, fitted to copy microbenchmarks by transfer size.

A copy from pageable (ordinary, not page-locked) host memory cannot be DMA'd directly:
the CUDA driver stages it through a pinned bounce buffer with a CPU memcpy, pipelined
with the DMA. Its rate is therefore a fraction of the pinned rate of the same link, and
that fraction falls once the copy outgrows the caches the staging memcpy runs in. The
model prices a pageable copy at

    pageable rate = pinned rate x pageable_<dir>_ratio

with the ratio of each direction taken at the **largest** transfer size measured (the
regime of a layer's weights or KV, hundreds of MB), median over sources. The points are
``devices/data/host_copy_points.csv`` (none an endtoend.csv row's source, thread or file).

Fit (``python -m hetsim.devices.host_copy``): H2D 0.539 (64 MiB: 12.88 / 23.90 GB/s), D2H
0.465 (16 MiB, the largest D2H size in the stored copy), one source (an RTX 4090 desktop
on PCIe Gen4 x16, NVlabs/cuda-oxide PR #976). The same source's smaller copies run at
0.61-0.77 (H2D) and 0.36-0.46 (D2H) of pinned: the residuals printed by the report. Its
pinned curve (22.51 GB/s at 1 MiB, 23.90 at 64 MiB) gives a per-call cost of about
2.7 us (``t = c + n / B``), corroborating the links' 5 us ``latency_s`` (DualPath) in
order of magnitude. Without the source (its leave-one-source-out fold) the model falls
back to its prior: the staging memcpy at half of one core's DRAM bandwidth
(``core_bandwidth_Bps / 2``, read + write), a reconstruction.

Seen, not used: a GH200 (NVLink-C2C, not PCIe) pageable copy at 0.95 of pinned
(vortex-data/vortex PR #7815): a coherent CPU-GPU link, a different mechanism.
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from hetsim.devices import fit_overrides

DATA_FILE = Path(__file__).resolve().parent / "data" / "host_copy_points.csv"
_COLUMNS = ("id", "source", "platform", "link", "direction", "memory", "size_bytes",
            "bandwidth_Bps", "source_ref")  # fmt: skip


@dataclass(frozen=True)
class CopyPoint:
    """One measured copy rate."""

    id: str
    source: str
    platform: str
    link: str
    direction: str  # h2d | d2h
    memory: str  # pinned | pageable
    size_bytes: float
    bandwidth_Bps: float


def load_points(path: Path = DATA_FILE) -> list[CopyPoint]:
    """The calibration set; ValueError names the file, row and field of a bad entry."""
    out = []
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in _COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path.name}: missing columns {missing}")
        for row in reader:
            where = f"{path.name} row {row['id']}"
            if row["direction"] not in ("h2d", "d2h"):
                raise ValueError(f"{where}: direction must be h2d or d2h")
            if row["memory"] not in ("pinned", "pageable"):
                raise ValueError(f"{where}: memory must be pinned or pageable")
            try:
                size, bw = float(row["size_bytes"]), float(row["bandwidth_Bps"])
            except ValueError:
                raise ValueError(f"{where}: size_bytes and bandwidth_Bps are numbers") from None
            if not (size > 0 and bw > 0):
                raise ValueError(f"{where}: size_bytes and bandwidth_Bps must be > 0")
            out.append(CopyPoint(row["id"], row["source"], row["platform"], row["link"],
                                 row["direction"], row["memory"], size, bw))  # fmt: skip
    return out


def pairs(points: Sequence[CopyPoint], direction: str) -> list[tuple[str, float, float]]:
    """(source, size, pageable / pinned) for each size a source measured both ways."""
    pinned = {(p.source, p.size_bytes): p.bandwidth_Bps for p in points
              if p.direction == direction and p.memory == "pinned"}  # fmt: skip
    return [
        (p.source, p.size_bytes, p.bandwidth_Bps / pinned[(p.source, p.size_bytes)])
        for p in points
        if p.direction == direction and p.memory == "pageable"
        and (p.source, p.size_bytes) in pinned
    ]  # fmt: skip


def _largest_ratio(points: Sequence[CopyPoint], direction: str) -> float | None:
    by: dict[str, tuple[float, float]] = {}
    for src, size, ratio in pairs(points, direction):
        if src not in by or size > by[src][0]:
            by[src] = (size, ratio)
    return float(statistics.median(r for _, r in by.values())) if by else None


@dataclass(frozen=True)
class HostCopyFit:
    """Pageable / pinned rate per direction (None: no point; the prior applies)."""

    pageable_h2d_ratio: float | None
    pageable_d2h_ratio: float | None


def fit(points: Sequence[CopyPoint]) -> HostCopyFit:
    """The ratio at each source's largest size, median over sources."""
    return HostCopyFit(_largest_ratio(points, "h2d"), _largest_ratio(points, "d2h"))


@cache
def _shipped() -> HostCopyFit:
    return fit(load_points())


def pageable_ratios() -> HostCopyFit:
    """The fitted ratios, or the refitted ones under cross-validation."""
    o = fit_overrides.active()
    if o is not None and o.host_copy:
        return HostCopyFit(o.host_copy.get("pageable_h2d_ratio"),
                           o.host_copy.get("pageable_d2h_ratio"))  # fmt: skip
    return _shipped()


def per_call_s(points: Sequence[CopyPoint], direction: str = "h2d") -> float | None:
    """Per-call cost from a source's smallest and largest pinned copies (``t = c + n/B``,
    B the largest copy's rate); the median over sources."""
    out = []
    for src in sorted({p.source for p in points}):
        pts = sorted((p for p in points if p.source == src and p.direction == direction
                      and p.memory == "pinned"), key=lambda p: p.size_bytes)  # fmt: skip
        if len(pts) >= 2:
            small, large = pts[0], pts[-1]
            c = small.size_bytes / small.bandwidth_Bps - small.size_bytes / large.bandwidth_Bps
            out.append(c)
    return float(statistics.median(out)) if out else None


def report(path: Path = DATA_FILE) -> str:
    """The fit, every pageable point's residual, and the leave-one-source-out refits."""
    pts = load_points(path)
    f = fit(pts)
    lines = [f"host copies: {len(pts)} points, {len({p.source for p in pts})} source(s)"]
    for d, ratio in (("h2d", f.pageable_h2d_ratio), ("d2h", f.pageable_d2h_ratio)):
        lines.append(f"  pageable/pinned {d}: {ratio if ratio is None else round(ratio, 4)}")
        for src, size, r in pairs(pts, d):
            res = "" if ratio is None else f"residual {ratio / r - 1:+.1%}"
            lines.append(f"    {src} {size / 2**20:6.0f} MiB measured {r:.3f} {res}")
    c = per_call_s(pts)
    lines.append(f"  per-call cost (pinned h2d): {'-' if c is None else f'{c * 1e6:.2f} us'}")
    for src in sorted({p.source for p in pts}):
        held = fit([p for p in pts if p.source != src])
        lines.append(f"  leave out {src}: h2d {held.pageable_h2d_ratio}, "
                     f"d2h {held.pageable_d2h_ratio} (None: prior core_bandwidth / 2)")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(report() + "\n")
