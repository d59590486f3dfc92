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


def span_lanes(starts_ns: list[int], ends_ns: list[int]) -> tuple[list[int], list[int], list[int]]:
    """Lane, start and end (ns) of each span of ONE track, so that no two spans of one
    lane overlap unless one holds the other (a viewer drops a slice that crosses
    another's end). A span starting at most 1 ns before an earlier span's end (two
    float times of one instant rounded apart) starts at that end instead; a span that
    really overlaps another without being inside it goes to the next lane free for it.
    """
    order = sorted(range(len(starts_ns)), key=lambda i: (starts_ns[i], -ends_ns[i]))
    lanes: list[list[int]] = []  # per lane: the ends of its open spans (a stack)
    lane = [0] * len(starts_ns)
    start, end = list(starts_ns), list(ends_ns)
    for i in order:
        for k, stack in enumerate([*lanes, []]):
            while stack and stack[-1] <= start[i] + 1:
                start[i] = max(start[i], stack.pop())
            end[i] = max(end[i], start[i])
            if not stack or end[i] <= stack[-1]:
                if k == len(lanes):
                    lanes.append(stack)
                stack.append(end[i])
                lane[i] = k
                break
    return lane, start, end


def trace_events(recorder: Recorder) -> list[dict[str, Any]]:
    """The trace as a list of Chrome trace events (metadata first). Only tracks with
    spans or counter samples appear; counters are named with their unit."""
    names = [n for n in used_tracks(recorder) if n in recorder.tracks]
    groups = sorted({recorder.tracks[n].group for n in names})
    pid = {g: i + 1 for i, g in enumerate(groups)}
    s = recorder.spans
    # start and end each on the nanosecond grid, the duration their difference: a span
    # ending where the next begins never overlaps it (float microseconds would by a
    # rounding step, and a viewer drops overlapping slices); overlapping spans of one
    # track go to lanes of their own (span_lanes)
    by_track: dict[str, list[int]] = {}
    for i, track_name in enumerate(s.track):
        by_track.setdefault(track_name, []).append(i)
    lane = [0] * len(s.track)
    t0 = [0] * len(s.track)
    t1 = [0] * len(s.track)
    lanes_of: dict[str, int] = {}
    for track_name, rows in by_track.items():
        got = span_lanes([_ns(s.start_s[i]) for i in rows], [_ns(s.end_s[i]) for i in rows])
        for j, i in enumerate(rows):
            lane[i], t0[i], t1[i] = got[0][j], got[1][j], got[2][j]
        lanes_of[track_name] = max(got[0], default=0) + 1
    tid: dict[str, int] = {}
    lane_tid: dict[tuple[str, int], int] = {}
    events: list[dict[str, Any]] = []
    for g in groups:
        events.append({"ph": "M", "name": "process_name", "pid": pid[g], "args": {"name": g}})
    for name in names:
        track = recorder.tracks[name]
        for k in range(lanes_of.get(name, 1)):
            number = len(lane_tid) + 1
            lane_tid[(name, k)] = number
            if k == 0:
                tid[name] = number
            label = f"{name} ({track.kind})" + (f" lane {k + 1}" if k else "")
            events.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": pid[track.group],
                    "tid": number,
                    "args": {"name": label},
                }
            )
    for i, (track_name, span_name, args) in enumerate(zip(s.track, s.name, s.args, strict=True)):
        track = recorder.tracks[track_name]
        ev: dict[str, Any] = {
            "ph": "X",
            "name": span_name,
            "pid": pid[track.group],
            "tid": lane_tid[(track_name, lane[i])],
            "ts": _us(t0[i]),
            "dur": _us(t1[i] - t0[i]),
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
