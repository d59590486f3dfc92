"""Fit the kernel classes' efficiencies (``devices/kernels.yaml``) to measured kernel times.

Data: Vidur's operator profiles (MIT; ``../shared/calibration/vidur-profiles``, see its
SOURCE.md). A sample of them ships in ``devices/data/vidur/`` (every profiled token count
up to 64, then every 4th; every 4th attention row), so the fit and its tests run from
the repository alone; ``--sample`` rebuilds the sample from the full profiles.

* ``mlp.csv`` (A100, H100; Llama-2-7B/70B, Llama-3-8B/70B; TP 1-8; 1-32k tokens): GPU
  kernel times of one transformer block's shard, fp16. The four projections are GEMMs of
  known shape; norms, rotary, SiLU-and-mul, residual add and the embedding gather are
  elementwise kernels whose bytes follow from the shapes.
* ``legacy/a100_attention`` (A100, Llama-2-70B attention shard at TP 2, FlashAttention):
  prefill (chunk 64-4096 on 0-4032 cached tokens) and paged decode (batch 1-128).

Every fit minimises the log-ratio of predicted to measured time (scipy ``least_squares``
from a fixed start, so it is deterministic) through the same functions the simulator
prices kernels with (:mod:`hetsim.devices.kernels`). Residuals (median and 90th
percentile of ``|predicted / measured - 1|``) are printed per kernel class, operator and
TP degree, and stored per device and class in ``kernels.yaml`` (``residuals:``), where
runs read them to report their expected error (``model_error_p50``/``p90``).

H100 has no attention profile here: its attention classes borrow A100's efficiencies
(fractions of H100's own peak and bandwidth), and ``kernels.yaml`` says so.

``devices/data/gemv_points.csv`` holds published single-kernel GEMV times at batch 1 on
devices without profiles of their own (RTX 2080 Ti, A10G, RTX 3090 / 3090 Ti; fp16, int8
and int4 weight-only kernels, each with its source). As checks they test how a
borrowed byte-size curve moves to another device (``borrowed_size_curves`` in
``kernels.yaml``, :func:`hetsim.devices.kernels.moved_fits`), and whether the GEMM
memory curve reads by bytes moved or by weight shape (an int4 GEMV and an fp16 one of
the same shape). :func:`gemv_point_check` prices each point under both transfer rules;
the report prints it. Points whose ``fit`` column names a GEMV memory fit are also
fitted: :func:`fit_gemv_memory` fits the GEMM memory curve of that die (the rest of the
class the A100's) on them, written to ``kernels.yaml`` ``gemv_memory_fits`` (the
``ga102-gddr6x`` curve of the RTX 3090 / 3090 Ti, used by the devices listed in
``gemv_memory_borrow``); the report prints its errors beside the A100 curve's.

GEMM formats with microbenchmarks of their own in ``devices/data/microbenchmarks.csv``
(FP8, K03) get a ``format_compute_scale`` (:func:`format_compute_scales`): on the fitted
device, and on every device that borrows its GEMM fit and has points of its own (H200 and
MI300X: :func:`borrower_scales`, written to ``borrower_format_compute_scale``).

Run ``python -m hetsim.devices.kernel_calibration`` for the residual tables and
``--write`` to rewrite ``devices/kernels.yaml``'s ``fits:``, ``residuals:``,
``borrower_format_compute_scale:`` and ``gemv_memory_fits:`` (every other section and each
section's comments are kept).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import least_squares

from hetsim.devices.calibration import points
from hetsim.devices.catalogue import device_spec, shipped_devices
from hetsim.devices.kernels import (
    BORROWED_SIZE_RULES,
    GEMV_FITS_SECTION,
    KERNELS_FILE,
    OWN_SCALES_SECTION,
    AttentionDecodeFit,
    AttentionPrefillFit,
    ElementwiseFit,
    GemmFit,
    KernelFits,
    attention_decode_time_s,
    attention_prefill_time_s,
    elementwise_time_s,
    gemm_time_s,
    kernel_table,
    moved_fits,
)
from hetsim.devices.precision import Precision
from hetsim.devices.spec import DeviceSpec, EfficiencyCurve


def _yaml_load(text: str) -> Any:
    """``yaml.safe_load`` with libyaml's parser when present (same objects, ~10x faster)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


SAMPLE_DIR = Path(__file__).resolve().parent / "data" / "vidur"
SHARED_DIR = Path(__file__).resolve().parents[2] / "shared" / "calibration" / "vidur-profiles"
FP16 = Precision()
#: Vidur's GPU folder -> catalogue device (the profiles' SKU: 80 GB SXM parts; Vidur's
#: own device config uses 312 and 1000 fp16 TFLOP/s, the SXM figures).
DEVICES = {"a100": "a100-80gb", "h100": "h100-sxm"}
#: model folder -> (query heads, KV heads, hidden, FFN)
MODELS = {
    "Llama-2-7b-hf": (32, 32, 4096, 11008),
    "Llama-2-70b-hf": (64, 8, 8192, 28672),
    "Meta-Llama-3-8B": (32, 8, 4096, 14336),
    "Meta-Llama-3-70B": (64, 8, 8192, 28672),
}
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
#: elementwise operator -> op kind of :data:`hetsim.devices.kernels.ELEMENTWISE_OPS`
ELEMENTWISE = {
    "input_layernorm": "norm", "post_attention_layernorm": "norm", "attn_rope": "rotary",
    "mlp_act": "activation", "add": "add", "emb": "embedding",
}  # fmt: skip
ATTN_SHAPE = (64, 8, 8192, 2)  # legacy file: query heads, KV heads, hidden, TP


# ---- measurements ------------------------------------------------------------------------
@dataclass(frozen=True)
class Measured:
    """Measured kernel times of one class on one device, with their shapes."""

    device: str
    table: pd.DataFrame  # one row per kernel: shape columns, ``op``, ``tp``, ``time_s``


def _mlp_files(root: Path) -> list[tuple[str, str, Path]]:
    out = []
    for gpu in sorted(DEVICES):
        for model in sorted(MODELS):
            path = root / "compute" / gpu / "meta-llama" / model / "mlp.csv"
            if path.is_file():
                out.append((gpu, model, path))
    return out


def _medians(frame: pd.DataFrame, ops: tuple[str, ...]) -> pd.DataFrame:
    keep = {f"time_stats.{op}.median": op for op in ops if f"time_stats.{op}.median" in frame}
    return frame.rename(columns=keep)


def gemm_measurements(root: Path) -> dict[str, pd.DataFrame]:
    """GEMM kernels per device: columns model, tp, op, m, n, k, time_s."""
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for gpu, model, path in _mlp_files(root):
        nh, nkv, h, f = MODELS[model]
        hd = h // nh
        frame = _medians(pd.read_csv(path), GEMM_OPS)
        for r in frame.itertuples(index=False):
            tp, t = int(r.num_tensor_parallel_workers), int(r.num_tokens)  # type: ignore[arg-type]
            shapes = {
                "attn_pre_proj": ((nh + 2 * nkv) * hd // tp, h),
                "attn_post_proj": (h, nh * hd // tp),
                "mlp_up_proj": (2 * f // tp, h),
                "mlp_down_proj": (h, f // tp),
            }
            for op, (n, k) in shapes.items():
                rows.setdefault(DEVICES[gpu], []).append(
                    (model, tp, op, t, n, k, getattr(r, op) * 1e-3)
                )
    cols = ["model", "tp", "op", "m", "n", "k", "time_s"]
    return {d: pd.DataFrame(v, columns=cols) for d, v in rows.items()}


def elementwise_bytes(op: str, t: float, nh: int, nkv: int, h: int, f: int, tp: int) -> float:
    """Bytes an fp16 elementwise operator of Vidur's block moves for ``t`` tokens."""
    hd = h // nh
    return {
        "input_layernorm": 2.0 * (2 * t * h) + 2 * h,
        "post_attention_layernorm": 2.0 * (2 * t * h) + 2 * h,
        "attn_rope": 2.0 * 2 * t * (nh + nkv) * hd / tp,
        "mlp_act": 2.0 * (t * 2 * f / tp + t * f / tp),
        "add": 2.0 * 3 * t * h,
        "emb": 2.0 * 2 * t * h,
    }[op]


def elementwise_measurements(root: Path) -> dict[str, pd.DataFrame]:
    """Elementwise kernels per device: columns model, tp, op, kind, m, bytes, time_s."""
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for gpu, model, path in _mlp_files(root):
        nh, nkv, h, f = MODELS[model]
        frame = _medians(pd.read_csv(path), tuple(ELEMENTWISE))
        for r in frame.itertuples(index=False):
            tp, t = int(r.num_tensor_parallel_workers), int(r.num_tokens)  # type: ignore[arg-type]
            for op, kind in ELEMENTWISE.items():
                nbytes = elementwise_bytes(op, t, nh, nkv, h, f, tp)
                rows.setdefault(DEVICES[gpu], []).append(
                    (model, tp, op, kind, t, nbytes, getattr(r, op) * 1e-3)
                )
    cols = ["model", "tp", "op", "kind", "m", "bytes", "time_s"]
    return {d: pd.DataFrame(v, columns=cols) for d, v in rows.items()}


def attention_measurements(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(prefill, decode) attention kernels of the legacy A100 file, per GPU shard."""
    frame = pd.read_csv(_attention_file(root))
    frame = _medians(frame, ("attn_prefill", "attn_decode"))
    pre = frame[frame.is_prefill.astype(bool)]
    dec = frame[~frame.is_prefill.astype(bool)]
    prefill = pd.DataFrame({
        "q": pre.prefill_chunk_size.astype(float), "c": pre.kv_cache_size.astype(float),
        "time_s": pre.attn_prefill * 1e-3,
    })  # fmt: skip
    decode = pd.DataFrame({
        "b": dec.batch_size.astype(float), "c": dec.kv_cache_size.astype(float),
        "time_s": dec.attn_decode * 1e-3,
    })  # fmt: skip
    return prefill.reset_index(drop=True), decode.reset_index(drop=True)


def _attention_file(root: Path) -> Path:
    for name in ("legacy/a100_attention_e2d00e9.csv", "legacy/a100_attention_sample.csv"):
        if (root / name).is_file():
            return root / name
    raise FileNotFoundError(f"no attention profile under {root}")


# ---- predictions through the simulator's own functions -----------------------------------
def _hill(x: np.ndarray, i: int) -> EfficiencyCurve:
    return EfficiencyCurve(float(x[i]), float(10 ** x[i + 1]), float(x[i + 2]))


def gemm_fit_of(x: np.ndarray) -> GemmFit:
    """A :class:`GemmFit` from the fit vector (log10 half sizes)."""
    return GemmFit(_hill(x, 0), _hill(x, 3), float(x[6]), float(x[7]))


def predict_gemm(spec: DeviceSpec, fit: GemmFit, d: pd.DataFrame) -> np.ndarray:
    """Predicted seconds of the GEMM rows ``d``."""
    n, k = d.n.to_numpy(float), d.k.to_numpy(float)
    return np.asarray(gemm_time_s(spec, fit, d.m.to_numpy(float), n, k, FP16))


def elementwise_fit_of(x: np.ndarray, kinds: list[str]) -> ElementwiseFit:
    """An :class:`ElementwiseFit` from the fit vector: the size curve (peak 1: each op
    kind's own peak scales it), the floor, one peak efficiency per op kind."""
    curve = EfficiencyCurve(1.0, float(10 ** x[0]), float(x[1]))
    return ElementwiseFit(curve, {k: float(x[3 + i]) for i, k in enumerate(kinds)}, float(x[2]))


def predict_elementwise(spec: DeviceSpec, fit: ElementwiseFit, d: pd.DataFrame) -> np.ndarray:
    """Predicted seconds of the elementwise rows ``d``."""
    out = np.empty(len(d))
    for kind, idx in d.groupby("kind").indices.items():
        out[idx] = elementwise_time_s(spec, fit, d.bytes.to_numpy(float)[idx], str(kind))
    return out


def prefill_fit_of(x: np.ndarray) -> AttentionPrefillFit:
    """An :class:`AttentionPrefillFit` from the fit vector."""
    return AttentionPrefillFit(_hill(x, 0), float(x[3]), float(x[4]), float(x[5]), float(x[6]))


def predict_prefill(spec: DeviceSpec, fit: AttentionPrefillFit, d: pd.DataFrame) -> np.ndarray:
    """Predicted seconds of prefill attention rows (one sequence each, TP-2 shard)."""
    nh, nkv, h, tp = ATTN_SHAPE
    q, c = d.q.to_numpy(float), d.c.to_numpy(float)
    return np.asarray(attention_prefill_time_s(spec, fit, q * c, q * q, q, c, nh / tp,
                                               nkv / tp, h / nh, FP16))  # fmt: skip


def decode_fit_of(x: np.ndarray) -> AttentionDecodeFit:
    """An :class:`AttentionDecodeFit` from the fit vector."""
    return AttentionDecodeFit(EfficiencyCurve(float(x[0]), float(10 ** x[1]), float(x[2])),
                              float(x[3]), float(x[4]))  # fmt: skip


def predict_decode(spec: DeviceSpec, fit: AttentionDecodeFit, d: pd.DataFrame) -> np.ndarray:
    """Predicted seconds of decode attention rows (``b`` sequences of ``c`` tokens)."""
    nh, nkv, h, tp = ATTN_SHAPE
    b, c = d.b.to_numpy(float), d.c.to_numpy(float)
    return np.asarray(attention_decode_time_s(spec, fit, b, b * c, nh / tp, nkv / tp, h / nh,
                                              FP16))  # fmt: skip


# ---- fitting -----------------------------------------------------------------------------
def _solve(residual: Callable[[np.ndarray], np.ndarray], x0: list[float],
           lo: list[float], hi: list[float]) -> np.ndarray:  # fmt: skip
    return np.asarray(least_squares(residual, x0, bounds=(lo, hi), x_scale="jac").x)


def fit_gemm(spec: DeviceSpec, d: pd.DataFrame) -> GemmFit:
    """Least-squares GEMM fit on ``d`` (see module doc)."""
    t = d.time_s.to_numpy(float)
    x = _solve(lambda x: np.log(predict_gemm(spec, gemm_fit_of(x), d) / t),
               [0.75, 9.0, 1.0, 0.85, 7.0, 0.7, 1.5, 2e-6],
               [0.1, 5.0, 0.2, 0.1, 2.0, 0.2, 1.0, 0.0],
               [1.2, 13.0, 4.0, 1.2, 10.0, 4.0, 20.0, 2e-5])  # fmt: skip
    return gemm_fit_of(x)


def fit_elementwise(spec: DeviceSpec, d: pd.DataFrame) -> ElementwiseFit:
    """Least-squares elementwise fit: shared curve and floor, a peak per op kind."""
    kinds = sorted(d.kind.unique())
    t = d.time_s.to_numpy(float)
    n = len(kinds)
    x = _solve(lambda x: np.log(predict_elementwise(spec, elementwise_fit_of(x, kinds), d) / t),
               [6.0, 1.0, 2e-6] + [0.8] * n, [2.0, 0.2, 0.0] + [0.02] * n,
               [10.0, 4.0, 2e-5] + [1.5] * n)  # fmt: skip
    return elementwise_fit_of(x, kinds)


def fit_prefill(spec: DeviceSpec, d: pd.DataFrame) -> AttentionPrefillFit:
    """Least-squares prefill-attention fit."""
    t = d.time_s.to_numpy(float)
    x = _solve(lambda x: np.log(predict_prefill(spec, prefill_fit_of(x), d) / t),
               [0.5, 10.0, 1.0, 0.8, 2.0, 5e-6, 0.5], [0.05, 5.0, 0.1, 0.05, 1.0, 0.0, 0.5],
               [1.0, 14.0, 4.0, 1.0, 20.0, 5e-5, 2.0])  # fmt: skip
    return prefill_fit_of(x)


def fit_decode(spec: DeviceSpec, d: pd.DataFrame) -> AttentionDecodeFit:
    """Least-squares decode-attention fit."""
    t = d.time_s.to_numpy(float)
    x = _solve(lambda x: np.log(predict_decode(spec, decode_fit_of(x), d) / t),
               [0.7, 6.0, 1.0, 1e-7, 5e-6], [0.05, 2.0, 0.1, 0.0, 0.0],
               [1.0, 10.0, 4.0, 5e-6, 5e-5])  # fmt: skip
    return decode_fit_of(x)


@dataclass(frozen=True)
class DeviceFit:
    """All kernel-class fits of one device, with the rows and predictions behind them."""

    device: str
    gemm: GemmFit
    elementwise: ElementwiseFit
    prefill: AttentionPrefillFit
    decode: AttentionDecodeFit
    fitted_on: dict[str, str]
    #: kernel class -> frame with the measured rows plus ``predicted_s`` and ``error``
    rows: dict[str, pd.DataFrame]


def _with_error(d: pd.DataFrame, predicted: np.ndarray) -> pd.DataFrame:
    out = d.copy()
    out["predicted_s"] = predicted
    out["error"] = predicted / out.time_s.to_numpy(float) - 1.0
    return out


#: Formats the GEMM fit is measured in (Vidur's profiles): no scale of their own.
FITTED_FORMATS = ("fp16", "bf16")


def format_compute_scales(spec: DeviceSpec, fit: GemmFit) -> dict[str, float]:
    """Per math format with GEMM microbenchmarks on ``spec`` in the calibration data
    (``devices/data/microbenchmarks.csv``, square cuBLASLt GEMMs) other than the fitted
    fp16/bf16: the median over its sizes of the fitted class's time over the measured
    one, i.e. the share of the class's compute efficiency that format reaches."""
    ratios: dict[str, list[float]] = {}
    for p in points():
        if p.kind != "gemm" or p.target != spec.name or p.dtype in FITTED_FORMATS:
            continue
        if p.dtype not in spec.peak_flops:
            continue
        n = int(p.size)
        measured_s = 2.0 * n**3 / p.value
        t = float(gemm_time_s(spec, fit, n, n, n, Precision.uniform(p.dtype)))
        ratios.setdefault(p.dtype, []).append(t / measured_s)
    return {d: round(float(np.median(r)), 4) for d, r in sorted(ratios.items())}


def borrower_scales(fits: dict[str, DeviceFit]) -> dict[str, dict[str, float]]:
    """:func:`format_compute_scales` of every device that borrows one of ``fits``' GEMM
    fits (``kernels.yaml`` ``borrow:``) and has GEMM microbenchmarks of its own, against
    the borrowed fit as that device uses it (moved to its bandwidth, unscaled); devices
    without such points get none and keep the lender's scales."""
    _, borrow = kernel_table()
    lenders = {d: device_spec(d).memory_bandwidth_Bps for d in fits}
    out = {}
    for device, lender in sorted(borrow.items()):
        if lender not in fits:
            continue
        spec = device_spec(device)
        gemm = replace(fits[lender].gemm, format_compute_scale={})
        lent = DeviceFit(lender, gemm, fits[lender].elementwise, fits[lender].prefill,
                         fits[lender].decode, fits[lender].fitted_on, {})  # fmt: skip
        moved = moved_fits(_kernel_fits_of(lent), spec.memory_bandwidth_Bps, lenders)
        scales = format_compute_scales(spec, moved.gemm)
        if scales:
            out[device] = scales
    return out


def _kernel_fits_of(fit: DeviceFit) -> KernelFits:
    return KernelFits(fit.gemm, fit.prefill, fit.decode, fit.elementwise,
                      fitted_on=dict(fit.fitted_on))  # fmt: skip


def fit_all(root: Path | None = None) -> dict[str, DeviceFit]:
    """Fit every device with profiles under ``root`` (default: the shipped sample)."""
    root = root or SAMPLE_DIR
    gemms, elems = gemm_measurements(root), elementwise_measurements(root)
    pre, dec = attention_measurements(root)
    a100 = device_spec(DEVICES["a100"])
    pre_fit, dec_fit = fit_prefill(a100, pre), fit_decode(a100, dec)
    out = {}
    for device in sorted(gemms):
        spec = device_spec(device)
        g, e = fit_gemm(spec, gemms[device]), fit_elementwise(spec, elems[device])
        g = replace(g, format_compute_scale=format_compute_scales(spec, g))
        rows = {
            "gemm": _with_error(gemms[device], predict_gemm(spec, g, gemms[device])),
            "elementwise": _with_error(elems[device], predict_elementwise(spec, e, elems[device])),
        }
        if device == a100.name:
            rows["attention_prefill"] = _with_error(pre, predict_prefill(spec, pre_fit, pre))
            rows["attention_decode"] = _with_error(dec, predict_decode(spec, dec_fit, dec))
        fitted_on = {"gemm": device, "elementwise": device, "attention_prefill": a100.name,
                     "attention_decode": a100.name}  # fmt: skip
        out[device] = DeviceFit(device, g, e, pre_fit, dec_fit, fitted_on, rows)
    return out


def residuals(fit: DeviceFit) -> dict[str, dict[str, float]]:
    """Per kernel class: median and 90th percentile of |predicted / measured - 1|."""
    out = {}
    for cls, d in fit.rows.items():
        e = np.abs(d.error.to_numpy(float))
        p50, p90 = float(np.median(e)), float(np.percentile(e, 90))
        out[cls] = {"p50": round(p50, 4), "p90": round(p90, 4), "n": len(e)}
    return out


def report(fits: dict[str, DeviceFit]) -> str:
    """Residual tables per device: by class, and by operator and TP degree."""
    lines = []
    for device, fit in fits.items():
        lines.append(f"== {device}  (median |error| / p90 |error| / rows)")
        for cls, r in residuals(fit).items():
            lines.append(f"  {cls:<18} {r['p50']:7.1%} {r['p90']:7.1%} {r['n']:6d}")
        for cls in ("gemm", "elementwise"):
            d = fit.rows[cls].assign(abs_error=lambda f: f.error.abs())
            table = d.pivot_table(index="op", columns="tp", values="abs_error", aggfunc="median")
            lines.append(f"  {cls} median |error| by operator and TP degree:")
            text = table.to_string(float_format="{:.1%}".format)
            lines += ["    " + ln for ln in text.splitlines()]
    return "\n".join(lines)


# ---- published GEMV points on devices without profiles -----------------------------------
GEMV_POINTS_FILE = Path(__file__).resolve().parent / "data" / "gemv_points.csv"
#: Device the points' devices borrow from when ``kernels.yaml`` does not list them (the
#: RTX 2080 Ti, Turing, and the A10G, Ampere: the closest fitted generation).
GEMV_POINT_LENDER = "a100-80gb"


def _point_spec(r: Mapping[Any, Any]) -> DeviceSpec:
    """A point's device: its catalogue spec, or the file's bandwidth and peaks on the
    lender's spec for a device the catalogue lacks."""
    device = str(r["device"])
    shipped = shipped_devices().get(device)
    if shipped is not None:
        return shipped
    return replace(
        device_spec(GEMV_POINT_LENDER),
        name=device,
        memory_bandwidth_Bps=float(r["memory_bandwidth_Bps"]),
        peak_flops={"fp16": float(r["fp16_peak_flops"]), "fp32": float(r["fp32_peak_flops"])},
    )


def _point_precision(r: Mapping[Any, Any]) -> Precision:
    """fp16; int4/int8 with a group size: weight-only with fp16 activations (scales in
    groups of ``group_size``); other formats as :meth:`Precision.uniform`."""
    weights, group = str(r["weights"]), int(r["group_size"])
    if weights == "fp16":
        return FP16
    if weights in ("int4", "int8") and group > 0:
        return Precision(weights, "fp16", "fp16", group)  # type: ignore[arg-type]
    return Precision.uniform(weights)


def gemv_point_check(path: Path = GEMV_POINTS_FILE) -> pd.DataFrame:
    """Each published GEMV point priced by :func:`gemm_time_s` on the fits its device
    borrows from a profiled device (its catalogue spec, or the file's bandwidth and peaks
    for a device the catalogue lacks), under every ``borrowed_size_curves`` rule: columns
    id, device, kernel, weights, n, k, time_s, lender, fit (the point's GEMV memory fit,
    "" if none), and ``error_<rule>`` (predicted / measured - 1). The lender's own GEMM
    curves, not a GEMV memory fit: this checks how a profiled device's curve moves."""
    frame = pd.read_csv(path, keep_default_na=False)
    fits, borrow = kernel_table()
    bandwidths = {d: device_spec(d).memory_bandwidth_Bps for d in fits}
    out = []
    for r in frame.to_dict(orient="records"):
        device = str(r["device"])
        lender = borrow.get(device, device if device in fits else GEMV_POINT_LENDER)
        spec, precision = _point_spec(r), _point_precision(r)
        m, n, k, measured = int(r["m"]), int(r["n"]), int(r["k"]), float(r["time_s"])
        row: dict[str, Any] = {
            "id": r["id"], "device": device, "kernel": r["kernel"], "weights": r["weights"],
            "n": n, "k": k, "time_s": measured, "lender": lender, "fit": str(r.get("fit", "")),
        }  # fmt: skip
        for rule in BORROWED_SIZE_RULES:
            moved = moved_fits(fits[lender], spec.memory_bandwidth_Bps, bandwidths, rule)  # type: ignore[arg-type]
            t = float(gemm_time_s(spec, moved.gemm, m, n, k, precision))
            row[f"error_{rule}"] = t / measured - 1.0
        out.append(row)
    return pd.DataFrame(out)


# ---- GEMV memory curves of dies without profiles -----------------------------------------
@dataclass(frozen=True)
class GemvFit:
    """A GEMM memory curve fitted on the published GEMV points of one ``fit`` group of
    ``gemv_points.csv`` (:func:`fit_gemv_memory`), with the points and their errors."""

    name: str
    memory: EfficiencyCurve
    bandwidth_Bps: float  # the bandwidth its half size is in bytes at
    devices: tuple[str, ...]
    #: the points: id, device, kernel, time_s, ``error`` (this curve) and ``error_lender``
    #: (the lender's curve moved by the latency rule, as shipped before the fit)
    rows: pd.DataFrame


def _gemv_times(points: list[dict[Any, Any]], gemm: GemmFit, curve: EfficiencyCurve,
                bandwidth_Bps: float) -> np.ndarray:  # fmt: skip
    """Predicted seconds of ``points`` with ``gemm``'s memory curve replaced by ``curve``
    (half size in bytes at ``bandwidth_Bps``, moved to each point's bandwidth by time)."""
    out = []
    for r in points:
        spec = _point_spec(r)
        half = curve.half_size * spec.memory_bandwidth_Bps / bandwidth_Bps
        moved = replace(curve, half_size=half)
        t = gemm_time_s(spec, replace(gemm, memory=moved), int(r["m"]), int(r["n"]), int(r["k"]),
                        _point_precision(r))  # fmt: skip
        out.append(float(t))
    return np.array(out)


def fit_gemv_memory(path: Path = GEMV_POINTS_FILE) -> dict[str, GemvFit]:
    """Per ``fit`` group of the GEMV points: the GEMM memory curve (peak efficiency, half
    size, exponent) that minimises the log-ratio of predicted to measured time, with the
    rest of the GEMM class (compute curve, sharpness, floor) the lender's (A100). The half
    size is in bytes at the bandwidth of the group's most frequent device; points on
    other devices of the group take it moved by time (``borrowed_size_curves: latency``)."""
    frame = pd.read_csv(path, keep_default_na=False)
    fits = kernel_table()[0]
    lender = fits[GEMV_POINT_LENDER].gemm
    out = {}
    for name in sorted(n for n in frame["fit"].unique() if n):
        group = frame[frame["fit"] == name]
        points = group.to_dict(orient="records")
        main = group["device"].value_counts().index[0]
        bw = float(group[group["device"] == main]["memory_bandwidth_Bps"].iloc[0])
        t = group["time_s"].to_numpy(float)

        def residual(x: np.ndarray, pts: list[dict[Any, Any]] = points, bw: float = bw,
                     t: np.ndarray = t) -> np.ndarray:  # fmt: skip
            curve = EfficiencyCurve(x[0], 10 ** x[1], x[2])  # half size as log10 bytes
            return np.asarray(np.log(_gemv_times(pts, lender, curve, bw) / t))

        x = _solve(residual, [0.9, 6.5, 1.0], [0.2, 4.0, 0.2], [1.0, 9.0, 4.0])
        curve = EfficiencyCurve(float(x[0]), float(10 ** x[1]), float(x[2]))
        own = _gemv_times(points, lender, curve, bw)
        base = device_spec(GEMV_POINT_LENDER).memory_bandwidth_Bps
        lent = _gemv_times(points, lender, lender.memory, base)
        rows = group[["id", "device", "kernel", "weights", "n", "k", "time_s"]].assign(
            error=own / t - 1.0, error_lender=lent / t - 1.0
        )
        out[name] = GemvFit(name, curve, bw, tuple(sorted(group["device"].unique())), rows)
    return out


def gemv_fit_report(gemv: dict[str, GemvFit]) -> str:
    """Each GEMV memory fit: the curve, its errors per point and the lender's."""
    lines = []
    for f in gemv.values():
        c = f.memory
        lines.append(f"== GEMV memory fit {f.name} on {', '.join(f.devices)}: max_eff "
                     f"{c.max_eff:.4f}, half size {c.half_size / 1e6:.3f} MB at "
                     f"{f.bandwidth_Bps / 1e9:.1f} GB/s "
                     f"({c.half_size / f.bandwidth_Bps * 1e6:.2f} us), "
                     f"exponent {c.exponent:.4f}")  # fmt: skip
        for r in f.rows.itertuples(index=False):
            lines.append(f"  {r.id} {r.device:<12} {r.kernel:<28} {r.n:>6}x{r.k:<6} "
                         f"fit {r.error:+7.1%}  lender {r.error_lender:+7.1%}")  # fmt: skip
        for col, label in (("error", "this fit"), ("error_lender", "lender curve (latency rule)")):
            e = np.abs(f.rows[col].to_numpy(float))
            lines.append(f"  |error| {label}: median {np.median(e):.1%}, p90 "
                         f"{np.percentile(e, 90):.1%}, n {len(e)}")  # fmt: skip
    return "\n".join(lines)


def gemv_fits_yaml(gemv: dict[str, GemvFit]) -> dict[str, Any]:
    """The ``gemv_memory_fits:`` section of ``kernels.yaml``."""
    out: dict[str, Any] = {}
    for f in gemv.values():
        e = np.abs(f.rows.error.to_numpy(float))
        out[f.name] = {
            "source": "published GEMV kernel times, devices/data/gemv_points.csv (fit "
                      f"{f.name}); fitted by python -m hetsim.devices.kernel_calibration",
            "fitted_on": list(f.devices),
            "bandwidth_Bps": float(f"{f.bandwidth_Bps:.6g}"),
            "memory": _curve_yaml(f.memory),
            "residuals": {"p50": round(float(np.median(e)), 4),
                          "p90": round(float(np.percentile(e, 90)), 4), "n": len(e)},
        }  # fmt: skip
    return out


def gemv_point_report(check: pd.DataFrame) -> str:
    """The points' errors per rule, and the median |error| of those off the lender."""
    lines = ["== published GEMV points (not fitted): predicted / measured - 1 per rule"]
    rules = [c for c in check.columns if c.startswith("error_")]
    for r in check.itertuples(index=False):
        errs = "  ".join(f"{c[6:]} {getattr(r, c):+7.1%}" for c in rules)
        lines.append(f"  {r.id} {r.device:<12} {r.kernel:<28} {r.n:>6}x{r.k:<6} {errs}")
    off = check[check.device != check.lender]
    for c in rules:
        med = float(np.median(np.abs(off[c].to_numpy(float))))
        lines.append(f"  median |error| off the lender device, {c[6:]}: {med:.1%}")
    return "\n".join(lines)


# ---- writing kernels.yaml ----------------------------------------------------------------
def _curve_yaml(c: EfficiencyCurve) -> dict[str, float]:
    return {"max_eff": round(c.max_eff, 4), "half_size": float(f"{c.half_size:.4g}"),
            "exponent": round(c.exponent, 4)}  # fmt: skip


def fits_yaml(fit: DeviceFit) -> dict[str, Any]:
    """The ``fits:`` entry of one device."""
    g, e, p, d = fit.gemm, fit.elementwise, fit.prefill, fit.decode
    return {
        "source": "Vidur operator profiles (MIT), devices/data/vidur; fitted by "
                  "python -m hetsim.devices.kernel_calibration",
        "fitted_on": dict(fit.fitted_on),
        "gemm": {"compute": _curve_yaml(g.compute), "memory": _curve_yaml(g.memory),
                 "sharpness": round(g.sharpness, 4), "floor_s": float(f"{g.floor_s:.4g}"),
                 **({"format_compute_scale": dict(g.format_compute_scale)}
                    if g.format_compute_scale else {})},
        "attention_prefill": {"compute": _curve_yaml(p.compute),
                              "self_factor": round(p.self_factor, 4),
                              "memory_max_eff": round(p.memory_max_eff, 4),
                              "sharpness": round(p.sharpness, 4),
                              "floor_s": float(f"{p.floor_s:.4g}")},
        "attention_decode": {"memory": _curve_yaml(d.memory),
                             "per_seq_s": float(f"{d.per_seq_s:.4g}"),
                             "floor_s": float(f"{d.floor_s:.4g}")},
        "elementwise": {"memory": _curve_yaml(e.memory),
                        "op_max_eff": {k: round(v, 4) for k, v in sorted(e.op_max_eff.items())},
                        "floor_s": float(f"{e.floor_s:.4g}")},
    }  # fmt: skip


def _section_comments(text: str) -> dict[str, str]:
    """The comment lines right above each top-level key of a YAML file (key "" : those
    after the last key, if any)."""
    out: dict[str, str] = {}
    block: list[str] = []
    for ln in text.splitlines(keepends=True):
        if ln.startswith("#"):
            block.append(ln)
        elif ln[:1] not in ("", " ", "\n", "-") and ":" in ln:
            out[ln.split(":", 1)[0]] = "".join(block)
            block = []
    if block:
        out[""] = "".join(block)
    return out


def write_kernels_yaml(
    fits: dict[str, DeviceFit],
    path: Path = KERNELS_FILE,
    gemv: dict[str, GemvFit] | None = None,
) -> None:
    """Rewrite the ``fits:``, ``residuals:``, ``borrower_format_compute_scale:`` and (with
    ``gemv``) ``gemv_memory_fits:`` sections, keeping every other section (``borrow:``,
    ``gemv_memory_borrow:``) and each section's comment block as they are."""
    text = path.read_text(encoding="utf-8")
    comments = _section_comments(text)
    raw = _yaml_load(text) or {}
    raw["fits"] = {d: fits_yaml(f) for d, f in fits.items()}
    raw["residuals"] = {d: residuals(f) for d, f in fits.items()}
    raw[OWN_SCALES_SECTION] = borrower_scales(fits)
    if gemv is not None:
        raw[GEMV_FITS_SECTION] = gemv_fits_yaml(gemv)
    parts = [
        comments.get(key, "") + yaml.safe_dump({key: value}, sort_keys=False, width=100)
        for key, value in raw.items()
    ]
    path.write_text("".join(parts) + comments.get("", ""), encoding="utf-8")


# ---- the shipped sample ------------------------------------------------------------------
def write_sample(root: Path = SHARED_DIR, out: Path = SAMPLE_DIR) -> None:
    """Write the shipped sample from the full profiles (see module doc)."""
    for gpu, model, path in _mlp_files(root):
        frame = pd.read_csv(path)
        tokens = np.sort(frame.num_tokens.unique())
        keep = set(tokens[tokens <= 64]) | set(tokens[tokens > 64][::4])
        cols = ["num_tokens", "num_tensor_parallel_workers"] + [
            f"time_stats.{op}.median" for op in (*GEMM_OPS, *ELEMENTWISE)
        ]
        target = out / "compute" / gpu / "meta-llama" / model / "mlp.csv"
        target.parent.mkdir(parents=True, exist_ok=True)
        frame[frame.num_tokens.isin(keep)][cols].to_csv(target, index=False)
    frame = pd.read_csv(_attention_file(root))
    cols = ["is_prefill", "batch_size", "prefill_chunk_size", "kv_cache_size",
            "time_stats.attn_prefill.median", "time_stats.attn_decode.median"]  # fmt: skip
    target = out / "legacy" / "a100_attention_sample.csv"
    target.parent.mkdir(parents=True, exist_ok=True)
    frame.iloc[::4][cols].to_csv(target, index=False)


def main(argv: list[str] | None = None) -> None:
    """CLI: print the residual tables; ``--write`` rewrites kernels.yaml."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite devices/kernels.yaml")
    parser.add_argument(
        "--full",
        action="store_true",
        help="fit the full profiles in ../shared instead of the sample",
    )
    parser.add_argument(
        "--sample", action="store_true", help="rebuild devices/data/vidur from the full profiles"
    )
    args = parser.parse_args(argv)
    if args.sample:
        write_sample()
    fits = fit_all(SHARED_DIR if args.full else None)
    print(report(fits))
    print(gemv_point_report(gemv_point_check()))
    gemv = fit_gemv_memory()
    print(gemv_fit_report(gemv))
    if args.write:
        write_kernels_yaml(fits, gemv=gemv)
        print(f"wrote {KERNELS_FILE.name}")


if __name__ == "__main__":
    main()
