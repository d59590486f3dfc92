"""Chrome trace JSON (opens in Perfetto and chrome://tracing) from a run's spans.

One process per track group (a node, ``links``, ``memory``), one thread per track
(a device, a link direction, a memory pool); a track with no span and no counter
sample (a device the run never used) is left out. Spans become complete events
(``X``), counters become counter events (``C``) named with their unit (``bytes`` for
memory pools, ``B/s`` for network link load). Flow points become flow events (``s``
and ``f`` sharing an ``id``: an arrow from the span a step of work left to the span it
entered, such as a request's prefill, KV transfer and decode). Times are microseconds,
as the format wants.
"""

from __future__ import annotations

import json
from typing import Any

from hetsim.simulator.recorder import Recorder

US_PER_S = 1e6


COUNTER_UNITS = {"memory": "bytes", "link": "B/s", "power": "W"}
"""Unit of a counter track's values, by track kind (memory pools count bytes in use,
network links their load, devices' power tracks their draw)."""


FLOW_NUDGE_US = 0.01
"""A flow start sits this far before the end of the span it leaves, a flow finish this
far after the start of the span it enters (10 ns): viewers bind a flow point to the
span that encloses its time, and a span's end instant belongs to the next one."""


def _ns(t_s: float) -> int:
    """A time on the trace's grid: whole nanoseconds."""
    return round(t_s * 1e9)


def _us(ns: int) -> float:
    """Whole nanoseconds as the format's microseconds (three decimals, exact as text)."""
    return ns / 1000


def _counter_unit(kind: str) -> str:
    return COUNTER_UNITS.get(kind, "value")


def used_tracks(recorder: Recorder) -> list[str]:
    """Tracks with at least one span or counter sample, sorted (a device the run never
    used gets no track)."""
    s = recorder.spans
    return sorted(set(s.track) | set(s.counter_track))


def trace_events(recorder: Recorder) -> list[dict[str, Any]]:
    """The trace as a list of Chrome trace events (metadata first). Only tracks with
    spans or counter samples appear; counters are named with their unit."""
    names = [n for n in used_tracks(recorder) if n in recorder.tracks]
    groups = sorted({recorder.tracks[n].group for n in names})
    pid = {g: i + 1 for i, g in enumerate(groups)}
    tid: dict[str, int] = {}
    events: list[dict[str, Any]] = []
    for g in groups:
        events.append({"ph": "M", "name": "process_name", "pid": pid[g], "args": {"name": g}})
    for i, name in enumerate(names):
        track = recorder.tracks[name]
        tid[name] = i + 1
        events.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": pid[track.group],
                "tid": tid[name],
                "args": {"name": f"{name} ({track.kind})"},
            }
        )
    s = recorder.spans
    for start, end, track_name, span_name, args in zip(
        s.start_s, s.end_s, s.track, s.name, s.args, strict=True
    ):
        track = recorder.tracks[track_name]
        ev: dict[str, Any] = {
            "ph": "X",
            "name": span_name,
            "pid": pid[track.group],
            "tid": tid[track_name],
            # start and end each on the nanosecond grid, the duration their difference:
            # a span ending where the next begins never overlaps it (float microseconds
            # would by a rounding step, and a viewer drops overlapping slices)
            "ts": _us(_ns(start)),
            "dur": _us(_ns(end) - _ns(start)),
        }
        if args:
            ev["args"] = args
        events.append(ev)
    for t, track_name, value in zip(
        s.counter_time_s, s.counter_track, s.counter_value, strict=True
    ):
        track = recorder.tracks[track_name]
        unit = _counter_unit(track.kind)
        events.append(
            {
                "ph": "C",
                "name": f"{track_name} ({unit})",
                "pid": pid[track.group],
                "ts": _us(_ns(t)),
                "args": {unit: value},
            }
        )
    events.extend(_flow_events(recorder, pid, tid))
    return events


def _flow_events(
    recorder: Recorder, pid: dict[str, int], tid: dict[str, int]
) -> list[dict[str, Any]]:
    """Flow events of every flow whose start and finish both lie on shown tracks."""
    s = recorder.spans
    ends: dict[int, dict[str, tuple[str, float, str]]] = {}
    for fid, phase, track, t, name in zip(
        s.flow_id, s.flow_phase, s.flow_track, s.flow_time_s, s.flow_name, strict=True
    ):
        if track in tid:
            ends.setdefault(fid, {})[phase] = (track, t, name)
    out: list[dict[str, Any]] = []
    for fid in sorted(ends):
        pair = ends[fid]
        if len(pair) < 2:
            continue
        name = pair["s"][2]  # both ends carry one name: viewers match on id, cat, name
        for phase, nudge in (("s", -FLOW_NUDGE_US), ("f", FLOW_NUDGE_US)):
            track, t, _ = pair[phase]
            ev: dict[str, Any] = {
                "ph": phase,
                "id": fid,
                "name": name,
                "cat": "flow",
                "pid": pid[recorder.tracks[track].group],
                "tid": tid[track],
                "ts": _us(_ns(t) + round(nudge * 1000)),
            }
            if phase == "f":
                ev["bp"] = "e"  # bind to the enclosing span, not the next one
            out.append(ev)
    return out


def trace_json(recorder: Recorder, generator: str = "hetsim") -> str:
    """The whole trace document as JSON text; ``otherData.generator`` comes first, so a
    later ``--trace`` can tell a file it wrote from anyone else's."""
    from hetsim.simulator.version import __version__

    head = {"otherData": {"generator": generator, "hetsim_version": __version__}}
    return json.dumps({**head, "traceEvents": trace_events(recorder), "displayTimeUnit": "ms"})
