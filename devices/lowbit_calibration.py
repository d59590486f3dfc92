"""Fit of the low-bit GPU kernel families (:mod:`hetsim.devices.lowbit_kernels`) to
published kernel microbenchmarks.

Data: ``devices/data/lowbit_kernel_points.csv`` (a calibration set: no source is an
``endtoend.csv`` row's; ExLlamaV2's README performance table, which is one, is not used).
Each point is one kernel call's time (``quantity: time_s``) or a time at ``n`` tokens
over the same kernel's time at one token (``ratio_n1``). Points marked ``fit: no`` (the
GPU or the shape is not stated) are printed, not fitted.

Fit, per family: least squares on ``log(predicted / measured)`` over the family's fitted
points, the free parameters in ``FREE`` (log-transformed, bounded); a parameter that a
family's data cannot identify is fixed (``FIXED``: borrowed from the ``gemv`` fit, say
so in the YAML). Printed: each point's residual, the family's median and p90 |residual|,
and a leave-one-source-out error (each source's points predicted by a refit without that
source; a family with one source gets a leave-one-device-out error instead, and says so).

Run ``python -m hetsim.devices.lowbit_calibration`` (``--write`` rewrites the fitted
values in ``devices/lowbit_kernels.yaml``).
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import least_squares

from hetsim.devices.lowbit_kernels import KERNEL_FILE, LowbitKernel, kernel_time_s

DATA_FILE = Path(__file__).resolve().parent / "data" / "lowbit_kernel_points.csv"
# free parameters per family, with (low, high) bounds; the rest from FIXED or the YAML
FREE: dict[str, dict[str, tuple[float, float]]] = {
    "gemv": {"bandwidth_fraction": (0.05, 1.0), "floor_s": (1e-7, 5e-5),
             "ops_per_weight": (1e-3, 1e3)},
    "marlin": {"floor_s": (1e-7, 5e-5), "ops_per_weight": (1e-3, 1e3)},
    "triton-gemm": {"ops_per_weight": (1e-3, 1e4)},
}  # fmt: skip
# fixed parameters: a number, or "gemv.<field>" (the gemv family's fitted value)
FIXED: dict[str, dict[str, float | str]] = {
    "gemv": {"peak": "fp32", "pad_rows": 1},
    "marlin": {"bandwidth_fraction": "gemv.bandwidth_fraction", "peak": "fp16_tensor",
               "pad_rows": 1},
    "triton-gemm": {"bandwidth_fraction": "gemv.bandwidth_fraction",
                    "floor_s": "gemv.floor_s", "peak": "fp32", "pad_rows": 16},
}  # fmt: skip
ORDER = ("gemv", "marlin", "triton-gemm")  # gemv first: the others borrow from it


@dataclass(frozen=True)
class Point:
    """One published kernel measurement (a row of the CSV)."""

    id: str
    source_key: str
    family: str
    device: str
    bandwidth_Bps: float
    fp32_peak: float
    tensor_peak: float
    bits: float
    m: float
    k: float
    n: int
    quantity: str
    value: float
    fit: bool

    def peak(self, kernel: LowbitKernel) -> float:
        """The rate the point's device gives the family's work term."""
        return self.fp32_peak if kernel.peak == "fp32" else self.tensor_peak

    def predict(self, kernel: LowbitKernel) -> float:
        """The model's value of this point's quantity."""
        t = float(kernel_time_s(kernel, self.bandwidth_Bps, self.peak(kernel), self.m,
                                self.k, self.n, self.bits))  # fmt: skip
        if self.quantity == "time_s":
            return t
        t1 = float(kernel_time_s(kernel, self.bandwidth_Bps, self.peak(kernel), self.m,
                                 self.k, 1, self.bits))  # fmt: skip
        return t / t1


def load_points(path: Path = DATA_FILE) -> list[Point]:
    """The CSV's rows; a malformed one raises naming the file, row and field."""
    out = []
    with path.open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            where = f"{path.name} {row.get('id', '?')}"
            try:
                out.append(Point(
                    row["id"], row["source_key"], row["family"], row["device"],
                    float(row["memory_bandwidth_Bps"]), float(row["fp32_peak_flops"]),
                    float(row["fp16_tensor_peak_flops"]), float(row["bits_per_weight"]),
                    float(row["m"]), float(row["k"]), int(row["n"]), row["quantity"],
                    float(row["value"]), row["fit"] == "yes",
                ))  # fmt: skip
            except (KeyError, ValueError) as e:
                raise ValueError(f"{where}: {e}") from None
            if out[-1].quantity not in ("time_s", "ratio_n1") or out[-1].value <= 0:
                raise ValueError(f"{where}: quantity must be time_s or ratio_n1, value > 0")
    return out


@dataclass
class FamilyFit:
    """A family's fitted kernel, its residuals and its cross-validated errors."""

    family: str
    kernel: LowbitKernel
    residuals: dict[str, float]
    held_out: dict[str, float] = field(default_factory=dict)  # point id -> error
    held_out_by: str = "source"

    def summary(self, values: dict[str, float]) -> tuple[float, float]:
        """Median and p90 of |error|."""
        a = sorted(abs(v) for v in values.values())
        if not a:
            return float("nan"), float("nan")
        return statistics.median(a), float(np.quantile(a, 0.9))


def _shipped() -> dict[str, dict[str, object]]:
    data = yaml.safe_load(KERNEL_FILE.read_text(encoding="utf-8"))
    return dict(data["families"])


def _fixed_fields(family: str, gemv: LowbitKernel | None) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in FIXED[family].items():
        if isinstance(value, str) and value.startswith("gemv."):
            if gemv is None:
                raise ValueError(f"{family}.{key} borrows from gemv, which is not fitted")
            out[key] = getattr(gemv, value.removeprefix("gemv."))
        else:
            out[key] = value
    return out


def fit_family(family: str, points: Sequence[Point], gemv: LowbitKernel | None) -> LowbitKernel:
    """Least-squares fit of ``family``'s free parameters on ``points``."""
    pts = [p for p in points if p.family == family and p.fit]
    free = FREE[family]
    names = list(free)
    lo = np.log([free[n][0] for n in names])
    hi = np.log([free[n][1] for n in names])
    fixed = _fixed_fields(family, gemv)
    shipped = _shipped().get(family, {})
    start = []
    for n, a, b in zip(names, lo, hi, strict=True):
        s = shipped.get(n)
        v = np.log(float(s)) if isinstance(s, (int, float)) and s > 0 else (a + b) / 2
        start.append(min(max(v, a + 1e-9), b - 1e-9))

    def build(x: np.ndarray) -> LowbitKernel:
        vals = dict(zip(names, np.exp(x).tolist(), strict=True))
        return LowbitKernel(family, **{**fixed, **vals})

    def resid(x: np.ndarray) -> np.ndarray:
        k = build(x)
        return np.asarray([np.log(p.predict(k) / p.value) for p in pts])

    if not pts:
        raise ValueError(f"{family}: no points to fit")
    sol = least_squares(resid, np.asarray(start), bounds=(lo, hi))
    return build(sol.x)


def fit_all(points: Sequence[Point]) -> dict[str, FamilyFit]:
    """Every family's fit, residuals and held-out errors."""
    fits: dict[str, FamilyFit] = {}
    gemv: LowbitKernel | None = None
    for fam in ORDER:
        k = fit_family(fam, points, gemv)
        if fam == "gemv":
            gemv = k
        own = [p for p in points if p.family == fam and p.fit]
        res = {p.id: p.predict(k) / p.value - 1.0 for p in own}
        fits[fam] = FamilyFit(fam, k, res)
    for fam in ORDER:
        fits[fam].held_out, fits[fam].held_out_by = _held_out(fam, points)
    return fits


def _held_out(family: str, points: Sequence[Point]) -> tuple[dict[str, float], str]:
    """Each source's fitted points predicted by a refit without that source (and, for the
    families that borrow from gemv, without it in gemv's fit too); by device where the
    family has one source."""
    own = [p for p in points if p.family == family and p.fit]
    by = "source" if len({p.source_key for p in own}) > 1 else "device"
    groups = sorted({p.source_key if by == "source" else p.device for p in own})
    out: dict[str, float] = {}
    for g in groups:

        def keep(p: Point, g: str = g) -> bool:
            return (p.source_key if by == "source" else p.device) != g

        rest = [p for p in points if keep(p)]
        gemv = fit_family("gemv", rest, None) if family != "gemv" else None
        try:
            k = fit_family(family, rest, gemv)
        except ValueError:
            continue
        for p in own:
            if not keep(p):
                out[p.id] = p.predict(k) / p.value - 1.0
    return out, by


def report(path: Path = DATA_FILE) -> str:
    """The table printed by ``python -m hetsim.devices.lowbit_calibration``."""
    points = load_points(path)
    fits = fit_all(points)
    lines = ["Low-bit GPU kernels (devices/data/lowbit_kernel_points.csv; validation rows "
             "never used)",
             f"{'id':4} {'family':11} {'source':14} {'device':12} {'bits':>5} {'m x k':>12} "
             f"{'n':>3} {'quantity':8} {'measured':>10} {'model':>10} {'resid':>7} "
             f"{'held-out':>8}"]  # fmt: skip
    for p in points:
        f = fits[p.family]
        pred = p.predict(f.kernel) if p.fit else float("nan")
        ho = f.held_out.get(p.id)
        unit = 1e6 if p.quantity == "time_s" else 1.0
        lines.append(
            f"{p.id:4} {p.family:11} {p.source_key:14} {p.device:12} {p.bits:5.3g} "
            f"{f'{p.m:.0f}x{p.k:.0f}':>12} {p.n:3d} {p.quantity:8} {p.value * unit:10.4g} "
            f"{pred * unit:10.4g} "
            + (f"{f.residuals[p.id]:+7.1%}" if p.fit else "  (no)")
            + (f" {ho:+8.1%}" if ho is not None else "")
        )
    lines.append("times in us; resid = model / measured - 1; held-out = the same from a "
                 "refit without the point's source (or device)")  # fmt: skip
    for fam in ORDER:
        f = fits[fam]
        k = f.kernel
        fitted = f.residuals
        m50, m90 = f.summary(fitted)
        h50, h90 = f.summary(f.held_out)
        held = (
            f"leave-one-{f.held_out_by}-out median {h50:.1%} p90 {h90:.1%} (n={len(f.held_out)})"
            if f.held_out
            else "no cross-validation: one source on one device"
        )
        lines.append(
            f"  {fam:11} bandwidth_fraction {k.bandwidth_fraction:.4f}, floor_s "
            f"{k.floor_s * 1e6:.3f} us, ops_per_weight {k.ops_per_weight:.4g} on {k.peak}, "
            f"pad_rows {k.pad_rows}; fit |resid| median {m50:.1%} p90 {m90:.1%} "
            f"(n={len(fitted)}); {held}"
        )
    return "\n".join(lines)


def write_yaml(path: Path = KERNEL_FILE) -> None:
    """Rewrite the fitted fields of ``devices/lowbit_kernels.yaml`` (rounded to 4
    significant digits), keeping its comments above ``families:`` and each family's
    description and source."""
    fits = fit_all(load_points())
    text = path.read_text(encoding="utf-8")
    head = text[: text.index("families:")]
    data = yaml.safe_load(text)
    for fam, f in fits.items():
        entry = data["families"].setdefault(fam, {})
        k = f.kernel
        for key in ("bandwidth_fraction", "floor_s", "ops_per_weight"):
            entry[key] = float(f"{getattr(k, key):.4g}")
        entry["peak"], entry["pad_rows"] = k.peak, k.pad_rows
        fitted = f.residuals
        m50, m90 = f.summary(fitted)
        h50, h90 = f.summary(f.held_out)
        entry["fit"] = {
            "free": list(FREE[fam]),
            "fixed": {key: str(v) for key, v in FIXED[fam].items()},
            "residual_p50": round(m50, 4), "residual_p90": round(m90, 4), "n": len(fitted),
        }  # fmt: skip
        if f.held_out:
            entry["fit"][f"leave_one_{f.held_out_by}_out_p50"] = round(h50, 4)
            entry["fit"][f"leave_one_{f.held_out_by}_out_p90"] = round(h90, 4)
        else:
            entry["fit"]["cross_validation"] = "none: one source on one device"
    body = yaml.safe_dump({"families": data["families"]}, sort_keys=False, width=100)
    path.write_text(head + body, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> None:
    """CLI: print the points, the fits, residuals and held-out errors."""
    ap = argparse.ArgumentParser(prog="python -m hetsim.devices.lowbit_calibration",
                                 description=__doc__.split("\n\n")[0])  # fmt: skip
    ap.add_argument("--write", action="store_true", help="rewrite devices/lowbit_kernels.yaml")
    args = ap.parse_args(argv)
    if args.write:
        write_yaml()
    print(report())


if __name__ == "__main__":
    main()
