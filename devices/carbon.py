"""Carbon of a run: operational (energy x grid intensity over time) and embodied
(manufacturing carbon spread over a device's service life, per device-hour).

**Operational.** The grid's carbon intensity ``I(t)`` (gCO2/kWh) is a step function of
time: a constant (``cluster.carbon.grid_intensity_g_per_kwh``, default the 2023 world
average in ``devices/carbon.yaml``) or a series read from a CSV file
(``cluster.carbon.grid_intensity_file``, :func:`read_grid_intensity`) that repeats every
``period_h`` hours. Simulated time ``t`` seconds falls at hour ``start_h + t / 3600`` of the
series. A device drawing ``P(t)`` W emits ``integral P(t) I(t) dt``; a run's summary uses
its energy over the run times the mean intensity over the run's window
(:meth:`GridIntensity.mean_g_per_kWh`), exact when the intensity is constant over the
window or the power is (the two differ only for a run whose load follows the hours of
the series). :func:`series_carbon_g` integrates a power step function exactly.

**Embodied.** A device type with a manufacturing figure (``embodied_kg`` in
``devices/carbon.yaml``, each with its source) emits ``embodied_kg x 1000 / (service_life
years x 8760)`` g per device-hour it is provisioned for the run, busy or idle;
``cluster.carbon.embodied_g_per_device_hour`` sets a type's figure. Types without one are
left out and named in ``carbon_embodied_unpriced``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from hetsim.simulator.errors import TraceError
from hetsim.simulator.limits import MAX_DURATION_H

CARBON_YAML = Path(__file__).resolve().parent / "carbon.yaml"
J_PER_KWH = 3.6e6
HOURS_PER_YEAR = 8760.0
SAMPLE_FILE = "pkg:carbon/caiso_2023-01-01.csv"
"""The shipped sample series: one day of hourly intensity of California's grid."""
COLUMNS = ("start_h", "end_h", "gco2_per_kwh")
"""Header of a grid-intensity file."""


@dataclass(frozen=True)
class CarbonTable:
    """``devices/carbon.yaml``: default grid intensity, service life, embodied kg per type."""

    grid_intensity_g_per_kwh: float
    service_life_years: float
    embodied_kg: dict[str, float]


@functools.cache
def carbon_table(path: Path = CARBON_YAML) -> CarbonTable:
    """The shipped carbon coefficients (each entry needs a value and a source)."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))

    def value(node: Any, where: str) -> float:
        if not isinstance(node, dict) or "value" not in node or "source" not in node:
            raise ValueError(f"{path.name}: {where}: needs a value and a source")
        return float(node["value"])

    return CarbonTable(
        value(raw["grid_intensity_g_per_kwh"], "grid_intensity_g_per_kwh"),
        value(raw["service_life_years"], "service_life_years"),
        {k: value(v, f"embodied_kg.{k}") for k, v in raw.get("embodied_kg", {}).items()},
    )


@dataclass(frozen=True)
class GridIntensity:
    """Grid carbon intensity over time: ``value[k]`` gCO2/kWh from hour ``start_h[k]``
    to ``start_h[k + 1]`` (the last to ``period_h``), repeating every ``period_h`` hours."""

    start_h: np.ndarray
    value: np.ndarray
    period_h: float
    source: str

    @classmethod
    def constant(cls, g_per_kWh: float, source: str = "constant") -> GridIntensity:
        """The same intensity at every hour."""
        return cls(np.zeros(1), np.array([float(g_per_kWh)]), 1.0, source)

    def _cumulative(self, h: float) -> float:
        """``integral_0^h I`` in (g/kWh) x h, ``h >= 0``."""
        ends = np.append(self.start_h[1:], self.period_h)
        widths = ends - self.start_h
        per_period = float(np.dot(widths, self.value))
        n = math.floor(h / self.period_h)
        r = h - n * self.period_h
        k = int(np.searchsorted(self.start_h, r, side="right")) - 1
        done = float(np.dot(widths[:k], self.value[:k]))
        return n * per_period + done + float(self.value[k]) * (r - float(self.start_h[k]))

    def integral(self, t0_h: float, t1_h: float) -> float:
        """``integral_{t0_h}^{t1_h} I(h) dh``, (gCO2/kWh) x hours."""
        return self._cumulative(t1_h) - self._cumulative(t0_h)

    def mean_g_per_kWh(self, t0_h: float, t1_h: float) -> float:
        """Mean intensity over [t0_h, t1_h] (the intensity at ``t0_h`` when they are equal)."""
        if len(self.value) == 1:
            return float(self.value[0])
        if t1_h > t0_h:
            return self.integral(t0_h, t1_h) / (t1_h - t0_h)
        r = t0_h - math.floor(t0_h / self.period_h) * self.period_h
        return float(self.value[int(np.searchsorted(self.start_h, r, side="right")) - 1])


def read_grid_intensity(path: Path) -> GridIntensity:
    """A grid-intensity CSV file: header ``start_h,end_h,gco2_per_kwh``, one row per
    interval of hours, contiguous from 0 (each ``start_h`` is the previous ``end_h``),
    intensity >= 0. The series repeats every last ``end_h`` hours. Lines starting with
    ``#`` are comments. A bad line raises :class:`TraceError` naming the file and line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise ValueError(f"{path}: cannot read the grid-intensity file ({why})") from None
    rows = [(n, s.strip()) for n, s in enumerate(lines, 1) if s.strip() and not s.startswith("#")]
    if not rows or tuple(c.strip() for c in rows[0][1].split(",")) != COLUMNS:
        line = rows[0][0] if rows else 1
        raise TraceError(path, line, "header", f"the header must be {','.join(COLUMNS)}")
    starts, values, end = [], [], 0.0
    for n, text in rows[1:]:
        cells = [c.strip() for c in text.split(",")]
        if len(cells) != len(COLUMNS):
            raise TraceError(path, n, "-", f"{len(cells)} fields, expected {len(COLUMNS)}")
        nums = []
        for col, cell in zip(COLUMNS, cells, strict=True):
            try:
                x = float(cell)
            except ValueError:
                raise TraceError(path, n, col, f"{cell!r} is not a number") from None
            if not math.isfinite(x) or x < 0:
                raise TraceError(path, n, col, f"{cell!r} must be a finite number >= 0")
            nums.append(x)
        lo, hi, v = nums
        if lo != end:
            raise TraceError(path, n, "start_h", f"{lo:g} must equal the previous end_h ({end:g})")
        if hi <= lo:
            raise TraceError(path, n, "end_h", f"{hi:g} must be above start_h ({lo:g})")
        starts.append(lo)
        values.append(v)
        end = hi
    if not starts:
        raise TraceError(path, rows[0][0], "-", "no intervals after the header")
    return GridIntensity(np.array(starts), np.array(values), end, path.name)


class CarbonConfig(BaseModel):
    """The ``cluster.carbon`` block: where the grid intensity comes from, when the run
    starts in it, and embodied-carbon figures (devices/carbon.py, docs/energy.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    grid_intensity_g_per_kwh: float | None = Field(
        default=None,
        ge=0,
        description="constant grid carbon intensity, gCO2/kWh (None with no file: the "
        "2023 world average of devices/carbon.yaml, 481 g/kWh, Ember)",
    )
    grid_intensity_file: str | None = Field(
        default=None,
        description="CSV file of grid carbon intensity over time (header start_h,end_h,"
        "gco2_per_kwh; hours from 0, contiguous, repeating every last end_h hours); a "
        "relative path is against the scenario's folder; 'pkg:carbon/caiso_2023-01-01.csv' "
        "is the shipped sample (one day of California's grid, hourly, Electricity Maps)",
    )
    start_h: float = Field(
        default=0.0,
        ge=0,
        le=MAX_DURATION_H,
        description="hour of the intensity series at which the run's time 0 falls, h",
    )
    embodied_g_per_device_hour: dict[str, float] = Field(
        default_factory=dict,
        description="embodied carbon per provisioned device-hour, gCO2e, by device type "
        "(overrides devices/carbon.yaml's embodied_kg / service life for that type)",
    )
    service_life_years: float | None = Field(
        default=None,
        gt=0,
        le=100,
        description="years over which a device's embodied carbon is spread (None: "
        "devices/carbon.yaml's 6, Microsoft's server useful life)",
    )

    @model_validator(mode="after")
    def _one_source(self) -> CarbonConfig:
        if self.grid_intensity_g_per_kwh is not None and self.grid_intensity_file is not None:
            raise ValueError("give grid_intensity_g_per_kwh or grid_intensity_file, not both")
        for k, v in self.embodied_g_per_device_hour.items():
            if not v >= 0 or not math.isfinite(v):
                raise ValueError(f"embodied_g_per_device_hour.{k}: {v} must be >= 0")
        return self


def grid_intensity(cfg: CarbonConfig, base_dir: Path | None = None) -> GridIntensity:
    """The run's grid intensity (the file is resolved against ``base_dir``)."""
    if cfg.grid_intensity_file is not None:
        from hetsim.simulator.paths import resolve_path

        return read_grid_intensity(resolve_path(cfg.grid_intensity_file, base_dir or Path.cwd()))
    if cfg.grid_intensity_g_per_kwh is not None:
        return GridIntensity.constant(cfg.grid_intensity_g_per_kwh)
    return GridIntensity.constant(carbon_table().grid_intensity_g_per_kwh, "default")


def embodied_g_per_hour(device: str, cfg: CarbonConfig) -> float | None:
    """Embodied gCO2e per provisioned hour of one ``device`` (None: no figure)."""
    if device in cfg.embodied_g_per_device_hour:
        return float(cfg.embodied_g_per_device_hour[device])
    table = carbon_table()
    kg = table.embodied_kg.get(device)
    if kg is None:
        return None
    life = cfg.service_life_years or table.service_life_years
    return kg * 1000.0 / (life * HOURS_PER_YEAR)


def operational_g(energy_J: float, grid: GridIntensity, start_h: float, span_s: float) -> float:
    """gCO2 of ``energy_J`` drawn evenly over [start_h, start_h + span_s / 3600]."""
    return energy_J / J_PER_KWH * grid.mean_g_per_kWh(start_h, start_h + span_s / 3600.0)


def series_carbon_g(times_s: np.ndarray, power_W: np.ndarray, end_s: float,
                    grid: GridIntensity, start_h: float = 0.0) -> float:  # fmt: skip
    """Exact ``integral P(t) I(t) dt`` of a power step function (``power_W[i]`` from
    ``times_s[i]`` to ``times_s[i + 1]``, the last to ``end_s``), gCO2."""
    edges = np.append(np.asarray(times_s, dtype=float), end_s)
    total = 0.0
    for k, w in enumerate(np.asarray(power_W, dtype=float)):
        a, b = start_h + edges[k] / 3600.0, start_h + edges[k + 1] / 3600.0
        total += w / 1000.0 * grid.integral(a, b)  # kW x (g/kWh) x h
    return total


CARBON_METRICS: dict[str, str] = {
    "grid_intensity_g_per_kWh": "mean grid carbon intensity over the run's window, "
    "gCO2/kWh (cluster.carbon: a constant, default the 2023 world average, or a series)",
    "carbon_operational_g": "operational carbon, gCO2: the run's energy_J (kWh) x "
    "grid_intensity_g_per_kWh (exact for a constant intensity or a flat power draw; "
    "devices/carbon.py)",
    "carbon_embodied_g": "embodied carbon, gCO2e: per accelerator provisioned for the run, "
    "its type's manufacturing carbon / service life per hour x run time (devices/carbon.yaml; "
    "types without a figure left out, named in carbon_embodied_unpriced)",
    "carbon_embodied_unpriced": "accelerator types with no embodied-carbon figure, joined "
    "by ';' (empty: every type priced)",
    "carbon_g": "carbon_operational_g + carbon_embodied_g",
}
"""Carbon columns of every run that reports energy (serving, cluster)."""

STEP_CARBON_METRICS: dict[str, str] = {
    "grid_intensity_g_per_kWh": CARBON_METRICS["grid_intensity_g_per_kWh"],
    "carbon_operational_g": "operational carbon of one step, gCO2: energy_per_step_J (kWh) x "
    "the grid intensity over the step",
    "carbon_embodied_g": "embodied carbon of one step, gCO2e: every GPU of the world for "
    "the step's time at its type's per-hour figure (devices/carbon.yaml)",
    "carbon_embodied_unpriced": CARBON_METRICS["carbon_embodied_unpriced"],
    "carbon_per_step_g": "carbon_operational_g + carbon_embodied_g of one step",
    "carbon_per_token_g": "carbon_per_step_g / global batch tokens",
}
"""Carbon columns of a training step (training-parallel)."""


def carbon_columns(energy_J: float, span_s: float, device_s: Mapping[str, float],
                   cfg: CarbonConfig, grid: GridIntensity) -> dict[str, Any]:  # fmt: skip
    """The :data:`CARBON_METRICS` columns of ``energy_J`` over ``span_s`` seconds, with
    ``device_s`` provisioned accelerator-seconds by device type."""
    mean = grid.mean_g_per_kWh(cfg.start_h, cfg.start_h + max(span_s, 0.0) / 3600.0)
    op = energy_J / J_PER_KWH * mean
    emb, unpriced = 0.0, []
    for t, s in device_s.items():
        g = embodied_g_per_hour(t, cfg)
        if g is None:
            unpriced.append(t)
        else:
            emb += g * s / 3600.0
    return {
        "grid_intensity_g_per_kWh": mean,
        "carbon_operational_g": op,
        "carbon_embodied_g": emb,
        "carbon_embodied_unpriced": ";".join(unpriced),
        "carbon_g": op + emb,
    }
