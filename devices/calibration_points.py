"""Measured points that the calibrated catalogue must reproduce, and how to predict each.

The headline ``value`` of every row of ``devices/data/microbenchmarks.csv`` is predicted
as set up in :data:`HEADLINES`; the further sizes and devices written in the rows'
``settings`` text are transcribed into :data:`SWEEPS` (values in SI units, row id kept).
:data:`ANCHORS` are README A.3's derived 1 KiB latency floors, fitted at low weight.
:data:`VIDUR_PLATEAUS` are Vidur's small-message all-reduce times at 2, 4 and 8 GPUs.
:data:`UNMODELLED` lists the measurements the cost model cannot express, with the
reason. :data:`FITS` says which parameters each fit frees. Fitting: :mod:`devices.calibration`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

DATA_FILE = Path(__file__).resolve().parent / "data" / "microbenchmarks.csv"
UNITS = {"GB/s": 1e9, "TB/s": 1e12, "TFLOP/s": 1e12, "GB": 1e9}
MIB, GIB = 2**20, 2**30
STREAM_ARRAY_BYTES = 2**25 * 8  # BabelStream default array: 2^25 float64 (assumed)
BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}
ANCHOR_WEIGHT = 0.1  # weight of a derived latency floor in a fit (see ANCHORS)
DISPLAY = {"gemm": (1e12, "TFLOP/s"), "model_state": (1e9, "GB")}  # others: GB/s


@dataclasses.dataclass(frozen=True)
class Point:
    """One measured value that the shipped catalogue must reproduce.

    ``kind``: ``gemm`` (size = square edge N), ``stream`` (size = bytes moved; ``ranks``
    = sockets), ``copy`` (bytes), ``collective`` (message bytes; ``ranks`` = n),
    ``model_state`` (size = parameter count). ``fit`` names the fit this point feeds
    ("" for a validation-only point). ``value`` is in SI units (FLOP/s, B/s, bytes).
    """

    row: str
    label: str
    kind: str
    target: str
    size: float
    value: float = 0.0
    fit: str = ""
    dtype: str = ""
    ranks: int = 1
    algorithm: str = "ring"
    metric: str = "busbw"
    weight: float = 1.0
    zero_stage: int = 0


def _gemm(row: str, label: str, dev: str, n: int, dtype: str, fit: str, v: float = 0.0) -> Point:
    return Point(row, label, "gemm", dev, n, v, fit, dtype=dtype)


def _stream(row: str, label: str, dev: str, nbytes: int, fit: str, v: float = 0.0) -> Point:
    sockets = 2 if row == "K05" else 1  # K05 measured two sockets of one node
    return Point(row, label, "stream", dev, nbytes, v, fit, ranks=sockets)


def _copy(row: str, label: str, link: str, nbytes: int, fit: str, v: float = 0.0) -> Point:
    return Point(row, label, "copy", link, nbytes, v, fit)


def _coll(
    row: str,
    label: str,
    fab: str,
    n: int,
    nbytes: int,
    fit: str,
    v: float = 0.0,
    algorithm: str = "ring",
    metric: str = "busbw",
    weight: float = 1.0,
) -> Point:
    return Point(
        row,
        label,
        "collective",
        fab,
        nbytes,
        v,
        fit,
        ranks=n,
        algorithm=algorithm,
        metric=metric,
        weight=weight,
    )


def _state(row: str, label: str, stage: int, v: float = 0.0) -> Point:
    return Point(row, label, "model_state", "", 7.5e9, v, ranks=64, zero_stage=stage)


TRIAD, PAIR = 3 * STREAM_ARRAY_BYTES, 2 * STREAM_ARRAY_BYTES  # bytes moved per kernel
HEADLINES: dict[str, Point] = {  # how to predict each CSV row's `value`
    "M01": _state("M01", "7.5B params, 64 ranks, no sharding", 0),
    "M02": _state("M02", "7.5B params, 64 ranks, ZeRO-3", 3),
    "C01": _coll(
        "C01", "A100 ring all-reduce 8 GiB", "a100-nvswitch", 8, 8 * GIB, "a100-nvswitch-ring"
    ),
    "C02": _coll(
        "C02",
        "H100 NVLS all-reduce 8 GiB",
        "h100-nvswitch",
        8,
        8 * GIB,
        "h100-nvswitch-nvls",
        algorithm="nvls",
    ),
    "C03": _coll("C03", "MI300X all-reduce 8 GiB", "mi300x-if", 8, 8 * GIB, "mi300x-if-ring"),
    "C04": _copy("C04", "NVLink4 P2P (40 MB assumed)", "nvlink4", 40_000_000, "nvlink4-p2p"),
    "C05": _coll(
        "C05",
        "4x8 H100 over IB NDR (8 GiB assumed)",
        "h100-ib-ndr-multinode",
        32,
        8 * GIB,
        "h100-ib-multinode-ring",
    ),
    "C06": _coll(
        "C06",
        "8x H800 all-reduce (NVLS, 8 GiB assumed)",
        "h800-nvlink",
        8,
        8 * GIB,
        "h800-nvlink-nvls",
        algorithm="nvls",
    ),
    "C07": _coll(
        "C07",
        "8x 910B all-reduce algbw (1 GiB assumed)",
        "ascend-910b-hccs",
        8,
        GIB,
        "ascend-910b-hccs-ring",
        metric="algbw",
    ),
    "H01": _copy("H01", "Gen4 H2D 512 MiB", "pcie4-x16", 512 * MIB, "pcie4-h2d"),
    "H02": _copy("H02", "Gen5 H2D (512 MiB assumed)", "pcie5-x16", 512 * MIB, "pcie5-h2d"),
    "H03": _copy("H03", "Gen3 H2D 32 MiB", "pcie3-x16", 32 * MIB, "pcie3-h2d"),
    "H04": _copy("H04", "Gen5 H2D ND H100 v5 (512 MiB)", "pcie5-x16", 512 * MIB, "pcie5-h2d"),
    "K01": _stream("K01", "H100 triad", "h100-sxm", TRIAD, "hbm-h100"),
    "K02": _gemm("K02", "A100 FP16 16384^3", "a100-80gb", 16384, "fp16", "gemm-a100-fp16"),
    "K03": _gemm("K03", "H100 FP8 8192^3", "h100-sxm", 8192, "fp8", "gemm-h100-fp8"),
    "K04": _gemm(
        "K04", "910B BF16 (8192^3 assumed)", "ascend-910b", 8192, "bf16", "gemm-910b-bf16"
    ),
    "K05": _stream("K05", "2x Xeon 8470 triad", "xeon-8480", TRIAD, "dram-xeon"),
}

SWEEPS: list[Point] = [  # transcribed from the settings column (value in SI units)
    _state("M02", "ZeRO-1 (settings)", 1, 31.4e9),
    _state("M02", "ZeRO-2 (settings)", 2, 16.6e9),
    _coll("C01", "A100 ring 1 GiB", "a100-nvswitch", 8, GIB, "a100-nvswitch-ring", 228.10e9),
    _coll("C01", "A100 ring 16 MiB", "a100-nvswitch", 8, 16 * MIB, "a100-nvswitch-ring", 109.22e9),
    _coll("C01", "A100 ring 1 MiB", "a100-nvswitch", 8, MIB, "a100-nvswitch-ring", 36.22e9),
    _coll(
        "C02",
        "H100 NVLS 1 GiB",
        "h100-nvswitch",
        8,
        GIB,
        "h100-nvswitch-nvls",
        466.35e9,
        algorithm="nvls",
    ),
    _coll(
        "C02",
        "H100 NVLS 16 MiB",
        "h100-nvswitch",
        8,
        16 * MIB,
        "h100-nvswitch-nvls",
        234.45e9,
        algorithm="nvls",
    ),
    _coll(
        "C02",
        "H100 NVLS 1 MiB",
        "h100-nvswitch",
        8,
        MIB,
        "h100-nvswitch-nvls",
        43.70e9,
        algorithm="nvls",
    ),
    _coll(
        "C02",
        "H100 ring ~370 (nccl-tests#212; 8 GiB assumed)",
        "h100-nvswitch",
        8,
        8 * GIB,
        "h100-nvswitch-ring",
        370e9,
    ),
    _coll("C03", "MI300X 1 GiB", "mi300x-if", 8, GIB, "mi300x-if-ring", 313.92e9),
    _coll(
        "C05",
        "single node 8x H100 NVLS 8 GiB (validation)",
        "h100-nvswitch",
        8,
        8 * GIB,
        "",
        479.72e9,
        algorithm="nvls",
    ),
    _coll(
        "C07",
        "2x 910B algbw",
        "ascend-910b-hccs",
        2,
        GIB,
        "ascend-910b-hccs-ring",
        18e9,
        metric="algbw",
    ),
    _coll(
        "C07", "8x A800 algbw", "a800-nvswitch", 8, GIB, "a800-nvswitch-ring", 89e9, metric="algbw"
    ),
    _coll(
        "C07", "2x A800 algbw", "a800-nvswitch", 2, GIB, "a800-nvswitch-ring", 143e9, metric="algbw"
    ),
    _copy("H01", "Gen4 H2D 1 GiB", "pcie4-x16", GIB, "pcie4-h2d", 25.13e9),
    _copy("H04", "Gen4 H2D ND A100 v4 (512 MiB)", "pcie4-x16", 512 * MIB, "pcie4-h2d", 26.28e9),
    _copy("H04", "Gen5 H2D ND H200 v5 (512 MiB)", "pcie5-x16", 512 * MIB, "pcie5-h2d", 55e9),
    _stream("K01", "H100 copy (validation)", "h100-sxm", PAIR, "", 2.90e12),
    _stream("K01", "H100 dot (validation)", "h100-sxm", PAIR, "", 3.18e12),
    _stream("K01", "A100-80GB triad", "a100-80gb", TRIAD, "hbm-a100", 1.70e12),
    _stream("K01", "H200 triad", "h200", TRIAD, "hbm-h200", 4.18e12),
    _stream("K01", "MI300X triad", "mi300x", TRIAD, "hbm-mi300x", 4.10e12),
    _gemm("K02", "A100 FP16 8192^3", "a100-80gb", 8192, "fp16", "gemm-a100-fp16", 253.7e12),
    _gemm("K02", "A100 FP16 4096^3", "a100-80gb", 4096, "fp16", "gemm-a100-fp16", 228.0e12),
    _gemm("K02", "A100 FP16 1024^3", "a100-80gb", 1024, "fp16", "gemm-a100-fp16", 119.4e12),
    _gemm("K03", "H100 FP8 32768^3", "h100-sxm", 32768, "fp8", "gemm-h100-fp8", 1382.2e12),
    _gemm("K03", "H100 FP8 4096^3", "h100-sxm", 4096, "fp8", "gemm-h100-fp8", 1216.9e12),
    _gemm("K03", "H200 FP8 8192^3", "h200", 8192, "fp8", "gemm-h200-fp8", 1269.4e12),
    _gemm("K03", "MI300X FP8 8192^3", "mi300x", 8192, "fp8", "gemm-mi300x-fp8", 1222.9e12),
    _gemm("K04", "A800 BF16 (8192^3 assumed)", "a800", 8192, "bf16", "gemm-a800-bf16", 286e12),
    _gemm("K04", "A800 FP32 (8192^3 assumed)", "a800", 8192, "fp32", "gemm-a800-fp32", 19e12),
    _stream("K05", "2x Xeon 8470 copy (validation)", "xeon-8480", PAIR, "", 450.1e9),
    _stream("K05", "2x Xeon 8470 add (validation)", "xeon-8480", TRIAD, "", 485.1e9),
]

UNMODELLED: list[tuple[str, str, str]] = [  # (row, measurement, why the model omits it)
    ("K04", "910B FP32 GEMM 87 TFLOP/s", "devices.csv publishes no FP32 peak for the 910B"),
    (
        "H01",
        "Gen4 H2D 18.05 GB/s at 10 GiB, 16.50 at 20 GiB",
        "large-buffer drop: EfficiencyCurve only rises with size (needs a spec.py change)",
    ),
    (
        "H02-H04",
        "D2H 46.8, 12.89, 52, 6.27 (ND A100 v4), 55 GB/s",
        "LinkSpec is symmetric: one bandwidth per direction type, no D2H asymmetry",
    ),
    ("H02/H03", "remote-NUMA 20.5 GB/s D2H, 3.78 GB/s H2D", "NUMA placement is not modelled"),
    ("H04", "GPU-GPU read 672 GB/s", "nvbandwidth aggregate over peers; not a single link"),
]

ANCHORS: list[Point] = [  # README A.3's derived 1 KiB latency floors, see module doc
    _coll(
        "C01",
        "A100 ring 1 KiB floor (README A.3, derived)",
        "a100-nvswitch",
        8,
        1024,
        "a100-nvswitch-ring",
        0.04e9,
        weight=ANCHOR_WEIGHT,
    ),
    _coll(
        "C02",
        "H100 NVLS 1 KiB floor (README A.3, derived)",
        "h100-nvswitch",
        8,
        1024,
        "h100-nvswitch-nvls",
        0.07e9,
        algorithm="nvls",
        weight=ANCHOR_WEIGHT,
    ),
    _coll(
        "C03",
        "MI300X 1 KiB floor (README A.3, derived)",
        "mi300x-if",
        8,
        1024,
        "",
        0.04e9,
        weight=ANCHOR_WEIGHT,
    ),
]

#: Vidur's collectives sweeps (``vidur-profiles/network/{a100,h100}_dgx/all_reduce.csv``,
#: torch.distributed NCCL, Kineto kernel time, median of 11 launches then of 3 repeats):
#: rows with num_workers == devices_per_node; the 32 sizes of 2-250 KiB (2,048 B, then
#: 10,240 B in steps of 8,192 B up to 256,000 B), where the wire term is a few percent;
#: per rank count, the mean over sizes of the ``median`` column (the sweep flips between a
#: fast and a slow mode from one size to the next, so one size's median is not robust).
#: Each becomes one point at the mean size, 129,024 B, as algbw = size / mean time.
#: Recomputed from the shared copy by tests/test_collective_latency.py. The 8-GPU sweep
#: at 2 MiB (V69) and at 64 MiB (V64, V65) is validation data: no point above 250 KiB
#: enters a fit. (size bytes, {ranks: mean time s})
VIDUR_PLATEAU_BYTES = 129024
VIDUR_PLATEAU_TIMES_S: dict[str, dict[int, float]] = {
    "a100_dgx": {2: 46.906e-6, 4: 46.625e-6, 8: 45.219e-6},
    "h100_dgx": {2: 26.594e-6, 4: 39.719e-6, 8: 29.625e-6},
}
#: Vidur network folder -> (catalogue fabric, fit key, algorithm the points are fitted as)
VIDUR_FABRICS: dict[str, tuple[str, str, str]] = {
    "a100_dgx": ("a100-nvswitch", "a100-nvswitch-ring", "ring"),
    "h100_dgx": ("h100-nvswitch", "h100-nvswitch-nvls", "nvls"),
}
VIDUR_PLATEAUS: list[Point] = [
    _coll(
        "VP",
        f"{folder} {n} GPUs, 2-250 KiB mean (Vidur sweep)",
        VIDUR_FABRICS[folder][0],
        n,
        VIDUR_PLATEAU_BYTES,
        VIDUR_FABRICS[folder][1],
        VIDUR_PLATEAU_BYTES / t,
        algorithm=VIDUR_FABRICS[folder][2],
        metric="algbw",
    )
    for folder, times in VIDUR_PLATEAU_TIMES_S.items()
    for n, t in times.items()
]

FITS: dict[str, tuple[str, str | None]] = {  # key -> (mode, fit whose shape it borrows)
    "gemm-a100-fp16": ("full", None),
    "a100-nvswitch-ring": ("full", None),
    "h100-nvswitch-nvls": ("full", None),
    "gemm-h100-fp8": ("knee", "gemm-a100-fp16"),
    "gemm-h200-fp8": ("scale", "gemm-h100-fp8"),
    "gemm-mi300x-fp8": ("scale", "gemm-h100-fp8"),
    "gemm-910b-bf16": ("scale", "gemm-a100-fp16"),
    "gemm-a800-bf16": ("scale", "gemm-a100-fp16"),
    "gemm-a800-fp32": ("scale", "gemm-a100-fp16"),
    "hbm-h100": ("scale", None),
    "hbm-a100": ("scale", None),
    "hbm-h200": ("scale", None),
    "hbm-mi300x": ("scale", None),
    "dram-xeon": ("scale", None),
    "pcie3-h2d": ("scale", None),
    "pcie4-h2d": ("scale", None),
    "pcie5-h2d": ("scale", None),
    "nvlink4-p2p": ("scale", None),
    "h100-nvswitch-ring": ("scale", "a100-nvswitch-ring"),
    "a800-nvswitch-ring": ("scale", "a100-nvswitch-ring"),
    "mi300x-if-ring": ("scale", "a100-nvswitch-ring"),
    "ascend-910b-hccs-ring": ("scale", "a100-nvswitch-ring"),
    "h100-ib-multinode-ring": ("scale", "a100-nvswitch-ring"),
    "h800-nvlink-nvls": ("scale", "h100-nvswitch-nvls"),
}
"""Fit modes: ``full`` fits every parameter; ``knee`` fits max_eff and half_size with the
base's exponent (and alpha); ``scale`` fits max_eff alone with the base's shape, a GEMM
base's half_size scaled by the peak ratio (the knee at equal kernel time), or a
constant curve when there is no base."""
