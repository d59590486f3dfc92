"""The sustained tensor-core ratio of a device: its tensor-core throughput under sustained
load (the clock its power limit allows) as a share of the short-run, boost-clock
throughput the kernel fits and attention profiles were measured at.

The values are the ``sustained_matmul_ratio:`` section of ``devices/kernels.yaml``, one
per device with its source (measured MSMF over MAMF; see the section's comment). A device
not listed gets 1.0, the fits' own rates. It is a device property, so it lives in the cost
layer; today only the training step cost applies it (scaling the compute roof of GEMMs and
attention, ``workloads/training/step_cost.py``); inference pricing does not yet.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import yaml

from hetsim.devices.kernels import KERNELS_FILE

SECTION = "sustained_matmul_ratio"


@dataclass(frozen=True)
class SustainedRatio:
    """One device's sustained tensor-core ratio and where it comes from."""

    ratio: float
    source: str


@functools.cache
def sustained_table() -> dict[str, SustainedRatio]:
    """Every listed device's ratio; a bad entry is one error naming the file and field."""
    raw = yaml.safe_load(KERNELS_FILE.read_text(encoding="utf-8")) or {}
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
        out[str(device)] = SustainedRatio(ratio, source)
    return out


def sustained_ratio(device: str) -> float:
    """The sustained tensor-core ratio of ``device`` (1.0 where none is listed)."""
    entry = sustained_table().get(device)
    return entry.ratio if entry is not None else 1.0
