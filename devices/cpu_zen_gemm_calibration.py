"""Published kernel-level GEMM rates of AMD Zen cores at one core and on every core, and
what they say about the Zen 4 entries of ``devices/cpu_kernels.yaml`` (B10).

Data: ``devices/data/cpu_gemm_points.csv`` (none of its sources is an ``endtoend.csv``
row's source, thread or file: ``tests/test_cpu_zen_gemm_calibration.py`` checks it; no
whole-model prompt-processing run is used). Each point is an achieved GEMM rate (FLOP/s)
with its threads, the machine's base and top clocks and the peak FLOP per cycle per core of
the instruction the kernel runs (fp32 FMA on two 256-bit pipes = 32, fp64 = 16, the
AVX-512 BF16 dot = 64). Ratio = achieved / (threads x base clock x peak): the base-clock
convention of ``clock_hz`` (a ratio above 1 says the cores ran above the base clock; the
report also prints each ratio at the top clock, a lower bound).

Roles: ``one`` (one thread, clock stated) and ``all`` (every core of the socket, operands
inside the last-level cache) give the thread falloff ``all_over_one`` that
``gemm_efficiency_full_socket`` models for AMX Xeons (0.173 / 0.502 = 0.34 there);
``engine`` (every core, llama.cpp's tinyBLAS kernel on matrices beyond the last-level
cache, as its weight matrices are) is reported beside ``gemm_efficiency``; ``none`` is
printed only (the clock the point ran at is not stated). Each fit is the median over
sources of each source's median.

Run ``python -m hetsim.devices.cpu_zen_gemm_calibration`` (also printed at the end of
``python -m hetsim.devices.calibration``).
"""

from __future__ import annotations

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

DATA_FILE = Path(__file__).resolve().parent / "data" / "cpu_gemm_points.csv"
ZEN4_CPUS = ("ryzen-7950x", "threadripper-7965wx", "epyc-9654")
Role = Literal["one", "all", "engine", "none"]
_ROLES = ("one", "all", "engine", "none")
_COLUMNS = ("id", "family", "isa", "source_key", "source_repo", "source_ref", "cpu", "kernel",
            "dtype", "size", "threads", "cores_per_socket", "base_clock_hz", "top_clock_hz",
            "peak_flops_per_cycle", "achieved_flops", "role", "note", "source")  # fmt: skip


@dataclass(frozen=True)
class GemmPoint:
    """One published CPU GEMM rate with the machine and instruction peak it ran on."""

    id: str
    family: str
    source_key: str
    source_repo: str
    source_ref: str
    dtype: str
    threads: float
    cores_per_socket: float
    base_clock_hz: float
    top_clock_hz: float
    peak_flops_per_cycle: float
    achieved_flops: float
    role: Role
    source: str

    def ratio(self, clock_hz: float | None = None) -> float:
        """Achieved over ``threads x clock x peak`` (the base clock unless given)."""
        clock = self.base_clock_hz if clock_hz is None else clock_hz
        return self.achieved_flops / (self.threads * clock * self.peak_flops_per_cycle)


def load_points(path: Path = DATA_FILE) -> list[GemmPoint]:
    """The calibration set; ValueError names the file, row and field of any bad entry."""
    out = []
    for row in read_rows(path, _COLUMNS):
        where = f"{path.name}: row {row['id']}"
        if row["role"] not in _ROLES:
            raise ValueError(f"{where}: role: one of {', '.join(_ROLES)}, got {row['role']!r}")
        for key in ("family", "source_key", "source_repo", "source_ref", "source"):
            if not row[key].strip():
                raise ValueError(f"{where}: {key}: empty")
        nums = {}
        for key in ("threads", "cores_per_socket", "base_clock_hz", "top_clock_hz",
                    "peak_flops_per_cycle", "achieved_flops"):  # fmt: skip
            value = positive_number(path, row, key)
            if value is None:
                raise ValueError(f"{where}: {key}: empty")
            nums[key] = value
        if nums["top_clock_hz"] < nums["base_clock_hz"]:
            raise ValueError(f"{where}: top_clock_hz: below base_clock_hz")
        if nums["threads"] > nums["cores_per_socket"]:
            raise ValueError(f"{where}: threads: more than cores_per_socket")
        if row["role"] == "one" and nums["threads"] != 1:
            raise ValueError(f"{where}: a 'one' point has threads 1")
        if row["role"] in ("all", "engine") and nums["threads"] != nums["cores_per_socket"]:
            raise ValueError(f"{where}: an '{row['role']}' point runs on every core")
        out.append(GemmPoint(
            id=row["id"], family=row["family"], source_key=row["source_key"],
            source_repo=row["source_repo"], source_ref=row["source_ref"], dtype=row["dtype"],
            role=row["role"],  # type: ignore[arg-type]
            source=row["source"], **nums,
        ))  # fmt: skip
    return out


def _median_over_sources(points: Sequence[GemmPoint], role: Role, top: bool = False) -> float:
    by_source: dict[str, list[float]] = {}
    for p in points:
        if p.role == role:
            by_source.setdefault(p.source_key, []).append(p.ratio(p.top_clock_hz if top else None))
    if not by_source:
        raise ValueError(f"cpu_gemm_points: no {role!r} point to fit")
    return float(statistics.median(statistics.median(v) for v in by_source.values()))


@dataclass(frozen=True)
class ZenGemmFit:
    """The fitted ratios (base-clock convention unless named)."""

    one_core: float  # one thread, operands in cache
    all_cores: float  # every core of the socket, operands in the last-level cache
    all_over_one: float  # the thread falloff (AMX Xeons: 0.34)
    engine_out_of_llc: float  # tinyBLAS on every core, matrices beyond the L3
    all_cores_top_clock: float  # all_cores at the top clock (a lower bound)


def fit(points: Sequence[GemmPoint]) -> ZenGemmFit:
    """Medians over sources of each role's ratios."""
    one = _median_over_sources(points, "one")
    every = _median_over_sources(points, "all")
    return ZenGemmFit(
        one_core=one,
        all_cores=every,
        all_over_one=every / one,
        engine_out_of_llc=_median_over_sources(points, "engine"),
        all_cores_top_clock=_median_over_sources(points, "all", top=True),
    )


def stored_fit() -> dict[str, float]:
    """The ``zen_gemm_fit`` block of ``devices/cpu_kernels.yaml``."""
    data = _yaml_load(KERNEL_FILE.read_text(encoding="utf-8"))
    return {k: float(v) for k, v in data["zen_gemm_fit"].items()}


def report(path: Path = DATA_FILE) -> str:
    """The table printed by ``python -m hetsim.devices.cpu_zen_gemm_calibration``."""
    points = load_points(path)
    f = fit(points)
    lines = [
        "Zen GEMM efficiency (devices/data/cpu_gemm_points.csv; ratio = achieved / (threads x "
        "clock x instruction peak FLOP/cycle); validation rows never used)",
        f"{'id':4} {'family':6} {'source':18} {'dtype':5} {'thr':>4} {'role':6} "
        f"{'base':>6} {'top':>6}",
    ]
    for p in points:
        lines.append(f"{p.id:4} {p.family:6} {p.source_key:18} {p.dtype:5} {p.threads:4.0f} "
                     f"{p.role:6} {p.ratio():6.3f} {p.ratio(p.top_clock_hz):6.3f}")  # fmt: skip
    lines.append(
        f"fit: one core {f.one_core:.4f}; all cores (in L3) {f.all_cores:.4f} "
        f"(top clock {f.all_cores_top_clock:.4f}); all / one {f.all_over_one:.4f} "
        "(AMX Xeons, B9: 0.173 / 0.502 = 0.34); tinyBLAS on all cores beyond the L3 "
        f"{f.engine_out_of_llc:.4f}"
    )
    for p in points:
        if p.dtype == "bf16":
            fp32 = p.achieved_flops / (p.threads * p.top_clock_hz * 32.0)
            lines.append(
                f"check {p.id}: the bf16 dot at {p.achieved_flops / 1e9:.0f} GFLOP/s is "
                f"{fp32:.2f}x the fp32 FMA peak at the top clock: the Zen 4 bf16 rate exceeds "
                "32 FLOP/cycle (matrix_flops_per_cycle 64)"
            )
    for cpu in ZEN4_CPUS:
        k = cpu_kernels(cpu)
        lines.append(
            f"  {cpu:20}: matrix_flops_per_cycle {k.matrix_flops_per_cycle:g}, "
            f"gemm_efficiency {k.gemm_efficiency:g}, gemm_efficiency_full_socket "
            f"{k.gemm_efficiency_full_socket:g} (0: no all-core falloff)"
        )
    lines.append(shipped_line("zen_gemm_fit", stored_fit()))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """CLI: print the points, the fit and the Zen 4 entries it bears on."""
    run_report_cli(report, DATA_FILE, __doc__, argv)


if __name__ == "__main__":
    main()
