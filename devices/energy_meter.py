"""The energy meter of one device: its idle floor plus each busy interval's draw above
idle, from the device's power model (:mod:`hetsim.devices.power`). A compute device owns
one; :mod:`hetsim.devices.energy` turns every meter of a cluster into a run's report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetsim.devices.power import PowerModel

if TYPE_CHECKING:
    from hetsim.simulator.recorder import Recorder

POWER_TRACK_SUFFIX = " power"
"""Suffix of a device's power counter track in the trace (``"node/gpu0 power"``)."""


class EnergyMeter:
    """Energy of one device over a run: its idle floor plus each busy interval's draw
    above idle (module doc). ``active_J`` is that energy above idle, ``busy_s`` the busy
    time reported, ``peak_W`` the highest draw seen (idle if never busy). ``log``, when a
    list (a multi-workload run sets it), gets ``(start_s, J above idle)`` per booking
    (``nan`` for :meth:`add`'s untimed ones), so the energy can be split by owner."""

    __slots__ = ("_recorder", "active_J", "busy_s", "log", "model", "peak_W", "track")

    def __init__(
        self, model: PowerModel, recorder: Recorder | None = None, track: str = ""
    ) -> None:
        self.model = model
        self.active_J = 0.0
        self.busy_s = 0.0
        self.peak_W = model.idle_W
        self._recorder = recorder
        self.track = track + POWER_TRACK_SUFFIX if track else ""
        self.log: list[tuple[float, float]] | None = None

    def busy(self, start_s: float, end_s: float, utilisation: float = 0.0) -> float:
        """Account the busy interval [start_s, end_s] at compute utilisation
        ``utilisation`` (0: memory-bound, 1: compute-bound); returns its draw in W."""
        m = self.model
        power = m.busy_W(utilisation)
        d = end_s - start_s
        if d > 0:
            joules = (power - m.idle_W) * d
            self.active_J += joules
            self.busy_s += d
            if self.log is not None:
                self.log.append((start_s, joules))
            if power > self.peak_W:
                self.peak_W = power
        rec = self._recorder
        if rec is not None and rec.record_spans and self.track:
            rec.counter(self.track, start_s, power)
            rec.counter(self.track, end_s, m.idle_W)
        return power

    def add(self, active_J: float, busy_s: float, peak_W: float | None = None) -> None:
        """Add an aggregated integral: ``active_J`` above idle over ``busy_s`` busy
        seconds, the highest draw among them ``peak_W`` (for hot paths and analytic
        domains that integrate themselves)."""
        self.active_J += active_J
        self.busy_s += busy_s
        if self.log is not None:
            self.log.append((float("nan"), active_J))
        if peak_W is not None and peak_W > self.peak_W:
            self.peak_W = peak_W

    def window(self, start_s: float, end_s: float, busy_s: float, compute_s: float = 0.0) -> float:
        """Account ``busy_s`` seconds of kernels run inside the window [start_s, end_s]
        without saying where in it: their energy above idle as one interval whose work
        would take ``compute_s`` at the full compute roof
        (:meth:`~hetsim.devices.power.PowerModel.interval_J`), their draw at that mean
        utilisation as a peak candidate, and, with spans on, the window's mean draw
        (``idle_W`` + that energy / the window) on the power track from ``start_s`` and
        ``idle_W`` from ``end_s``, so the track integrates to what the meter holds. For
        mechanisms that price a layer or a step as a whole. Returns the busy draw, W."""
        m = self.model
        if busy_s <= 0:
            return m.idle_W
        extra = m.interval_J(busy_s, compute_s)
        power = m.busy_W(compute_s / busy_s)
        self.active_J += extra
        self.busy_s += busy_s
        if self.log is not None:
            self.log.append((start_s, extra))
        if power > self.peak_W:
            self.peak_W = power
        rec = self._recorder
        if rec is not None and rec.record_spans and self.track and end_s > start_s:
            rec.counter(self.track, start_s, m.idle_W + extra / (end_s - start_s))
            rec.counter(self.track, end_s, m.idle_W)
        return power

    def energy_J(self, horizon_s: float) -> float:
        """Energy over a run of ``horizon_s`` seconds (idle outside the busy intervals)."""
        return self.model.idle_W * max(horizon_s, 0.0) + self.active_J
