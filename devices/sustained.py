"""The clock a device's compute-bound kernels run at: sustained (power-saturated) or boost.

**What the fits measured.** The GEMM kernel fits come from Vidur's operator profiles:
per configuration, one untimed forward, then the transformer block repeated 20 times
under the profiler, median of the 20 (``vidur-profiles/SOURCE.md``); each configuration
builds its own block first, so the GPU does not compute back to back across them (a
reading of the profiler's structure; the files record no clocks). The attention profiles are
short kernel benchmarks (2 warm-ups, 5 timed). Both are short bursts from a cool chip:
boost-clock figures. Corroboration: the H100 GEMM fit's asymptote, 0.753 x 989 = 745
TFLOP/s, is above every sustained GH100 BF16 rate measured (698.6-702.9, below).

**What the ratio is.** Bekman's mamf-finder reports two headlines per GPU
(stas00/ml-engineering ``compute/accelerator/benchmarks/README.md``): MAMF, the best
rate of short bursts timed after an idle pause (the board far below its power limit,
~150-300 W, the clock at boost), and MSMF, the rate after a thermal soak on shapes large
enough to hold the board at its power limit, which that README offers as the rate dense
matmuls run one after another reach. MSMF / MAMF is therefore the share of the burst
rate that compute-bound kernels keep once they run back to back: a power-limit effect of
compute-bound kernels on a hot chip, not of a domain. It is a property of the device
under a load, so it is decided here, once, and applied at kernel depth
(:func:`hetsim.devices.kernels.kernel_fits`) in every domain that prices GPU kernels.

**What decides it** (:data:`GpuClocks`, a named per-run choice, default ``sustained``):
``sustained`` when the device runs compute-bound kernels back to back long enough to soak
(training steps, serving or queueing under continuous load, MoE decode loops);
``boost`` for a device that computes in isolated bursts after idling (a single request
on an otherwise idle GPU). The simulator does not model the chip's temperature or a
power-versus-duty-cycle curve (no measurement of either is in the calibration data), so
the regime is the run's choice, not derived from its utilisation. The ratio scales only
compute roofs (GEMM and prefill attention): memory-bound kernels draw too little power to
meet the limit.

**Formats.** The ratio was measured on BF16 (FP16 runs on the same tensor-core path). A
format whose GEMMs carry a ``format_compute_scale`` fitted to their own microbenchmarks is
priced by that scale instead: FP8's comes from Azure's cuBLASLt FP8 GEMMs after 10,000
back-to-back warm-ups of power-saturating square shapes (calibration K03), itself a
sustained measurement, so the ratio is not applied on top, and ``boost`` keeps it too (no
FP8 burst measurement is in the calibration data).

The values are the ``sustained_matmul_ratio:`` section of ``devices/kernels.yaml``, one per
device with its source; ``measured_on`` names the device whose measurement a device borrows
(runs list it in ``borrowed_fits``). A device not listed gets 1.0 (no measurement).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import yaml

from hetsim.devices.spec import DeviceSpec

#: ``devices/kernels.yaml`` (read here directly: the kernel module imports this one)
KERNELS_YAML = Path(__file__).resolve().parent / "kernels.yaml"
SECTION = "sustained_matmul_ratio"
#: The clock regime of a run's compute-bound kernels (module doc).
GpuClocks = Literal["sustained", "boost"]
GPU_CLOCKS: tuple[str, ...] = ("sustained", "boost")
#: Default regime of every run (module doc: the simulator prices devices under load).
DEFAULT_GPU_CLOCKS: GpuClocks = "sustained"
#: The description of the ``gpu_clocks`` field of every workload that prices GPU kernels
#: (serving, queueing LLM demand, MoE, training, training-parallel, training-pipeline):
#: one text, so the scenario reference says the same thing in each.
GPU_CLOCKS_DESCRIPTION = (
    "clock regime of compute-bound GPU kernels: sustained (GPUs under back-to-back load: "
    "the device's sustained_matmul_ratio on the compute roofs of BF16/FP16 GEMMs and "
    "flash attention, prefill or training; FP8 GEMMs keep their own K03 scale) or boost "
    "(isolated bursts on idle GPUs: the kernel fits' rates); devices/sustained.py"
)


@dataclass(frozen=True)
class SustainedRatio:
    """One device's sustained tensor-core ratio, where it comes from, and the device it
    was measured on (the device itself unless borrowed)."""

    ratio: float
    source: str
    measured_on: str


@functools.cache
def sustained_table() -> dict[str, SustainedRatio]:
    """Every listed device's ratio; a bad entry is one error naming the file and field."""
    # libyaml's parser when present (the same objects as safe_load, ~10x faster)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    raw = yaml.load(KERNELS_YAML.read_text(encoding="utf-8"), Loader=loader) or {}
    out: dict[str, SustainedRatio] = {}
    for device, entry in (raw.get(SECTION) or {}).items():
        where = f"kernels.yaml: {SECTION}.{device}"
        if not isinstance(entry, dict) or "ratio" not in entry:
            raise ValueError(f"{where}: needs a ratio and a source")
        ratio = float(entry["ratio"])
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"{where}.ratio: {ratio} is not in (0, 1]")
        source = str(entry.get("source", "")).strip()
        if not source:
            raise ValueError(f"{where}.source: empty (every ratio names its measurement)")
        measured_on = str(entry.get("measured_on", device))
        out[str(device)] = SustainedRatio(ratio, source, measured_on)
    return out


def sustained_ratio(device: str) -> float:
    """The sustained tensor-core ratio of ``device`` (1.0 where none is listed)."""
    entry = sustained_table().get(device)
    return entry.ratio if entry is not None else 1.0


def clock_ratio(
    device: str, clocks: str = DEFAULT_GPU_CLOCKS, override: float | None = None
) -> float:
    """The factor on ``device``'s compute roofs in regime ``clocks``: its sustained ratio
    (or ``override``, a scenario's own value) when sustained, 1.0 at boost."""
    if clocks not in GPU_CLOCKS:
        raise ValueError(f"gpu_clocks: {clocks!r}; valid: {', '.join(GPU_CLOCKS)}")
    if clocks == "boost":
        return 1.0
    return sustained_ratio(device) if override is None else float(override)


def borrowed_ratio(device: str) -> str:
    """``"<device>.sustained<-<lender>"`` when ``device``'s ratio was measured on another
    device, else ``""`` (for the runs' ``borrowed_fits``)."""
    entry = sustained_table().get(device)
    if entry is None or entry.measured_on == device:
        return ""
    return f"{device}.sustained<-{entry.measured_on}"


def clocked_spec(spec: DeviceSpec, ratio: float) -> DeviceSpec:
    """``spec`` with every compute peak scaled by ``ratio`` (bandwidth unchanged), for
    kernels priced from a spec rather than a kernel fit (published attention profiles).
    ``ratio`` is the fits' clock ratio, which already holds a power cap's factor, so the
    returned spec carries no cap (the roofline would apply it again)."""
    if ratio == 1.0 and spec.power_cap_w is None:
        return spec
    return replace(
        spec, peak_flops={k: v * ratio for k, v in spec.peak_flops.items()}, power_cap_w=None
    )
