"""Fit of the CPU GEMV compute rate (``dequant_weights_per_cycle``) to published
single-thread dot-product microbenchmarks of the quantised kernels.

Data: ``devices/data/cpu_dequant_points.csv`` (a calibration set; none of its sources is an
``endtoend.csv`` row's source or thread: ``tests/test_cpu_dequant_calibration.py`` checks
it). Each point is one kernel's single-thread rate from llama.cpp's
``test-quantize-perf --op vec_dot_q`` (or the same figure quoted in a PR): on x86 the
``cycles/32 vals`` figure, on Arm (which has no cycle counter there) the
``float32 throughput`` in GiB/s of 4-byte values. A third kind of point is a
few-thread batch-1 token-generation rate of a whole model (``tokens_per_s`` at
``threads``, with ``weights_per_token``: the GEMV weights of the format that one token
multiplies), taken only where the PR's thread sweep shows the rate still growing about
linearly with threads (compute-bound); it is a lower bound on the kernel's rate, since
the token's other work (attention, norms, the LM head) is charged to the kernel too.

Units. On x86 the tool counts ``rdtsc`` cycles: the time-stamp counter ticks at the
nominal (base) clock whatever the core's real clock, so ``32 / cycles`` is weights per
*base-clock* cycle, not per core cycle. The catalogue prices compute as
``threads x clock_hz x dequant_weights_per_cycle`` with ``clock_hz`` the base clock
(``devices/cpu_kernels.yaml``), so the shipped rate is on that convention ("base"): a
single core's rate per tick of its base clock, which carries the measuring core's turbo
(boost / base 1.24-1.33 on the hosts here) over to the target. The other convention
("high") divides the same values/s by the measuring CPU's highest clock: a target
running at exactly its base clock would reach only this. The two bound the rate; the
robustness scenarios sweep between them.

Fit: per ISA family and format, the median over sources of each source's median point
(a source's sizes L1..DRAM count once); ``fit: no`` points (another ISA path than the
modelled engines run) are printed, not fitted. A format with no point of its own may be
priced from a kernel that shares its inner loop (``proxy_for``: q1_0's AVX2 dot was
written on q4_0's pattern; q5_K is q4_K's kernel plus a high-bit plane, a lower bound).
Residuals are printed per point and a leave-one-source-out refit per (family, format)
where there are two sources or more.

Run ``python -m hetsim.devices.cpu_dequant_calibration``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hetsim.devices.cpu import KERNEL_FILE, _yaml_load
from hetsim.devices.cpu_calibration import positive_number, read_rows, run_report_cli

DATA_FILE = Path(__file__).resolve().parent / "data" / "cpu_dequant_points.csv"
VALUES_PER_GIB_F32 = 2**30 / 4  # test-quantize-perf's GB/s is GiB/s of 4-byte values
STORED_TOLERANCE = 2e-3  # the CSV's values_per_s must match its primary figure this closely
# the ISA family whose fit prices the catalogue's shared (x86) defaults: the engines
# modelled run 256-bit AVX2 kernels on every catalogue x86 CPU, AVX-512 ones included
DEFAULT_FAMILY = "x86-avx2"
Convention = Literal["base", "high"]  # per base-clock cycle, or per top-clock cycle
_COLUMNS = ("id", "source_key", "cpu", "isa", "engine", "kernel", "format", "proxy_for",
            "threads", "size_values", "tsc_cycles_per_32", "gib_per_s", "values_per_s",
            "clock_base_hz", "clock_high_hz", "clock_how", "fit", "note", "source")  # fmt: skip
# optional primary figure of a token-generation point (see the module docstring)
_TG_COLUMNS = ("tokens_per_s", "weights_per_token")


@dataclass(frozen=True)
class DequantPoint:
    """One published single-thread dot-product rate of a quantised CPU kernel."""

    id: str
    source_key: str
    cpu: str
    isa: str
    kernel: str
    format: str
    proxy_for: str
    size_values: int | None
    tsc_cycles_per_32: float | None
    gib_per_s: float | None
    values_per_s: float
    clock_base_hz: float
    clock_high_hz: float
    fit: bool
    source: str
    threads: int = 1
    tokens_per_s: float | None = None  # token-generation point: whole-model TG rate
    weights_per_token: float | None = None  # ... and the format's GEMV weights per token

    def measured_values_per_s(self) -> float:
        """Values/s of one core from the primary figure: TSC cycles x base clock on x86
        (the TSC ticks at the base clock), GiB/s of float32 values, or a token-generation
        rate x weights per token / threads."""
        if self.tsc_cycles_per_32 is not None:
            return 32.0 / self.tsc_cycles_per_32 * self.clock_base_hz
        if self.gib_per_s is not None:
            return self.gib_per_s * VALUES_PER_GIB_F32
        assert self.tokens_per_s is not None and self.weights_per_token is not None
        return self.tokens_per_s * self.weights_per_token / self.threads

    def per_cycle(self, convention: Convention = "base") -> float:
        """Weights per cycle of one core: per base-clock cycle (``base``, = 32 / TSC
        cycles on x86) or per cycle of the CPU's highest clock (``high``)."""
        clock = self.clock_base_hz if convention == "base" else self.clock_high_hz
        return self.measured_values_per_s() / clock

    def formats(self) -> tuple[str, ...]:
        """Catalogue formats this point prices: its own and the one it stands in for."""
        return (self.format, self.proxy_for) if self.proxy_for else (self.format,)


def _required(path: Path, row: dict[str, str], key: str) -> float:
    value = positive_number(path, row, key)
    if value is None:
        raise ValueError(f"{path.name}: row {row.get('id')}: {key}: empty")
    return value


def load_points(path: Path = DATA_FILE) -> list[DequantPoint]:
    """The calibration set; ValueError names the file, row and field of any bad entry."""
    rows = read_rows(path, _COLUMNS)
    out = []
    for row in rows:
        where = f"{path.name}: row {row['id']}"
        if row["fit"] not in ("yes", "no"):
            raise ValueError(f"{where}: fit: yes or no, got {row['fit']!r}")
        if not row["source"].strip():
            raise ValueError(f"{where}: source: empty")
        cycles = positive_number(path, row, "tsc_cycles_per_32")
        gib = positive_number(path, row, "gib_per_s")
        tg, per_token = (positive_number(path, row, k) for k in _TG_COLUMNS)
        if cycles is None and gib is None and (tg is None or per_token is None):
            raise ValueError(
                f"{where}: needs tsc_cycles_per_32, gib_per_s, or tokens_per_s with "
                "weights_per_token"
            )
        threads = _required(path, row, "threads")
        if threads != int(threads):
            raise ValueError(f"{where}: threads: a whole number, got {row['threads']!r}")
        size = positive_number(path, row, "size_values")
        point = DequantPoint(
            id=row["id"], source_key=row["source_key"], cpu=row["cpu"], isa=row["isa"],
            kernel=row["kernel"], format=row["format"], proxy_for=row["proxy_for"].strip(),
            size_values=None if size is None else int(size), tsc_cycles_per_32=cycles,
            gib_per_s=gib, values_per_s=_required(path, row, "values_per_s"),
            clock_base_hz=_required(path, row, "clock_base_hz"),
            clock_high_hz=_required(path, row, "clock_high_hz"),
            fit=row["fit"] == "yes", source=row["source"], threads=int(threads),
            tokens_per_s=tg, weights_per_token=per_token,
        )  # fmt: skip
        if point.clock_high_hz < point.clock_base_hz:
            raise ValueError(f"{where}: clock_high_hz: below clock_base_hz")
        derived = point.measured_values_per_s()
        if abs(point.values_per_s / derived - 1.0) > STORED_TOLERANCE:
            raise ValueError(
                f"{where}: values_per_s: {point.values_per_s:.4g} but the primary figure "
                f"gives {derived:.4g}"
            )
        out.append(point)
    return out


def _fitted(points: Sequence[DequantPoint], family: str, fmt: str,
            exclude: str | None = None) -> list[DequantPoint]:  # fmt: skip
    return [
        p for p in points
        if p.fit and p.isa == family and fmt in p.formats() and p.source_key != exclude
    ]  # fmt: skip


def source_rates(
    points: Sequence[DequantPoint], family: str, fmt: str, convention: Convention = "base",
    exclude: str | None = None,
) -> dict[str, float]:  # fmt: skip
    """Median per-cycle rate of each source's fitted points for ``fmt`` (own or proxy)."""
    by_source: dict[str, list[float]] = {}
    for p in _fitted(points, family, fmt, exclude):
        by_source.setdefault(p.source_key, []).append(p.per_cycle(convention))
    return {k: statistics.median(v) for k, v in by_source.items()}


def fit_rate(
    points: Sequence[DequantPoint], family: str, fmt: str, convention: Convention = "base",
    exclude: str | None = None,
) -> float | None:  # fmt: skip
    """Weights per cycle for ``fmt`` on ``family``: median across sources (None: no data)."""
    per_source = source_rates(points, family, fmt, convention, exclude)
    return statistics.median(per_source.values()) if per_source else None


@dataclass(frozen=True)
class FormatFit:
    """One (ISA family, format) fit: both clock conventions, the points' spread, residuals
    and the leave-one-source-out refits."""

    family: str
    format: str
    base: float  # weights per base-clock cycle (the catalogue's convention; shipped)
    high: float  # weights per cycle of the measuring CPU's highest clock
    low_end: float  # lowest point on either convention (sweep low end)
    high_end: float  # highest point on the base convention (sweep high end)
    proxy: bool  # priced from another format's kernel
    sources: tuple[str, ...]
    residuals: dict[str, float]  # point id -> fit / point - 1 (base convention)
    loso: dict[str, float]  # source -> refit without it


def fit_formats(points: Sequence[DequantPoint]) -> list[FormatFit]:
    """Every (family, format) with fitted data, own formats and proxies."""
    keys = sorted({(p.isa, f) for p in points if p.fit for f in p.formats()})
    out = []
    for family, fmt in keys:
        used = _fitted(points, family, fmt)
        base = fit_rate(points, family, fmt, "base")
        high = fit_rate(points, family, fmt, "high")
        assert base is not None and high is not None
        sources = tuple(sorted({p.source_key for p in used}))
        loso: dict[str, float] = {}
        if len(sources) > 1:
            for s in sources:
                held = fit_rate(points, family, fmt, "base", exclude=s)
                assert held is not None
                loso[s] = held
        out.append(FormatFit(
            family=family, format=fmt, base=base, high=high,
            low_end=min(min(p.per_cycle("base"), p.per_cycle("high")) for p in used),
            high_end=max(p.per_cycle("base") for p in used),
            proxy=all(p.format != fmt for p in used), sources=sources,
            residuals={p.id: base / p.per_cycle("base") - 1.0 for p in used}, loso=loso,
        ))  # fmt: skip
    return out


def catalogue_fit(points: Sequence[DequantPoint] | None = None) -> dict[str, float]:
    """The rates the catalogue's shared defaults take from the data (``DEFAULT_FAMILY``,
    base convention, rounded to 3 decimals as stored in ``cpu_kernels.yaml``)."""
    pts = load_points() if points is None else points
    return {f.format: round(f.base, 3) for f in fit_formats(pts) if f.family == DEFAULT_FAMILY}


def shipped_defaults() -> dict[str, float]:
    """``dequant_weights_per_cycle`` in ``devices/cpu_kernels.yaml``'s defaults."""
    data = _yaml_load(KERNEL_FILE.read_text(encoding="utf-8"))
    return {k: float(v) for k, v in data["defaults"]["dequant_weights_per_cycle"].items()}


def report(path: Path = DATA_FILE) -> str:
    """The table printed by ``python -m hetsim.devices.cpu_dequant_calibration``."""
    points = load_points(path)
    fits = fit_formats(points)
    lines = [
        "CPU GEMV compute rate, weights per cycle per core (devices/data/"
        "cpu_dequant_points.csv; validation rows never used)",
        f"{'id':4} {'source':16} {'isa':10} {'fmt':5} {'as':5} {'size':>9} {'Gval/s':>7} "
        f"{'/base':>6} {'/high':>6} fit",
    ]
    for p in points:
        size = "" if p.size_values is None else str(p.size_values)
        if p.tokens_per_s is not None:
            size = f"TG {p.threads}T"  # a token-generation point at this thread count
        lines.append(
            f"{p.id:4} {p.source_key:16} {p.isa:10} {p.format:5} {p.proxy_for:5} {size:>9} "
            f"{p.values_per_s / 1e9:7.2f} {p.per_cycle('base'):6.2f} {p.per_cycle('high'):6.2f} "
            f"{'yes' if p.fit else 'no'}"
        )
    lines.append(
        "fit per (family, format): median over sources of each source's median point; "
        "base = per base-clock (TSC) cycle, shipped; high = per cycle of the measuring "
        "CPU's highest clock"
    )
    shipped = shipped_defaults()
    for f in fits:
        res = ", ".join(f"{k} {v:+.1%}" for k, v in f.residuals.items())
        loso = (
            ", ".join(f"without {k}: {v:.2f}" for k, v in f.loso.items())
            if f.loso else "one source: no leave-one-source-out refit"
        )  # fmt: skip
        ship = ""
        if f.family == DEFAULT_FAMILY and f.format in shipped:
            ship = f"; shipped {shipped[f.format]:.3f}"
        lines.append(
            f"  {f.family:10} {f.format:5}{' (proxy)' if f.proxy else '        '} "
            f"base {f.base:5.2f}, high {f.high:5.2f}, range {f.low_end:5.2f}-{f.high_end:5.2f}"
            f"{ship}; residuals {res}; {loso}"
        )
    covered = {f.format for f in fits if f.family == DEFAULT_FAMILY}
    lines.append(
        "shared defaults with no x86 AVX2 measurement (reconstructions kept): "
        + ", ".join(sorted(k for k in shipped if k not in covered))
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """CLI: print the points, the fit per family and format, and its residuals."""
    run_report_cli(report, DATA_FILE, __doc__, argv)


if __name__ == "__main__":
    main()
