"""Energy of a run, integrated from each device's busy and idle time (one place for
every domain).

Every :class:`~devices.compute.ComputeDevice` owns an :class:`EnergyMeter` built from its
:class:`~devices.power.PowerModel`. A mechanism reports each busy interval with its
compute utilisation (:meth:`ComputeDevice.record_busy` with ``utilisation``, or
:meth:`EnergyMeter.busy`); a hot path that keeps its own counters adds its integral once
(:meth:`EnergyMeter.add`, with :meth:`PowerModel.interval_J`). The rest of the horizon is
idle: a device's energy over a run of ``T`` seconds is ``idle_W x T`` plus the energy above
idle of its busy intervals. Hosts add their installed DRAM's background power and,
on a scale-out network, one NIC per node (:func:`energy_report`).

**Power over time, per device, from a finished run.** With spans on (``outputs.spans``,
the default), every busy interval reported through a meter is also a counter sample on
the trace track ``"<device> power"`` (W): the draw at the interval's start and the idle
draw at its end. :func:`power_series` reads them back as a step function::

    result = hetsim.run("scenarios/quickstart.yaml")
    times_s, power_W = power_series(result.recorder, "node/gpu0")
    # power_W[i] holds from times_s[i] to times_s[i + 1]; before the first sample and
    # after the last the device draws its idle power (energy_report(...).rows give it)

The Perfetto trace (``hetsim run --trace``) draws the same samples as a counter track per
device. Summary columns (:func:`energy_columns`, defined in :data:`ENERGY_METRICS`) give
each run's totals, per device type average and peak power, and energy per unit of work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from hetsim.devices.energy_meter import POWER_TRACK_SUFFIX, EnergyMeter
from hetsim.devices.power import dram_W, nic_W

if TYPE_CHECKING:
    from hetsim.devices.cluster import Cluster
    from hetsim.simulator.recorder import Recorder


@dataclass(frozen=True)
class DeviceEnergy:
    """One device's energy over a run."""

    device: str
    type: str
    kind: str
    energy_J: float
    busy_s: float
    avg_W: float
    peak_W: float


@dataclass(frozen=True)
class EnergyReport:
    """A run's energy: one row per compute device, plus host DRAM and NICs."""

    horizon_s: float
    rows: tuple[DeviceEnergy, ...]
    dram_J: float
    nic_J: float

    @property
    def accelerator_J(self) -> float:
        """Energy of GPUs, NPUs and TPUs."""
        return sum(r.energy_J for r in self.rows if r.kind != "cpu")

    @property
    def host_J(self) -> float:
        """Energy of CPUs, host DRAM and NICs."""
        return sum(r.energy_J for r in self.rows if r.kind == "cpu") + self.dram_J + self.nic_J

    @property
    def total_J(self) -> float:
        """Every device, DRAM and NIC."""
        return self.accelerator_J + self.host_J

    def by_type(self) -> dict[str, tuple[float, float]]:
        """Per device type: (mean over its devices of average power, highest peak), W."""
        out: dict[str, list[DeviceEnergy]] = {}
        for r in self.rows:
            out.setdefault(r.type, []).append(r)
        return {
            t: (sum(r.avg_W for r in rs) / len(rs), max(r.peak_W for r in rs))
            for t, rs in out.items()
        }


def energy_report(cluster: Cluster, horizon_s: float) -> EnergyReport:
    """Every device's energy over [0, ``horizon_s``] (module doc)."""
    rows = []
    dram = 0.0
    for dev in cluster.devices():
        meter = dev.energy
        e = meter.energy_J(horizon_s)
        avg = e / horizon_s if horizon_s > 0 else meter.model.idle_W
        rows.append(DeviceEnergy(dev.name, dev.spec.name, dev.spec.kind, e, meter.busy_s, avg,
                                 meter.peak_W))  # fmt: skip
        if dev.spec.kind == "cpu":
            dram += dram_W(cluster.memory(dev.name).capacity_bytes) * max(horizon_s, 0.0)
    nics = len(cluster.config.nodes) if cluster.config.network is not None else 0
    return EnergyReport(horizon_s, tuple(rows), dram, nics * nic_W() * max(horizon_s, 0.0))


ENERGY_METRICS: dict[str, str] = {
    "energy_J": "energy of the run, J: every device's idle power over the run plus the draw "
    "above idle of its busy intervals (devices/power.py: memory-bound kernels at memory_W, "
    "compute-bound at the power limit, linear in compute utilisation), host DRAM and NICs",
    "energy_accelerator_J": "energy_J of the GPUs and NPUs alone",
    "energy_host_J": "energy_J of the CPUs, host DRAM and NICs",
    "avg_power_W": "energy_J / run time (the whole cluster)",
    "peak_power_W": "highest draw of any one accelerator over the run, W",
    "avg_power_W_by_type": "'type:W' pairs joined by ';': per device type, the mean over its "
    "devices of energy / run time",
    "peak_power_W_by_type": "'type:W' pairs joined by ';': per device type, the highest draw "
    "of one of its devices",
}


STEP_ENERGY_METRICS: dict[str, str] = {
    "energy_per_step_J": "energy of one training step over every GPU of the world, J: each "
    "GPU's idle power over the step plus, over its busy time (the step less its pipeline "
    "bubble), memory_W and the compute utilisation's share of the way to the power limit "
    "(hardware FLOPs, recompute included, over the clock model's compute roof; "
    "devices/power.py); host power not included",
    "energy_per_token_J": "energy_per_step_J / global batch tokens",
    "tokens_per_J": "global batch tokens / energy_per_step_J",
    "avg_power_W": "mean draw of one GPU over the step, W",
    "peak_power_W": "draw of one GPU while its kernels run (the step's compute utilisation "
    "over kernel time), W",
    "avg_power_W_by_type": "'type:W': avg_power_W by GPU type",
    "peak_power_W_by_type": "'type:W': peak_power_W by GPU type",
    "power_limit_W": "the GPU's power limit in effect: its TDP, or the cluster device's "
    "power_cap_w",
}


def energy_columns(
    cluster: Cluster, horizon_s: float, report: EnergyReport | None = None
) -> dict[str, Any]:
    """The :data:`ENERGY_METRICS` columns of a run over [0, ``horizon_s``] (``report``:
    :func:`energy_report`'s, when already built)."""
    rep = energy_report(cluster, horizon_s) if report is None else report
    return report_columns(rep)


def report_columns(rep: EnergyReport) -> dict[str, Any]:
    """The :data:`ENERGY_METRICS` columns of ``rep`` (over its horizon)."""
    horizon_s = rep.horizon_s
    types = rep.by_type()
    accel = [r.peak_W for r in rep.rows if r.kind != "cpu"]
    return {
        "energy_J": rep.total_J,
        "energy_accelerator_J": rep.accelerator_J,
        "energy_host_J": rep.host_J,
        "avg_power_W": rep.total_J / horizon_s if horizon_s > 0 else float("nan"),
        "peak_power_W": max(accel, default=0.0),
        "avg_power_W_by_type": ";".join(f"{t}:{a:.6g}" for t, (a, _) in types.items()),
        "peak_power_W_by_type": ";".join(f"{t}:{p:.6g}" for t, (_, p) in types.items()),
    }


ENERGY_COLUMNS = ("device", "type", "kind", "energy_J", "busy_s", "avg_power_W", "peak_power_W")
"""Columns of the ``energy`` table: one row per device."""
POWER_COLUMNS = ("device", "time_s", "power_W")
"""Columns of the ``power`` table: a device's draw from ``time_s`` to its next row."""


def record_tables(recorder: Recorder, report: EnergyReport) -> None:
    """Write the ``energy`` table (one row per device of ``report``) and, when spans were
    recorded, the ``power`` table (every device's counter samples, :func:`power_series`)."""
    table = recorder.table("energy", ENERGY_COLUMNS)
    for r in report.rows:
        table.append(r.device, r.type, r.kind, r.energy_J, r.busy_s, r.avg_W, r.peak_W)
    if not recorder.record_spans:
        return
    power = None
    for r in report.rows:
        times, watts = power_series(recorder, r.device)
        if len(times) == 0:
            continue
        if power is None:
            power = recorder.table("power", POWER_COLUMNS)
        for t, w in zip(times.tolist(), watts.tolist(), strict=True):
            power.append(r.device, t, w)


def meters_report(
    meters: Iterable[tuple[str, str, str, EnergyMeter]], horizon_s: float
) -> EnergyReport:
    """The report of meters that are no cluster device's: (device, type, kind, meter)
    each, for a domain whose devices are virtual (a pipeline stage's GPU, one rank of a
    data-parallel job, priced on one catalogue device). One row per meter; no host DRAM
    or NIC."""
    rows = []
    for device, type_, kind, meter in meters:
        e = meter.energy_J(horizon_s)
        avg = e / horizon_s if horizon_s > 0 else meter.model.idle_W
        rows.append(DeviceEnergy(device, type_, kind, e, meter.busy_s, avg, meter.peak_W))
    return EnergyReport(horizon_s, tuple(rows), 0.0, 0.0)


def run_energy(
    cluster: Cluster, recorder: Recorder, horizon_s: float
) -> tuple[EnergyReport, dict[str, Any]]:
    """A metered run's energy over [0, ``horizon_s``] in one call: the report of every
    cluster device's meter, its ``energy``/``power`` tables written
    (:func:`record_tables`), and its :data:`ENERGY_METRICS` and
    :data:`~hetsim.devices.carbon.CARBON_METRICS` columns (every accelerator provisioned
    for the whole run)."""
    from hetsim.devices.carbon import carbon_columns

    rep = energy_report(cluster, horizon_s)
    record_tables(recorder, rep)
    out = report_columns(rep)
    accel_s: dict[str, float] = {}
    for r in rep.rows:
        if r.kind != "cpu":
            accel_s[r.type] = accel_s.get(r.type, 0.0) + horizon_s
    out.update(carbon_columns(rep.total_J, horizon_s, accel_s, cluster.config.carbon,
                              cluster.load_grid()))  # fmt: skip
    return rep, out


def devices_J(report: EnergyReport, cluster: Cluster, devices: Iterable[str]) -> float:
    """Energy of the named devices over ``report``'s run: their rows, plus the installed
    DRAM of the CPUs among them (what a workload that computes on those devices alone
    draws; a name without a row adds nothing)."""
    names = set(devices)
    total = sum(r.energy_J for r in report.rows if r.device in names)
    for r in report.rows:
        if r.device in names and r.kind == "cpu":
            total += dram_W(cluster.memory(r.device).capacity_bytes) * max(report.horizon_s, 0.0)
    return total


def with_copies(report: EnergyReport, device: str, names: Sequence[str]) -> EnergyReport:
    """``report`` with one more row per name in ``names``, each a copy of ``device``'s
    row: devices a mechanism runs as identical twins of a cluster device that the
    cluster does not hold (an MoE run's tensor-parallel GPU peers)."""
    row = next(r for r in report.rows if r.device == device)
    extra = tuple(replace(row, device=n) for n in names)
    return replace(report, rows=report.rows + extra)


def per_unit(energy_J: float, units: Mapping[str, float]) -> dict[str, float]:
    """``energy_J / count`` for every unit of work named in ``units`` (NaN for none)."""
    return {k: energy_J / n if n > 0 else float("nan") for k, n in units.items()}


def power_series(recorder: Recorder, device: str) -> tuple[np.ndarray, np.ndarray]:
    """The power of ``device`` over time from a finished run's counter samples (module
    doc): times (s, sorted, one sample per instant: the last recorded) and draws (W);
    empty arrays when spans were off or the device never reported a busy interval."""
    s = recorder.spans
    track = device + POWER_TRACK_SUFFIX
    mask = np.asarray(s.counter_track, dtype=object) == track
    times = np.asarray(s.counter_time_s, dtype=float)[mask] if mask.any() else np.zeros(0)
    watts = np.asarray(s.counter_value, dtype=float)[mask] if mask.any() else np.zeros(0)
    order = np.argsort(times, kind="stable")
    times, watts = times[order], watts[order]
    # one sample per instant, the last (an interval that ends where the next starts
    # leaves an idle sample and a busy one at the same time: the busy one holds)
    keep = np.ones(len(times), dtype=bool)
    keep[:-1] = times[1:] != times[:-1]
    return times[keep], watts[keep]
