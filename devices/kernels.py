"""Kernel classes: the time of one GPU kernel from its shape, with fitted efficiencies.

Four classes, each with its own efficiency fit per device (``devices/kernels.yaml``,
fitted by :mod:`hetsim.devices.kernel_calibration` to measured kernel times):

* **GEMM** ``(m x k) @ (k x n)``: ``2mnk`` FLOPs at the tensor-core peak of its math
  format, bytes ``m k a + k n w + m n a`` (activation and weight bytes per element) at
  the HBM bandwidth. The compute efficiency rises with the FLOPs and the memory
  efficiency with the bytes (Hill curves, :class:`~hetsim.devices.spec.EfficiencyCurve`),
  and the two roofs combine smoothly, ``(t_c^p + t_m^p + t_d^p)^(1/p)`` with a fitted
  sharpness ``p``
  (``p -> inf`` is the plain roofline's max), so a GEMM with small ``m`` becomes a
  bandwidth-bound GEMV and the ridge is not too optimistic. ``t_d`` is the
  dequantisation roof of weight-only formats (:mod:`hetsim.devices.precision`). The
  compute curve is fitted on fp16 GEMMs (short bursts, boost clocks); a format with
  microbenchmarks of its own (FP8: the K03 cuBLASLt sweep on H100, K03 points on H200 and
  MI300X) scales it by ``format_compute_scale``, every other format by the run's clock
  factor (:mod:`hetsim.devices.sustained`, applied by :func:`kernel_fits`).
* **attention prefill** (flash-style, causal): ``4 heads d (sum q c + s sum q^2)`` FLOPs
  for chunks of ``q`` new tokens on ``c`` cached ones, where ``s`` is the fitted work per
  query-key pair of a chunk's own (causally masked) block: ``1/2`` for an ideal causal
  kernel, more where whole tiles are computed and masked; bytes of Q, K, V and O; an
  efficiency rising with the FLOPs; the same smooth max.
* **attention decode** (paged): bound by the KV bytes read, with a per-sequence cost.
* **elementwise** (norms, rotary, activations, residual adds, embedding gathers): bytes
  over bandwidth with a size-dependent efficiency; each op kind has its own peak
  efficiency (a residual add streams near the STREAM rate, a norm or a gather less).

Every kernel costs at least ``floor_s`` (a kernel's minimum duration on the GPU). The
CPU's launch cost per kernel is separate (:class:`LaunchModel`): with CUDA graphs the
GPU never waits for it; in eager mode a kernel shorter than the launch cost leaves the
GPU idle, so each kernel takes ``max(t, launch_s)``.

Where a device has no measured kernels, ``kernels.yaml`` names the device whose fitted
*efficiencies* it borrows (its own peaks and bandwidth still apply), and
:func:`kernel_fits` says so (``borrowed``); a device in neither list gets efficiencies
derived from its catalogue curves (``uncalibrated``). Nothing is borrowed silently.

A borrowed size curve over *bytes* (GEMM memory, elementwise, decode attention) moves
to the borrower as a fixed *time*, by default (``borrowed_size_curves: latency`` in
``kernels.yaml``): its half size is ``t_half * bandwidth``, with ``t_half`` = the
lender's half size over the lender's bandwidth, so a kernel needs the same ramp-up time
on either device, not the same bytes. The calibration data favour this reading: the two
devices fitted on their own profiles reach half of their peak GEMM memory efficiency
at 6.68 MB (A100, 2.04 TB/s) and 10.27 MB (H100, 3.35 TB/s), which is 3.28 us and
3.07 us, and their elementwise curves at 0.61 us and 0.76 us, while the byte figures
differ by 1.5-2x; one shared half size over both devices' GEMVs (m <= 4) fits them to
a median 3.2% read as time against 3.5% read as bytes (p90 8.6% against 9.5%).
``bytes`` keeps the lender's byte half sizes. Curves over FLOPs (tile and wave
effects of a shape) and peak efficiencies move unchanged.

**GEMV memory curves of dies without operator profiles** (``gemv_memory_fits`` in
``kernels.yaml``, fitted by :mod:`hetsim.devices.kernel_calibration` on the published
single-kernel GEMV times of ``devices/data/gemv_points.csv``): a device listed in
``gemv_memory_borrow`` prices its GEMMs' memory roof with that curve instead of its
lender's (moved to its bandwidth by the same rule), and says so in ``borrowed_fits``
(``rtx-4090.gemm.memory<-ga102-gddr6x``). Why: the A100's curve is an HBM2e curve; on
GA102 with GDDR6X (RTX 3090 / 3090 Ti) published GEMVs of 8-537 MB reach 0.56-0.95 of
the bandwidth where the A100 curve, moved, gives 0.53-0.86 (11% too slow at the median
of 15 kernels, every one pessimistic but one): a GDDR part with 82-128 SMs keeps enough
bytes in flight for its ~1 TB/s at lower occupancy than an HBM part needs for 2 TB/s (the
same split shows in STREAM-style read sweeps: te42kyfo/gpu-benches ``gpu-stream``,
L40 and A40 reach 97% of their read rate at 25% and 46% occupancy, A100-40GB at ~95%).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml

from hetsim.devices.catalogue import device_spec
from hetsim.devices.power import cap_ratio
from hetsim.devices.precision import DEQUANT_OPS_PER_WEIGHT, Precision
from hetsim.devices.spec import DeviceSpec, EfficiencyCurve
from hetsim.devices.sustained import DEFAULT_GPU_CLOCKS, borrowed_ratio, clock_ratio


def _yaml_load(text: str) -> Any:
    """``yaml.safe_load`` with libyaml's parser when present (same objects, ~10x faster)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


KERNELS_FILE = Path(__file__).resolve().parent / "kernels.yaml"
KernelClass = Literal["gemm", "attention_prefill", "attention_decode", "elementwise"]
KERNEL_CLASSES: tuple[KernelClass, ...] = (
    "gemm", "attention_prefill", "attention_decode", "elementwise",
)  # fmt: skip
ELEMENTWISE_OPS = ("norm", "rotary", "activation", "add", "embedding", "sampling")
FitKind = Literal["calibrated", "borrowed", "uncalibrated"]


def smooth_max(a: Any, b: Any, p: float) -> Any:
    """``(a^p + b^p)^(1/p)``: the larger of ``a`` and ``b`` when they differ a lot,
    ``2^(1/p)`` times it where they meet (works on floats and numpy arrays)."""
    big = np.maximum(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        small = np.where(big > 0, np.minimum(a, b) / np.where(big > 0, big, 1.0), 0.0)
    return big * (1.0 + small**p) ** (1.0 / p)


@dataclass(frozen=True)
class GemmFit:
    """Efficiencies of GEMMs on one device (fractions of peak FLOP/s and bandwidth).
    ``format_compute_scale``: per math format other than the fitted fp16, the share of
    the fitted compute efficiency that format's GEMMs reach of *their* peak (fitted on
    that format's microbenchmarks; 1 where none)."""

    compute: EfficiencyCurve  # over FLOPs
    memory: EfficiencyCurve  # over bytes
    sharpness: float = 4.0
    floor_s: float = 0.0
    format_compute_scale: dict[str, float] = field(default_factory=dict)
    #: factor on the compute roof of formats without a ``format_compute_scale`` of their
    #: own: the device's clock regime (:mod:`hetsim.devices.sustained`; 1 = the fits' boost)
    compute_clock: float = 1.0


@dataclass(frozen=True)
class AttentionPrefillFit:
    """Efficiencies of flash-style prefill attention on one device."""

    compute: EfficiencyCurve  # over FLOPs
    memory_max_eff: float = 0.8
    sharpness: float = 4.0
    floor_s: float = 0.0
    self_factor: float = 0.5  # work per query-key pair inside a chunk's own causal block
    #: factor on the compute roof: the clock regime (as :attr:`GemmFit.compute_clock`)
    compute_clock: float = 1.0


@dataclass(frozen=True)
class AttentionDecodeFit:
    """Efficiency of paged decode attention: KV bytes over bandwidth, plus per sequence."""

    memory: EfficiencyCurve  # over bytes
    per_seq_s: float = 0.0
    floor_s: float = 0.0


@dataclass(frozen=True)
class ElementwiseFit:
    """Bandwidth-bound kernels: a shared size curve, a peak efficiency per op kind."""

    memory: EfficiencyCurve  # over bytes (its max_eff is the default op's)
    op_max_eff: dict[str, float] = field(default_factory=dict)
    floor_s: float = 0.0

    def max_eff(self, op: str) -> float:
        """Peak efficiency of op kind ``op`` (the curve's own when not fitted apart)."""
        return self.op_max_eff.get(op, self.memory.max_eff)


@dataclass(frozen=True)
class KernelFits:
    """The four kernel classes' fits of one device, with where they come from."""

    gemm: GemmFit
    attention_prefill: AttentionPrefillFit
    attention_decode: AttentionDecodeFit
    elementwise: ElementwiseFit
    source: str = ""
    #: per class: the device whose measurements it was fitted on
    fitted_on: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KernelFitRef:
    """The fits a device uses, and how far to trust them."""

    device: str
    fits: KernelFits
    kind: FitKind
    #: per kernel class: the device whose measurements it was fitted on ("" if none)
    fitted_on: dict[str, str]
    #: per GEMM format with a ``format_compute_scale``: the device whose microbenchmarks
    #: it was fitted on
    format_scale_on: dict[str, str] = field(default_factory=dict)
    #: the factor on compute roofs of the run's clock regime (:mod:`hetsim.devices.sustained`)
    clock_ratio: float = 1.0
    #: the GEMV memory fit (``gemv_memory_fits``) whose curve replaces the GEMM memory
    #: curve of the lender ("" if none)
    gemv_memory_on: str = ""

    def borrowed_extras(self, formats: tuple[str, ...] = ()) -> list[str]:
        """Corrections taken from another device's measurement, for ``borrowed_fits``:
        the GEMV memory curve (when one is used), the sustained ratio (when applied) and
        the ``format_compute_scale`` of each GEMM math format in ``formats``."""
        out = []
        if self.gemv_memory_on:
            out.append(f"{self.device}.gemm.memory<-{self.gemv_memory_on}")
        if self.clock_ratio != 1.0:
            lent = borrowed_ratio(self.device)
            if lent:
                out.append(lent)
        for fmt in formats:
            origin = self.format_scale_on.get(fmt, "")
            if origin and origin != self.device:
                out.append(f"{self.device}.gemm.{fmt}_scale<-{origin}")
        return out

    def class_kind(self, cls: str) -> FitKind:
        """calibrated (fitted on this device), borrowed, or uncalibrated, per class."""
        origin = self.fitted_on.get(cls, "")
        if not origin:
            return "uncalibrated"
        return "calibrated" if origin == self.device else "borrowed"


@dataclass(frozen=True)
class LaunchModel:
    """Host-side cost of launching kernels (eager mode) or graphs."""

    cpu_launch_s: float = 0.0
    cuda_graphs: bool = True
    graph_launch_s: float = 0.0

    def kernel_s(self, gpu_s: Any) -> Any:
        """Wall time of a kernel of GPU time ``gpu_s`` in a launched sequence."""
        return gpu_s if self.cuda_graphs else np.maximum(gpu_s, self.cpu_launch_s)


# ---- the kernel time functions (numpy-vectorised over any argument) ---------------------
def gemm_time_s(
    spec: DeviceSpec,
    fit: GemmFit,
    m: Any,
    n: Any,
    k: Any,
    precision: Precision,
    out_bytes: float | None = None,
) -> Any:
    """GPU time of an ``(m x k) @ (k x n)`` GEMM with weights ``k x n`` (module doc).
    With ``weight_dequant: materialize`` this is the GEMM on the dequantised copy; the
    copy's own kernel is :func:`dequant_kernel_time_s`. ``out_bytes``: bytes per output
    element (default: the activations'; a 16-bit output of FP8 inputs passes 2)."""
    precision = precision.gemm_precision()
    m = np.asarray(m, dtype=float)
    flops = 2.0 * m * n * k
    a_bytes, w_bits = precision.activation_bytes, precision.weight_bits
    if out_bytes is None:
        nbytes = (m * k + m * n) * a_bytes + k * n * w_bits / 8.0
    else:
        nbytes = m * k * a_bytes + m * n * out_bytes + k * n * w_bits / 8.0
    math = precision.math_dtype()
    # a format measured on its own (FP8: K03, a sustained measurement) takes its own
    # scale; the others run at the fits' rate times the clock regime's factor
    peak = spec.peak(math) * fit.format_compute_scale.get(math, fit.compute_clock)
    if spec.power_cap_w is not None and math in fit.format_compute_scale:
        peak *= cap_ratio(spec)  # a power cap slows a format measured on its own too
    t_c = np.where(flops > 0, flops / (peak * fit.compute.array(flops)), 0.0)
    t_m = nbytes / (spec.memory_bandwidth_Bps * fit.memory.array(nbytes))
    t = smooth_max(t_c, t_m, fit.sharpness)
    if precision.weight_only:
        vector = spec.peak_flops.get("fp32", peak / 16.0)
        t = smooth_max(t, DEQUANT_OPS_PER_WEIGHT * k * n / vector, fit.sharpness)
    return np.where(m > 0, fit.floor_s + t, 0.0)


def attention_prefill_time_s(
    spec: DeviceSpec,
    fit: AttentionPrefillFit,
    cross_units: Any,
    self_units: Any,
    new_tokens: Any,
    ctx_tokens: Any,
    heads: float,
    kv_heads: float,
    head_dim: float,
    precision: Precision,
) -> Any:
    """GPU time of causal prefill attention of chunks of ``q_i`` new tokens on ``c_i``
    cached ones: ``cross_units = sum q_i c_i``, ``self_units = sum q_i^2``,
    ``new_tokens = sum q_i``, ``ctx_tokens = sum c_i``; ``heads`` query heads and
    ``kv_heads`` KV heads of ``head_dim``."""
    units = np.asarray(cross_units, dtype=float) + fit.self_factor * np.asarray(
        self_units, dtype=float
    )
    flops = 4.0 * heads * head_dim * units
    a, kv = precision.activation_bytes, precision.kv_bytes
    q = np.asarray(new_tokens, dtype=float)
    nbytes = 2.0 * q * heads * head_dim * a + 2.0 * (q + ctx_tokens) * kv_heads * head_dim * kv
    peak = spec.peak(precision.activations if precision.activations != "int8" else "fp16")
    peak *= fit.compute_clock
    t_c = np.where(flops > 0, flops / (peak * fit.compute.array(flops)), 0.0)
    t_m = nbytes / (spec.memory_bandwidth_Bps * fit.memory_max_eff)
    return np.where(units > 0, fit.floor_s + smooth_max(t_c, t_m, fit.sharpness), 0.0)


def attention_decode_time_s(
    spec: DeviceSpec,
    fit: AttentionDecodeFit,
    seqs: Any,
    ctx_tokens: Any,
    heads: float,
    kv_heads: float,
    head_dim: float,
    precision: Precision,
) -> Any:
    """GPU time of paged decode attention for ``seqs`` sequences reading
    ``ctx_tokens`` cached tokens in all (K and V of ``kv_heads`` heads of ``head_dim``)."""
    s = np.asarray(seqs, dtype=float)
    kv_read = 2.0 * np.asarray(ctx_tokens, dtype=float) * kv_heads * head_dim * precision.kv_bytes
    nbytes = kv_read + 2.0 * s * heads * head_dim * precision.activation_bytes
    t = nbytes / (spec.memory_bandwidth_Bps * fit.memory.array(np.maximum(nbytes, 1.0)))
    return np.where(s > 0, fit.floor_s + fit.per_seq_s * s + t, 0.0)


def elementwise_time_s(spec: DeviceSpec, fit: ElementwiseFit, nbytes: Any, op: str) -> Any:
    """GPU time of a bandwidth-bound kernel of kind ``op`` moving ``nbytes`` bytes."""
    b = np.asarray(nbytes, dtype=float)
    curve = fit.memory.array(np.maximum(b, 1.0)) * (fit.max_eff(op) / fit.memory.max_eff)
    return np.where(b > 0, fit.floor_s + b / (spec.memory_bandwidth_Bps * curve), 0.0)


#: Op kind whose fitted efficiency prices a stand-alone weight-dequantisation kernel
#: (``weight_dequant: materialize``): it streams the narrow weights in and the wide copy
#: out, one element per thread, as a residual add streams its operands; no profile of a
#: dequantisation kernel is in the calibration data.
DEQUANT_KERNEL_OP = "add"


def dequant_kernel_time_s(
    spec: DeviceSpec, fit: ElementwiseFit, n: Any, k: Any, precision: Precision
) -> Any:
    """GPU time of the stand-alone kernel that dequantises a ``k x n`` weight matrix into
    the activation format before the GEMM (``weight_dequant: materialize``; 0 otherwise):
    reads the stored weights (scales included), writes ``k n`` activation-format elements."""
    if not precision.materializes:
        return np.zeros_like(np.asarray(n, dtype=float))
    elems = np.asarray(n, dtype=float) * k
    nbytes = elems * (precision.weight_bits / 8.0 + precision.activation_bytes)
    return elementwise_time_s(spec, fit, nbytes, DEQUANT_KERNEL_OP)


# ---- where a device's fits come from -----------------------------------------------------
def _curve(raw: dict[str, Any]) -> EfficiencyCurve:
    return EfficiencyCurve(
        float(raw["max_eff"]), float(raw.get("half_size", 0.0)), float(raw.get("exponent", 1.0))
    )


def parse_fits(raw: dict[str, Any]) -> KernelFits:
    """:class:`KernelFits` from one ``fits:`` entry of ``kernels.yaml``."""
    g, ap, ad, ew = (raw[c] for c in KERNEL_CLASSES)
    return KernelFits(
        gemm=GemmFit(_curve(g["compute"]), _curve(g["memory"]), float(g["sharpness"]),
                     float(g.get("floor_s", 0.0)),
                     {str(k): float(v) for k, v in (g.get("format_compute_scale") or {}).items()}),
        attention_prefill=AttentionPrefillFit(
            _curve(ap["compute"]), float(ap["memory_max_eff"]), float(ap["sharpness"]),
            float(ap.get("floor_s", 0.0)), float(ap.get("self_factor", 0.5)),
        ),
        attention_decode=AttentionDecodeFit(
            _curve(ad["memory"]), float(ad.get("per_seq_s", 0.0)), float(ad.get("floor_s", 0.0))
        ),
        elementwise=ElementwiseFit(
            _curve(ew["memory"]), {str(k): float(v) for k, v in ew.get("op_max_eff", {}).items()},
            float(ew.get("floor_s", 0.0)),
        ),
        source=str(raw.get("source", "")),
        fitted_on={c: str(raw.get("fitted_on", {}).get(c, "")) for c in KERNEL_CLASSES},
    )  # fmt: skip


@functools.cache
def kernel_table() -> tuple[dict[str, KernelFits], dict[str, str]]:
    """``(fits by device, borrowed fit by device)`` from ``kernels.yaml``."""
    raw = _yaml_load(KERNELS_FILE.read_text(encoding="utf-8"))
    fits = {str(d): parse_fits(e) for d, e in (raw.get("fits") or {}).items()}
    borrow = {str(d): str(src) for d, src in (raw.get("borrow") or {}).items()}
    for device, src in borrow.items():
        if src not in fits:
            raise ValueError(f"kernels.yaml: borrow.{device}: {src!r} has no fits")
    return fits, borrow


#: ``kernels.yaml`` section: GEMM format scales of borrowing devices with GEMM
#: microbenchmarks of their own (written by :mod:`hetsim.devices.kernel_calibration`).
OWN_SCALES_SECTION = "borrower_format_compute_scale"


@functools.cache
def borrower_format_scales() -> dict[str, dict[str, float]]:
    """Per borrowing device: its own ``format_compute_scale`` per math format, fitted on
    its own microbenchmarks against the fit it borrows (``kernels.yaml``
    ``borrower_format_compute_scale``); these replace the lender's scales."""
    raw = _yaml_load(KERNELS_FILE.read_text(encoding="utf-8")) or {}
    out: dict[str, dict[str, float]] = {}
    for device, scales in (raw.get(OWN_SCALES_SECTION) or {}).items():
        where = f"kernels.yaml: {OWN_SCALES_SECTION}.{device}"
        if not isinstance(scales, dict) or not scales:
            raise ValueError(f"{where}: needs a scale per format")
        for fmt, v in scales.items():
            if not 0.0 < float(v) <= 1.5:
                raise ValueError(f"{where}.{fmt}: {v} is not in (0, 1.5]")
        out[str(device)] = {str(k): float(v) for k, v in scales.items()}
    return out


@functools.cache
def kernel_residuals() -> dict[str, dict[str, tuple[float, float]]]:
    """Per fitted device and kernel class: (median, 90th percentile) of the fit's
    |predicted / measured - 1| on its own measurements (``kernels.yaml`` residuals)."""
    raw = _yaml_load(KERNELS_FILE.read_text(encoding="utf-8")).get("residuals") or {}
    return {
        str(d): {str(c): (float(r["p50"]), float(r["p90"])) for c, r in classes.items()}
        for d, classes in raw.items()
    }


#: Longest prefill chunk in the attention measurements the fits come from (Vidur's legacy
#: A100 profile, chunks of 64-4,096 tokens): beyond it the attention_prefill class is
#: extrapolated, and runs that go there say so.
ATTENTION_PREFILL_FIT_MAX_TOKENS = 4096

#: Residual assumed for a kernel class with no fit behind it (uncalibrated or a class the
#: fitted device has no measurements of): the roofline's own spread is unknown, so the
#: band says so by being wide. A named constant, not a measurement.
UNCALIBRATED_RESIDUAL = (0.5, 1.0)


def residual_band(ref: KernelFitRef, shares: dict[str, float]) -> tuple[float, float]:
    """Time-weighted (p50, p90) kernel residual for kernel classes used in ``shares``
    (class -> share of GPU time); classes without a fit count as
    :data:`UNCALIBRATED_RESIDUAL`. Collectives and host overheads are not kernels and
    carry no residual here."""
    table = kernel_residuals()
    total = sum(v for c, v in shares.items() if c in KERNEL_CLASSES)
    if total <= 0:
        return (0.0, 0.0)
    p50 = p90 = 0.0
    for cls, share in shares.items():
        if cls not in KERNEL_CLASSES or share <= 0:
            continue
        origin = ref.fitted_on.get(cls, "")
        r = (
            table.get(origin, {}).get(cls, UNCALIBRATED_RESIDUAL)
            if origin
            else (UNCALIBRATED_RESIDUAL)
        )
        p50 += share / total * r[0]
        p90 += share / total * r[1]
    return (p50, p90)


def roofline_fits(spec: DeviceSpec) -> KernelFits:
    """Kernel fits derived from a device's catalogue curves (uncalibrated): the large-GEMM
    compute curve for GEMMs and attention, the STREAM memory curve for the rest."""
    compute = spec.compute_curve("fp16")
    mem = spec.memory_efficiency
    return KernelFits(
        gemm=GemmFit(compute, mem, sharpness=20.0, floor_s=spec.launch_overhead_s),
        attention_prefill=AttentionPrefillFit(
            compute, mem.max_eff, 20.0, spec.launch_overhead_s, self_factor=0.5
        ),
        attention_decode=AttentionDecodeFit(mem, 0.0, spec.launch_overhead_s),
        elementwise=ElementwiseFit(mem, {}, spec.launch_overhead_s),
        source=f"derived from {spec.name}'s catalogue curves (uncalibrated)",
    )


#: How a borrowed size curve over bytes moves to the borrowing device (module doc).
BorrowedSizeRule = Literal["latency", "bytes"]
BORROWED_SIZE_RULES: tuple[str, ...] = ("latency", "bytes")
#: Kernel classes whose size curve is over bytes (their ``memory`` curve).
BYTE_CURVE_CLASSES: tuple[KernelClass, ...] = ("gemm", "elementwise", "attention_decode")


@functools.cache
def borrowed_size_rule() -> BorrowedSizeRule:
    """``borrowed_size_curves`` of ``kernels.yaml`` (default ``latency``)."""
    raw = _yaml_load(KERNELS_FILE.read_text(encoding="utf-8")) or {}
    rule = str(raw.get("borrowed_size_curves", "latency"))
    if rule not in BORROWED_SIZE_RULES:
        raise ValueError(
            f"kernels.yaml: borrowed_size_curves: {rule!r}; valid: {', '.join(BORROWED_SIZE_RULES)}"
        )
    return rule  # type: ignore[return-value]


def moved_fits(
    fits: KernelFits,
    bandwidth_Bps: float,
    lender_bandwidth_Bps: dict[str, float],
    rule: BorrowedSizeRule = "latency",
) -> KernelFits:
    """``fits`` as used on a device of ``bandwidth_Bps``: under ``latency`` each byte-size
    curve fitted on another device (``lender_bandwidth_Bps``: that device's bandwidth,
    by device name) has its half size scaled by the bandwidth ratio; under ``bytes``,
    or for curves fitted on a device of the same bandwidth, ``fits`` unchanged."""
    if rule == "bytes":
        return fits
    changes: dict[str, Any] = {}
    for cls in BYTE_CURVE_CLASSES:
        origin = fits.fitted_on.get(cls, "")
        if not origin or lender_bandwidth_Bps.get(origin, bandwidth_Bps) == bandwidth_Bps:
            continue
        part = getattr(fits, cls)
        ratio = bandwidth_Bps / lender_bandwidth_Bps[origin]
        curve = replace(part.memory, half_size=part.memory.half_size * ratio)
        changes[cls] = replace(part, memory=curve)
    return replace(fits, **changes) if changes else fits


#: ``kernels.yaml`` sections: GEMM memory curves fitted on published GEMV kernel times
#: (written by :mod:`hetsim.devices.kernel_calibration`), and the devices that use one
#: instead of their lender's GEMM memory curve (hand-written, with reasons).
GEMV_FITS_SECTION = "gemv_memory_fits"
GEMV_BORROW_SECTION = "gemv_memory_borrow"


@dataclass(frozen=True)
class GemvMemoryFit:
    """The GEMM class's memory curve (over bytes) fitted on published single-kernel GEMV
    times of devices without operator profiles (module doc). ``bandwidth_Bps``: the
    bandwidth at which its half size is in bytes; a device of another bandwidth moves it
    as a borrowed byte curve moves (:func:`moved_fits`)."""

    memory: EfficiencyCurve
    bandwidth_Bps: float
    fitted_on: tuple[str, ...] = ()
    source: str = ""


@functools.cache
def gemv_memory_table() -> tuple[dict[str, GemvMemoryFit], dict[str, str]]:
    """``(GEMV memory fits by name, fit name by device)`` from ``kernels.yaml``; a
    device with fits of its own, or a fit name without an entry, is an error."""
    raw = _yaml_load(KERNELS_FILE.read_text(encoding="utf-8")) or {}
    out: dict[str, GemvMemoryFit] = {}
    for name, e in (raw.get(GEMV_FITS_SECTION) or {}).items():
        where = f"kernels.yaml: {GEMV_FITS_SECTION}.{name}"
        try:
            curve = _curve(e["memory"])
            bw = float(e["bandwidth_Bps"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: needs memory {{max_eff, half_size, exponent}} and "
                             f"bandwidth_Bps ({exc})") from None  # fmt: skip
        if not (0.0 < curve.max_eff <= 1.0 and bw > 0):
            raise ValueError(f"{where}: max_eff must be in (0, 1] and bandwidth_Bps > 0")
        fitted_on = tuple(str(d) for d in (e.get("fitted_on") or ()))
        out[str(name)] = GemvMemoryFit(curve, bw, fitted_on, str(e.get("source", "")))
    users = {str(d): str(n) for d, n in (raw.get(GEMV_BORROW_SECTION) or {}).items()}
    own = kernel_table()[0]
    for device, name in users.items():
        if name not in out:
            raise ValueError(f"kernels.yaml: {GEMV_BORROW_SECTION}.{device}: {name!r} has no "
                             f"entry in {GEMV_FITS_SECTION}")  # fmt: skip
        if device in own:
            raise ValueError(f"kernels.yaml: {GEMV_BORROW_SECTION}.{device}: the device has "
                             "GEMM fits of its own")  # fmt: skip
    return out, users


def gemv_memory_curve(name: str, bandwidth_Bps: float) -> EfficiencyCurve:
    """The GEMV memory fit ``name`` as used on a device of ``bandwidth_Bps`` (its half
    size moved by the ``borrowed_size_curves`` rule)."""
    fit = gemv_memory_table()[0][name]
    if borrowed_size_rule() == "bytes":
        return fit.memory
    return replace(fit.memory, half_size=fit.memory.half_size * bandwidth_Bps / fit.bandwidth_Bps)


@functools.cache
def _lender_bandwidths() -> dict[str, float]:
    """HBM bandwidth of every device some fit was measured on (catalogue figures)."""
    fits, _ = kernel_table()
    origins = {o for f in fits.values() for o in f.fitted_on.values() if o}
    return {o: device_spec(o).memory_bandwidth_Bps for o in sorted(origins)}


#: ``kernel_fits(gemv_memory=...)``: the device's GEMV memory fit where ``kernels.yaml``
#: names one (``shipped``), or the lender's GEMM memory curve regardless (``lender``).
GEMV_MEMORY_CHOICES: tuple[str, ...] = ("shipped", "lender")


@functools.cache
def _fits_on(
    device: str, lender: str, bandwidth_Bps: float, ratio: float = 1.0, gemv_fit: bool = True
) -> KernelFits:
    """``lender``'s fits moved to ``device``'s bandwidth, with ``device``'s GEMV memory
    curve where ``gemv_memory_borrow`` names one (:func:`gemv_memory_table`), its own
    format scales where it has microbenchmarks of its own (:func:`borrower_format_scales`), and
    the compute roofs of GEMM and prefill attention at the clock factor ``ratio``."""
    fits = moved_fits(
        kernel_table()[0][lender], bandwidth_Bps, _lender_bandwidths(), borrowed_size_rule()
    )
    gemv = gemv_memory_table()[1].get(device) if gemv_fit else None
    if gemv:
        curve = gemv_memory_curve(gemv, bandwidth_Bps)
        fits = replace(fits, gemm=replace(fits.gemm, memory=curve))
    own = borrower_format_scales().get(device) if device != lender else None
    if own:
        scales = {**fits.gemm.format_compute_scale, **own}
        fits = replace(fits, gemm=replace(fits.gemm, format_compute_scale=scales))
    if ratio != 1.0:
        fits = replace(
            fits,
            gemm=replace(fits.gemm, compute_clock=ratio),
            attention_prefill=replace(fits.attention_prefill, compute_clock=ratio),
        )
    return fits


def kernel_fits(
    spec: DeviceSpec,
    clocks: str = DEFAULT_GPU_CLOCKS,
    sustained_override: float | None = None,
    gemv_memory: str = "shipped",
) -> KernelFitRef:
    """The kernel fits ``spec`` uses: its own, a named device's, or derived (module doc),
    with compute roofs at the clock regime ``clocks`` (:mod:`hetsim.devices.sustained`:
    the device's sustained ratio, or ``sustained_override``, when ``sustained``; derived
    fits come from the catalogue's sustained curves and take no ratio).
    Classes fitted on another device have their byte-size curves moved to ``spec``'s
    bandwidth (:func:`moved_fits`); a borrowing device's GEMM memory curve is its GEMV
    memory fit (``gemv_memory_borrow``) unless ``gemv_memory`` is ``lender``."""
    if gemv_memory not in GEMV_MEMORY_CHOICES:
        raise ValueError(f"gemv_memory: {gemv_memory!r}; valid: {', '.join(GEMV_MEMORY_CHOICES)}")
    fits, borrow = kernel_table()
    cap = cap_ratio(spec)  # a power cap's factor on compute roofs (devices/power.py)
    if spec.name in fits:
        ratio = clock_ratio(spec.name, clocks, sustained_override)
        ratio = ratio * cap if cap != 1.0 else ratio
        own = _fits_on(spec.name, spec.name, spec.memory_bandwidth_Bps, ratio)
        scale_on = dict.fromkeys(own.gemm.format_compute_scale, spec.name)
        return KernelFitRef(spec.name, own, _overall(spec.name, own.fitted_on), own.fitted_on,
                            scale_on, ratio)  # fmt: skip
    if spec.name in borrow:
        ratio = clock_ratio(spec.name, clocks, sustained_override)
        ratio = ratio * cap if cap != 1.0 else ratio
        lender = borrow[spec.name]
        use_gemv = gemv_memory == "shipped"
        lent = _fits_on(spec.name, lender, spec.memory_bandwidth_Bps, ratio, use_gemv)
        mine = borrower_format_scales().get(spec.name, {})
        scale_on = {f: spec.name if f in mine else lender for f in lent.gemm.format_compute_scale}
        gemv = gemv_memory_table()[1].get(spec.name, "") if use_gemv else ""
        return KernelFitRef(spec.name, lent, "borrowed", lent.fitted_on, scale_on, ratio, gemv)
    clock_ratio(spec.name, clocks, sustained_override)  # a bad regime is still an error
    derived = roofline_fits(spec)
    if cap != 1.0:  # derived fits take no sustained ratio, but a cap still slows them
        derived = replace(
            derived,
            gemm=replace(derived.gemm, compute_clock=cap),
            attention_prefill=replace(derived.attention_prefill, compute_clock=cap),
        )
        return KernelFitRef(spec.name, derived, "uncalibrated", {}, clock_ratio=cap)
    return KernelFitRef(spec.name, derived, "uncalibrated", {})


def _overall(device: str, fitted_on: dict[str, str]) -> FitKind:
    origins = set(fitted_on.values())
    return "calibrated" if origins == {device} else "borrowed"
