"""Refitted constants applied on top of the shipped catalogues, for cross-validation.

``hetsim fidelity --cv`` (:mod:`simulator.crossval`) refits each fitted part of the cost
model without one source's (or one hardware platform's) calibration points and re-runs
the validation rows with the refitted values. This module is how those values reach a
run without editing the catalogues: :func:`applied` installs a :class:`FitOverrides`
for the duration of a ``with`` block, and the three places that read fitted constants
consult it:

* :func:`devices.cpu.cpu_kernels` applies ``cpu`` (per CPU type, ``"*"`` for every CPU)
  after the CPU's own entry and before the scenario's ``cpu_kernels`` overrides, so a
  robustness sweep's explicit value still wins;
* :class:`devices.cluster.Cluster` passes each device spec through :func:`device`
  (``memory_max_eff``: the achieved-bandwidth fraction of a CPU or GPU memory) and each
  link spec through :func:`link` (``link_max_eff``: a link's achieved fraction of its
  per-direction rate);
* :func:`devices.host_copy.pageable_ratios` returns ``host_copy`` (the pageable / pinned
  copy ratios) when it is given;
* :func:`devices.power.power_model` applies ``gpu_power`` (GPU power coefficients by name,
  e.g. ``memory_activity``) to every GPU after the run's own ``power_coefficients`` and
  before ``devices/power.yaml``.

Outside a ``with applied(...)`` block nothing changes: every function is the identity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hetsim.devices.spec import DeviceSpec, EfficiencyCurve, LinkSpec


@dataclass(frozen=True)
class FitOverrides:
    """Refitted values: CPU kernel fields, memory and link efficiencies by catalogue name."""

    cpu: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    memory_max_eff: Mapping[str, float] = field(default_factory=dict)
    link_max_eff: Mapping[str, float] = field(default_factory=dict)
    host_copy: Mapping[str, float | None] = field(default_factory=dict)
    gpu_power: Mapping[str, float] = field(default_factory=dict)

    def is_empty(self) -> bool:
        """Whether nothing is overridden."""
        return not (self.cpu or self.memory_max_eff or self.link_max_eff or self.host_copy
                    or self.gpu_power)  # fmt: skip


_ACTIVE: list[FitOverrides] = []


@contextmanager
def applied(overrides: FitOverrides) -> Iterator[None]:
    """Apply ``overrides`` to every run started inside the block (not re-entrant)."""
    if _ACTIVE:
        raise RuntimeError("fit overrides are already applied")
    _ACTIVE.append(overrides)
    try:
        yield
    finally:
        _ACTIVE.clear()


def active() -> FitOverrides | None:
    """The overrides in force, if any."""
    return _ACTIVE[0] if _ACTIVE else None


def cpu_fields(cpu: str) -> dict[str, Any]:
    """Kernel fields for CPU type ``cpu``: the ``"*"`` entry, then the CPU's own."""
    o = active()
    if o is None:
        return {}
    out: dict[str, Any] = {}
    for key in ("*", cpu):
        for name, value in o.cpu.get(key, {}).items():
            if name == "dequant_weights_per_cycle":
                merged = dict(out.get(name, {}))
                merged.update(value)
                out[name] = merged
            else:
                out[name] = value
    return out


def _curve(curve: EfficiencyCurve, max_eff: float) -> EfficiencyCurve:
    return dataclasses.replace(curve, max_eff=max_eff)


def device(spec: DeviceSpec) -> DeviceSpec:
    """``spec`` with its memory efficiency refitted, when the overrides name it."""
    o = active()
    if o is None or spec.name not in o.memory_max_eff:
        return spec
    return dataclasses.replace(
        spec, memory_efficiency=_curve(spec.memory_efficiency, o.memory_max_eff[spec.name])
    )


def gpu_power(name: str) -> float | None:
    """The refitted GPU power coefficient ``name``, when the overrides give one."""
    o = active()
    return None if o is None else o.gpu_power.get(name)


def link(spec: LinkSpec) -> LinkSpec:
    """``spec`` with its efficiency refitted, when the overrides name it."""
    o = active()
    if o is None or spec.name not in o.link_max_eff:
        return spec
    return dataclasses.replace(spec, efficiency=_curve(spec.efficiency, o.link_max_eff[spec.name]))
