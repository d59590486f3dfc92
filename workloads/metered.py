"""Energy and carbon columns of a workload that meters the devices it computes on.

The ``moe``, ``offload`` and ``tee-*`` kinds price a layer or a step as a whole: their
mechanisms report each one's busy seconds and compute-roof seconds per device on that
device's meter (:meth:`hetsim.devices.energy_meter.EnergyMeter.window`). At the end
:func:`metered_columns` builds the run's report (:mod:`hetsim.devices.energy`: every
device of the cluster idle over the run plus its busy draw, host DRAM, NICs), writes the
``energy`` and ``power`` tables, and returns the standard columns
(:data:`~hetsim.devices.energy.ENERGY_METRICS`, carbon as serving has it), the energy of
the devices the run computes on (``energy_devices_J``: its accelerators and host CPU
with that CPU's DRAM, without the cluster's other devices and NICs) and energy and
carbon per unit of work over those devices.

A device the run computes on with no board power in the catalogue (``tdp_w`` 0, such as
the Ascend 910B) is named in ``energy_unpriced`` and the energy figures that would
include it are NaN (absent from the summary, with the reason), as in the training domain.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hetsim.devices.carbon import CARBON_METRICS, carbon_columns
from hetsim.devices.energy import (
    ENERGY_METRICS,
    devices_J,
    energy_columns,
    energy_report,
    record_tables,
    with_copies,
)

DEVICES_METRICS: dict[str, str] = {
    "energy_devices_J": "energy of the devices the run computes on, J: its accelerators "
    "(tensor-parallel peers included) and host CPU, each idle over the run plus the "
    "draw above idle of its busy time, and that CPU's installed DRAM; energy_J without "
    "the cluster's other devices and NICs",
    "energy_unpriced": "devices the run computes on with no board power in the catalogue "
    "(tdp_w 0), joined by ';': energy_J, energy_accelerator_J, avg_power_W, "
    "peak_power_W, energy_devices_J, the per-unit figures, tokens_per_J and operational "
    "carbon are then absent "
    "(empty: every device priced)",
}

UNPRICED_NAN = ("energy_J", "energy_accelerator_J", "avg_power_W", "peak_power_W",
                "energy_devices_J", "tokens_per_J", "carbon_operational_g", "carbon_g")  # fmt: skip
"""Columns that are NaN when a device the run computes on has no board power."""


def metered_metrics(units: Mapping[str, str], tokens: str | None = None) -> dict[str, str]:
    """The metric definitions of :func:`metered_columns`: ``units`` maps a unit of work
    (``output_token``) to its definition; ``tokens`` names the unit ``tokens_per_J``
    counts (None: no such column)."""
    out: dict[str, str] = {**ENERGY_METRICS, **DEVICES_METRICS}
    for unit, text in units.items():
        out[f"energy_per_{unit}_J"] = f"energy_devices_J / {text}, J (absent without any)"
    if tokens is not None:
        out["tokens_per_J"] = f"{units[tokens]} / energy_devices_J"
    out.update(CARBON_METRICS)
    for unit, text in units.items():
        out[f"carbon_per_{unit}_g"] = (
            f"carbon of the devices the run computes on (energy_devices_J at the grid "
            f"intensity plus their accelerators' embodied carbon over the run) / {text}, gCO2e"
        )
    return out


def metered_columns(
    w: Any,
    end_s: float,
    devices: Sequence[str],
    units: Mapping[str, float],
    tokens: str | None = None,
    copies: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """The :func:`metered_metrics` columns of workload ``w`` (its ``cluster`` and
    ``sim``) over [0, ``end_s``]: ``devices`` are the cluster devices the run computes
    on, ``units`` the count of each unit of work done (a per-unit column only where the
    count is positive), ``tokens`` the unit of ``tokens_per_J``, ``copies`` per device the
    names of the identical twins the mechanism runs beside it (rows of their own in the
    report, :func:`~hetsim.devices.energy.with_copies`)."""
    cluster = w.cluster
    rep = energy_report(cluster, end_s)
    used = list(devices)
    for device, twins in (copies or {}).items():
        rep = with_copies(rep, device, twins)
        used += list(twins)
    record_tables(w.sim.recorder, rep)
    out: dict[str, Any] = dict(energy_columns(cluster, end_s, rep))
    own = devices_J(rep, cluster, used)
    out["energy_devices_J"] = own
    unpriced = sorted({cluster.device(d).spec.name for d in devices
                       if cluster.device(d).energy.model.tdp_W <= 0})  # fmt: skip
    out["energy_unpriced"] = ";".join(unpriced)
    for unit, n in units.items():
        if n > 0:
            out[f"energy_per_{unit}_J"] = own / n
    if tokens is not None and units.get(tokens, 0) > 0 and own > 0:
        out["tokens_per_J"] = units[tokens] / own
    grid, cfg = cluster.load_grid(), cluster.config.carbon
    accel_s: dict[str, float] = {}
    own_s: dict[str, float] = {}
    mine = set(used)
    for r in rep.rows:
        if r.kind != "cpu":
            accel_s[r.type] = accel_s.get(r.type, 0.0) + end_s
            if r.device in mine:
                own_s[r.type] = own_s.get(r.type, 0.0) + end_s
    out.update(carbon_columns(rep.total_J, end_s, accel_s, cfg, grid))
    own_g = carbon_columns(own, end_s, own_s, cfg, grid)["carbon_g"]
    for unit, n in units.items():
        if n > 0:
            out[f"carbon_per_{unit}_g"] = own_g / n
    if unpriced:
        nan = float("nan")
        for key in out:
            if key in UNPRICED_NAN or key.startswith(("energy_per_", "carbon_per_")):
                out[key] = nan
    return out
