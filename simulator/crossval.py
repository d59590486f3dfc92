"""Cross-validation of the fitted parts of the cost model against the validation rows.

Every fitted part of the host-side cost model (CPU kernels, host DRAM, host<->GPU copies)
is registered here as a :class:`Part`: its calibration points, each tagged with its
source (a paper, PR or benchmark page) and its hardware platform, and a refit that turns
any subset of those points into catalogue values (:class:`devices.fit_overrides.FitOverrides`).

A **fold** leaves out one source, or one platform, from *every* part at once (a source
that feeds two parts, e.g. ktransformers PR #2175's GEMV and per-die points, leaves both).
``hetsim fidelity --cv`` re-runs each validation row under every fold whose refit changes
a value the row's scenario can read (its CPU type, its links, its devices) and reports

* ``cv_predicted`` / ``cv_error``: the prediction of the fold that moves the row furthest
  from the measurement (the worst single held-out source or platform), and that fold;
* ``cv_low`` / ``cv_high``: the range of the row's signed error over its folds.

A part whose fold leaves it no point falls back to its **prior**: the value the model
held before that part was fitted (a reconstruction, named in the part's docstring). A
row that no registered part touches has no cross-validated value (``cv_error`` empty);
the report says how many rows of each group were cross-validated.

The GPU power part (``memory_activity``, devices/power_fit.py) re-runs only the energy
rows: no time or throughput reads it.

Parts not (yet) registered: the GPU kernel fits (``devices/kernel_calibration.py``:
Vidur operator times, GEMV memory curves, attention), the collective fits, the AMX/Zen
thread interpolation's functional form and the barrier cost (one source each, no prior
other than 0, which would be a different model rather than a refit).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsim.devices.fit_overrides import FitOverrides


@dataclass(frozen=True)
class CalPoint:
    """One calibration point: which part it feeds, its source and its platform."""

    part: str
    id: str
    source: str
    platform: str


Keep = Callable[[CalPoint], bool]


@dataclass
class Part:
    """A fitted part: its points and a refit from the points kept by a fold."""

    name: str
    points: list[CalPoint]
    refit: Callable[[Keep], FitOverrides]
    doc: str = ""


@dataclass(frozen=True)
class Fold:
    """One held-out source or platform."""

    kind: str  # "source" or "platform"
    key: str

    @property
    def label(self) -> str:
        """``source:<key>`` or ``platform:<key>``."""
        return f"{self.kind}:{self.key}"

    def keeps(self, p: CalPoint) -> bool:
        """Whether point ``p`` stays in the fit."""
        return (p.source if self.kind == "source" else p.platform) != self.key


def _keep_all(p: CalPoint) -> bool:
    return True


# ---- the registered parts --------------------------------------------------------------

AMX_CPUS = ("xeon-8480", "xeon-8488c", "xeon-gold-6454s", "xeon-6980p")


def _gemv_part() -> Part:
    """B6 (devices/cpu_calibration.py): ``gemv_bandwidth_efficiency`` of every CPU.
    Prior 1.0 (the STREAM rate: the model's memory roof)."""
    from hetsim.devices import cpu_calibration as cc

    pts = [p for p in cc.load_points() if p.memory_bound == "yes"]
    cal = [CalPoint("cpu-gemv-bandwidth", p.id, p.source_key, p.cpu) for p in pts]

    def refit(keep: Keep) -> FitOverrides:
        kept = [p for p, c in zip(pts, cal, strict=True) if keep(c)]
        eff = cc.fit(kept)[0] if kept else 1.0
        return FitOverrides(cpu={"*": {"gemv_bandwidth_efficiency": eff}})

    return Part("cpu-gemv-bandwidth", cal, refit, _gemv_part.__doc__ or "")


def _amx_part() -> Part:
    """B9 (devices/cpu_amx_calibration.py): ``gemm_efficiency`` (1-4 threads),
    ``gemm_efficiency_full_socket`` and ``int8_gemm_speedup`` of the AMX Xeons. Priors
    (the pre-fit reconstruction): 0.5, 0 (no all-core falloff), 1.0."""
    from hetsim.devices import cpu_amx_calibration as ac

    pts = [p for p in ac.load_points() if p.role in ("few", "full", "int8")]
    cal = [CalPoint("cpu-amx-gemm", p.id, p.source_key, p.cpu) for p in pts]

    def refit(keep: Keep) -> FitOverrides:
        kept = [p for p, c in zip(pts, cal, strict=True) if keep(c)]
        try:
            few: float = ac._median_over_sources(kept, "few", None)
        except ValueError:
            few = 0.5
        try:
            full: float = ac._median_over_sources(kept, "full", None)
        except ValueError:
            full = 0.0
        try:
            speed = ac.int8_speedups(kept)
            int8 = float(statistics.median(speed.values())) if speed else 1.0
        except ValueError:  # an int8 point left without its bf16 pair
            int8 = 1.0
        fields = {"gemm_efficiency": few, "gemm_efficiency_full_socket": full,
                  "int8_gemm_speedup": int8}  # fmt: skip
        return FitOverrides(cpu={c: fields for c in AMX_CPUS})

    return Part("cpu-amx-gemm", cal, refit, _amx_part.__doc__ or "")


# Pre-fit values of the fitted dequantisation rates (devices/cpu_kernels.yaml's notes:
# "was X, a reconstruction"); q5_k / q6_k had no entry and take q4_k's, iq3_k takes
# q3_k's (the format V63 was priced with before its ik_llama.cpp point).
DEQUANT_PRIORS = {"q4_0": 8.0, "q1_0": 8.0, "q4_k": 6.0, "q5_k": 6.0, "q6_k": 6.0,
                  "iq3_k": 5.0}  # fmt: skip


def _dequant_part() -> Part:
    """B8 (devices/cpu_dequant_calibration.py): the x86 AVX2 dequantisation rates shared by
    every x86 CPU. A format with no point left falls back to DEQUANT_PRIORS."""
    from hetsim.devices import cpu_dequant_calibration as dc

    pts = [p for p in dc.load_points() if p.fit and p.isa == dc.DEFAULT_FAMILY]
    cal = [CalPoint("cpu-dequant", p.id, p.source_key, p.cpu) for p in pts]
    formats = sorted(dc.catalogue_fit(pts))

    def refit(keep: Keep) -> FitOverrides:
        kept = [p for p, c in zip(pts, cal, strict=True) if keep(c)]
        rates = dc.catalogue_fit(kept) if kept else {}
        full = {f: rates.get(f, DEQUANT_PRIORS[f]) for f in formats}
        return FitOverrides(cpu={"*": {"dequant_weights_per_cycle": full}})

    return Part("cpu-dequant", cal, refit, _dequant_part.__doc__ or "")


ZEN2_HOST = "2x AMD EPYC 7452 (Zen 2; 8x DDR4-2666 per socket)"  # as cpu_decode_points.csv


def _die_part() -> Part:
    """B7: ``die_link_efficiency`` 0.865 = one Zen 2 CCD's saturated read (36.9 GB/s,
    ktransformers PR #2175) over its link's 32 B x 1.333 GHz. Prior 1.0 (the link rate)."""
    cal = [CalPoint("cpu-die-link", "B7", "ktransformers#2175", ZEN2_HOST)]

    def refit(keep: Keep) -> FitOverrides:
        eff = 36.9e9 / (32.0 * 1.333e9) if keep(cal[0]) else 1.0
        return FitOverrides(cpu={"*": {"die_link_efficiency": round(eff, 3)}})

    return Part("cpu-die-link", cal, refit, _die_part.__doc__ or "")


# Host DRAM achieved / peak (README A.4): the CPUs that take each source's ratio
# (devices/catalogue.yaml notes), and the points.
DRAM_POINTS = {
    "K05": ("vpbenchmarking", "2x Xeon Platinum 8470", 486.7 / 614.4),
    "A4-genoa": ("micron-genoa", "EPYC 9004 (Genoa)", 378.0 / 460.8),
}
DRAM_USERS = {
    "K05": ("xeon-8480", "xeon-gold-5220r", "ryzen-7950x", "xeon-6980p", "xeon-gold-6454s",
            "xeon-8488c", "apple-m2-max-cpu", "core-i7-6700"),
    "A4-genoa": ("epyc-9654", "threadripper-7965wx", "epyc-9355"),
}  # fmt: skip


def _dram_part() -> Part:
    """Host DRAM STREAM efficiency (README A.4: K05's 2x Xeon 8470 triad, Micron's Genoa
    triad). A CPU whose source is held out takes the median of the remaining points
    (relative to the shipped value: shipped x refit / full fit)."""
    from hetsim.devices.catalogue import shipped_devices

    cal = [CalPoint("dram-stream", k, s, plat) for k, (s, plat, _) in DRAM_POINTS.items()]
    shipped = {n: d.memory_efficiency.max_eff for n, d in shipped_devices().items()}

    def refit(keep: Keep) -> FitOverrides:
        kept = {c.id: DRAM_POINTS[c.id][2] for c in cal if keep(c)}
        out: dict[str, float] = {}
        for pid, users in DRAM_USERS.items():
            full = DRAM_POINTS[pid][2]
            if pid in kept:
                value = full
            elif kept:
                value = statistics.median(kept.values())
            else:
                continue  # nothing left: the shipped value stands (no prior but a datum)
            for cpu in users:
                if cpu in shipped:
                    out[cpu] = shipped[cpu] * value / full
        return FitOverrides(memory_max_eff=out)

    return Part("dram-stream", cal, refit, _dram_part.__doc__ or "")


PCIE_POINTS = {  # microbenchmarks.csv: (link, source, platform, measured GB/s)
    "H03": ("pcie3-x16", "gearshifft#82", "Tesla P100-PCIE host", 12.15),
    "H01": ("pcie4-x16", "nvbandwidth#42", "A100-SXM4 host", 25.13),
    "H02": ("pcie5-x16", "vpbenchmarking", "H100 SXM5 node, 2x Xeon 8470", 54.8),
    "H04": ("pcie5-x16", "azure-benchmarking-guide", "Azure ND H100 v5", 51.0),
}


def _pcie_part() -> Part:
    """Pinned H2D efficiency per PCIe generation (microbenchmarks.csv H01-H04, fitted by
    devices/calibration.py). A generation left without a point takes the median ratio of
    the other generations' remaining points (relative to the shipped value)."""
    from hetsim.devices.catalogue import shipped_links

    links = shipped_links()
    cal = [CalPoint("pcie-h2d", k, v[1], v[2]) for k, v in PCIE_POINTS.items()]

    def ratio(pid: str) -> float:
        link, _, _, gbps = PCIE_POINTS[pid]
        return gbps * 1e9 / links[link].bandwidth_Bps

    def per_gen(ids: Iterable[str]) -> dict[str, float]:
        by: dict[str, list[float]] = {}
        for pid in ids:
            by.setdefault(PCIE_POINTS[pid][0], []).append(ratio(pid))
        return {k: statistics.median(v) for k, v in by.items()}

    full = per_gen(PCIE_POINTS)

    def refit(keep: Keep) -> FitOverrides:
        kept = [c.id for c in cal if keep(c)]
        gens = per_gen(kept)
        out: dict[str, float] = {}
        for link, value in full.items():
            if link in gens:
                new = gens[link]
            elif kept:
                new = statistics.median(ratio(k) for k in kept)
            else:
                continue
            out[link] = links[link].efficiency.max_eff * new / value
        return FitOverrides(link_max_eff=out)

    return Part("pcie-h2d", cal, refit, _pcie_part.__doc__ or "")


def _host_copy_part() -> Part:
    """Pageable / pinned copy rate (devices/host_copy.py, devices/data/host_copy_points.csv).
    Prior: the staging memcpy at half a core's bandwidth (the model before the fit)."""
    from hetsim.devices import host_copy as hc

    pts = hc.load_points()
    cal = [CalPoint("host-copy", p.id, p.source, p.platform) for p in pts]

    def refit(keep: Keep) -> FitOverrides:
        kept = [p for p, c in zip(pts, cal, strict=True) if keep(c)]
        f = hc.fit(kept)
        return FitOverrides(host_copy={"pageable_h2d_ratio": f.pageable_h2d_ratio,
                                       "pageable_d2h_ratio": f.pageable_d2h_ratio})  # fmt: skip

    return Part("host-copy", cal, refit, _host_copy_part.__doc__ or "")


GPU_POWER = "gpu-power"
"""The name a GPU power-coefficient refit touches; only rows that read an energy
(:data:`simulator.fidelity` group ``energy``) are re-run for it, since no timing reads
``memory_activity``."""

POWER_PRIOR = 0.092
"""``memory_activity`` before the component fit: the low end of Ma et al. 2026's H200
decode range, read as a memory-streaming kernel (the fallback of a fold with no point)."""


def _power_part() -> Part:
    """The memory-bound GPU draw ``memory_activity`` (devices/power_fit.py,
    devices/data/power_measurements.csv; each source weighted once). Prior: 0.092
    (:data:`POWER_PRIOR`)."""
    from hetsim.devices import power_fit

    rows = [r for r in power_fit.load_table() if r.use == "memory"]
    cal = [CalPoint(GPU_POWER, r.id, r.source, r.device) for r in rows]

    def refit(keep: Keep) -> FitOverrides:
        kept = [r for r, c in zip(rows, cal, strict=True) if keep(c)]
        value = power_fit.fit_memory_activity(kept) if kept else POWER_PRIOR
        return FitOverrides(gpu_power={"memory_activity": value})

    return Part(GPU_POWER, cal, refit, _power_part.__doc__ or "")


def parts() -> list[Part]:
    """Every registered part."""
    return [_gemv_part(), _amx_part(), _dequant_part(), _die_part(), _dram_part(),
            _pcie_part(), _host_copy_part(), _power_part()]  # fmt: skip


# ---- folds and what they touch ---------------------------------------------------------


def merge(overrides: Sequence[FitOverrides]) -> FitOverrides:
    """One FitOverrides from several parts' (later parts win on the same key)."""
    cpu: dict[str, dict[str, Any]] = {}
    mem: dict[str, float] = {}
    link: dict[str, float] = {}
    host: dict[str, float | None] = {}
    power: dict[str, float] = {}
    for o in overrides:
        for k, v in o.cpu.items():
            cur = cpu.setdefault(k, {})
            for name, value in v.items():
                if name == "dequant_weights_per_cycle":
                    cur[name] = {**cur.get(name, {}), **value}
                else:
                    cur[name] = value
        mem.update(o.memory_max_eff)
        link.update(o.link_max_eff)
        host.update(o.host_copy)
        power.update(o.gpu_power)
    return FitOverrides(cpu=cpu, memory_max_eff=mem, link_max_eff=link, host_copy=host,
                        gpu_power=power)  # fmt: skip


def folds(registered: Sequence[Part]) -> list[Fold]:
    """Every source, then every platform, that removes a distinct set of points."""
    pts = [p for part in registered for p in part.points]
    out: list[Fold] = []
    seen: set[frozenset[tuple[str, str]]] = set()
    for kind in ("source", "platform"):
        keys = sorted({p.source if kind == "source" else p.platform for p in pts})
        for key in keys:
            fold = Fold(kind, key)
            removed = frozenset((p.part, p.id) for p in pts if not fold.keeps(p))
            if removed and removed not in seen:
                seen.add(removed)
                out.append(fold)
    return out


def refit_all(registered: Sequence[Part], keep: Keep = _keep_all) -> FitOverrides:
    """Every part refitted from the points ``keep`` retains."""
    return merge([part.refit(keep) for part in registered])


def only_changed(base: FitOverrides, fold: FitOverrides) -> FitOverrides:
    """The entries of ``fold`` that differ from ``base``: a fold run moves only what the
    held-out points move, and every other value stays as shipped."""
    cpu: dict[str, dict[str, Any]] = {}
    for key, fields in fold.cpu.items():
        old = base.cpu.get(key, {})
        for name, value in fields.items():
            if name == "dequant_weights_per_cycle":
                was = old.get(name, {})
                rates = {f: r for f, r in value.items() if was.get(f) != r}
                if rates:
                    cpu.setdefault(key, {})[name] = rates
            elif old.get(name) != value:
                cpu.setdefault(key, {})[name] = value

    def moved(a: Any, b: Any) -> dict[str, Any]:
        return {k: v for k, v in b.items() if a.get(k) != v}

    return FitOverrides(
        cpu=cpu,
        memory_max_eff=moved(base.memory_max_eff, fold.memory_max_eff),
        link_max_eff=moved(base.link_max_eff, fold.link_max_eff),
        host_copy=dict(fold.host_copy) if dict(base.host_copy) != dict(fold.host_copy) else {},
        gpu_power=moved(base.gpu_power, fold.gpu_power),
    )


def changed_names(base: FitOverrides, fold: FitOverrides) -> set[str]:
    """Catalogue names (CPU types, ``"*"``, devices, links, ``host-copy``) whose values
    differ between two refits."""
    out: set[str] = set()
    for k in set(base.cpu) | set(fold.cpu):
        if base.cpu.get(k) != fold.cpu.get(k):
            out.add(k)
    for _name, a, b in (("mem", base.memory_max_eff, fold.memory_max_eff),
                       ("link", base.link_max_eff, fold.link_max_eff)):  # fmt: skip
        for k in set(a) | set(b):
            if a.get(k) != b.get(k):
                out.add(k)
    if dict(base.host_copy) != dict(fold.host_copy):
        out.add("host-copy")
    if dict(base.gpu_power) != dict(fold.gpu_power):
        out.add(GPU_POWER)
    return out


_TYPE = re.compile(r"\btype:\s*([A-Za-z0-9_.\-]+)")


def scenario_names(path: Path) -> set[str]:
    """The catalogue names a scenario's file mentions (``type: <name>``), plus ``"*"``
    when it has a CPU and ``host-copy`` when it copies between host and GPU (any PCIe
    link): a cheap superset of what a refit can reach."""
    text = path.read_text(encoding="utf-8")
    names = set(_TYPE.findall(text))
    from hetsim.devices.catalogue import shipped_devices, shipped_links

    devs, links = shipped_devices(), shipped_links()
    if any(n in devs and devs[n].kind == "cpu" for n in names):
        names.add("*")
    if any(n in links and links[n].kind == "pcie" for n in names):
        names.add("host-copy")
    return names


@dataclass
class FoldResult:
    """A row's prediction under one fold."""

    fold: str
    predicted: float


@dataclass
class RowCV:
    """A row's cross-validated predictions (empty when no fold touches it)."""

    results: list[FoldResult] = field(default_factory=list)

    def worst(self, published: float) -> FoldResult | None:
        """The fold whose prediction is furthest from ``published`` (relative)."""
        if not self.results:
            return None
        return max(self.results, key=lambda r: abs(r.predicted / published - 1.0))

    def error_range(self, published: float) -> tuple[float, float] | None:
        """(lowest, highest) signed error over the folds."""
        if not self.results:
            return None
        errs = [r.predicted / published - 1.0 for r in self.results]
        return min(errs), max(errs)


def cross_validate(
    items: Sequence[tuple[str, Path, Callable[[], float | None]]],
    registered: Sequence[Part] | None = None,
    progress: Callable[[str], None] | None = None,
    energy_rows: frozenset[str] = frozenset(),
) -> dict[str, RowCV]:
    """Re-run each ``(row id, scenario path, run)`` under every fold that changes a value
    its scenario can read; ``run`` returns the row's prediction (None: it failed). Rows
    in ``energy_rows`` also read the GPU power coefficients (:data:`GPU_POWER`)."""
    from hetsim.devices import fit_overrides

    registered = parts() if registered is None else registered
    base = refit_all(registered)
    fold_list = [(f, refit_all(registered, f.keeps)) for f in folds(registered)]
    touched = {f.label: changed_names(base, o) for f, o in fold_list}
    names = {rid: scenario_names(path) | ({GPU_POWER} if rid in energy_rows else set())
             for rid, path, _ in items}  # fmt: skip
    out: dict[str, RowCV] = {rid: RowCV() for rid, _, _ in items}
    for f, o in fold_list:
        todo = [(rid, run) for rid, _, run in items if names[rid] & touched[f.label]]
        if not todo:
            continue
        if progress is not None:
            progress(f"fold {f.label}: {len(todo)} rows")
        with fit_overrides.applied(only_changed(base, o)):
            for rid, run in todo:
                value = run()
                if value is not None:
                    out[rid].results.append(FoldResult(f.label, value))
    return out
