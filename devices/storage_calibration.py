"""Fit of the NVMe curve (:mod:`devices.storage`) to ``devices/data/nvme_points.csv``.

``bandwidth(r, q) = min(peak, q r / (latency + r / peak))`` is fitted, per drive and
direction, to the rows marked ``use = fit`` (a grid of request sizes by queue depth) by
least squares on the log of the bandwidth over a grid of (latency, peak), refined once; the report
gives the fitted pair, the median and largest relative residual, and the
leave-one-request-size-out error (refit without one request size, predict it).

    python -m hetsim.devices.storage_calibration
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from hetsim.devices.storage import DiskDirection

POINTS = Path(__file__).resolve().parent / "data" / "nvme_points.csv"


@dataclass(frozen=True)
class Point:
    """One measured point: request size, queue depth, bandwidth."""

    request_bytes: float
    queue_depth: float
    bandwidth_Bps: float


def load_points(drive: str, op: str, use: str = "fit") -> list[Point]:
    """The CSV rows of ``drive``/``op`` marked ``use``."""
    out = []
    with POINTS.open() as f:
        for row in csv.DictReader(f):
            if row["drive"] == drive and row["op"] == op and row["use"] == use:
                out.append(Point(float(row["request_bytes"]), float(row["queue_depth"]),
                                 float(row["bandwidth_Bps"])))  # fmt: skip
    return out


def _loss(d: DiskDirection, points: list[Point]) -> float:
    return sum(
        math.log(d.bandwidth_Bps(p.request_bytes, p.queue_depth) / p.bandwidth_Bps) ** 2
        for p in points
    )


def fit(points: list[Point]) -> DiskDirection:
    """Grid search: latency 1-200 us in 1 us steps and peak 0.5-1.5x the largest point in
    1% steps, then a 10x finer grid around the best pair."""
    top = max(p.bandwidth_Bps for p in points)

    def search(lats: list[float], peaks: list[float]) -> DiskDirection:
        best: tuple[float, DiskDirection] | None = None
        for lat in lats:
            for peak in peaks:
                d = DiskDirection(peak_Bps=peak, latency_s=lat)
                loss = _loss(d, points)
                if best is None or loss < best[0]:
                    best = (loss, d)
        assert best is not None
        return best[1]

    d = search([i * 1e-6 for i in range(1, 201)], [top * j / 100 for j in range(50, 151)])
    lats = [max(1e-7, d.latency_s + k * 1e-7) for k in range(-10, 11)]
    peaks = [d.peak_Bps + k * top / 1000 for k in range(-10, 11)]
    return search(lats, peaks)


def residuals(d: DiskDirection, points: list[Point]) -> list[float]:
    """Relative error (model / measured - 1) of every point."""
    return [d.bandwidth_Bps(p.request_bytes, p.queue_depth) / p.bandwidth_Bps - 1 for p in points]


def main() -> None:
    """Print the fit, its residuals and the leave-one-request-size-out error."""
    pts = load_points("mixdk-nvme", "write")
    d = fit(pts)
    res = sorted(abs(r) for r in residuals(d, pts))
    print(f"mixdk-nvme write: {len(pts)} points; latency_s {d.latency_s:.4g}, "
          f"peak_Bps {d.peak_Bps:.4g}")  # fmt: skip
    print(f"  |residual| median {res[len(res) // 2]:.1%}, max {res[-1]:.1%}")
    held = []
    for size in sorted({p.request_bytes for p in pts}):
        train = [p for p in pts if p.request_bytes != size]
        test = [p for p in pts if p.request_bytes == size]
        dd = fit(train)
        held += [abs(r) for r in residuals(dd, test)]
    held.sort()
    print(f"  leave-one-request-size-out |error| median {held[len(held) // 2]:.1%}, "
          f"max {held[-1]:.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
