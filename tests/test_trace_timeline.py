"""The ``--trace`` timeline: serving iterations and cluster jobs on the GPUs they use,
flow arrows from a request's prefill to its KV transfer to its decode, no track for a
device the run never used (issue 20)."""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from hetsim.simulator.cli import main
from hetsim.simulator.recorder import Recorder
from hetsim.simulator.trace import FLOW_NUDGE_US, trace_events

US = 1e6


def _trace(path: Path) -> tuple[list[dict[str, Any]], dict[tuple[int, int], str]]:
    events = json.loads(path.read_text())["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    return events, names


def _spans(events: list[dict[str, Any]]) -> dict[tuple[int, int], list[tuple[float, float]]]:
    out: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            out[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    return out


@pytest.fixture(scope="module")
def disaggregated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    """A tiny DistServe run (prefill and decode instances on A100s; H100 and L40S
    nodes unused) with --trace and its instances table."""
    d = tmp_path_factory.mktemp("disagg")
    args = ["run", "disaggregation", "-q", "--out", str(d / "r"), "--trace", str(d / "t.json"),
            "--set", "workload.requests.num_requests=40"]  # fmt: skip
    assert main(args) == 0
    return d / "t.json", pd.read_csv(d / "r" / "tables" / "instances.csv")


def test_serving_iterations_sit_on_the_gpus_of_their_instance(
    disaggregated: tuple[Path, pd.DataFrame],
) -> None:
    path, instances = disaggregated
    events, names = _trace(path)
    spans = _spans(events)
    used = {d for devs in instances["devices"] for d in devs.split(";")}
    assert set(instances["role"]) == {"prefill", "decode"}
    device_tracks = {n.removesuffix(" (device)") for n in names.values() if n.endswith("(device)")}
    assert device_tracks == used  # every used GPU has a track, no unused one has
    assert not any(n.startswith(("h100/", "l40s/")) for n in device_tracks)
    for key, name in names.items():
        if name.endswith("(device)"):
            assert spans[key], name  # a shown GPU track is never empty
    assert not any("instance" in n and "(device)" in n for n in names.values())
    # each instance's iterations: prefill ones on the prefill GPU, decode on decode GPUs
    by_role = defaultdict(set)
    for e in events:
        if e["ph"] == "X" and "role" in e.get("args", {}):
            by_role[e["args"]["role"]].add(e["name"])
    assert by_role["prefill"] == {"prefill"} and by_role["decode"] == {"decode"}


def test_kv_flows_link_prefill_transfer_and_decode_in_time_order(
    disaggregated: tuple[Path, pd.DataFrame],
) -> None:
    path, instances = disaggregated
    events, names = _trace(path)
    spans = _spans(events)
    flows: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    for e in events:
        if e["ph"] in ("s", "f"):
            assert e["ph"] not in flows[e["id"]]  # one start and one finish per id
            flows[e["id"]][e["ph"]] = e
    requests = 40  # every request of a disaggregated run is handed off once
    assert sorted(flows) == list(range(2 * requests))
    assert all(set(f) == {"s", "f"} for f in flows.values())
    role_of = {}
    for devs, role in zip(instances["devices"], instances["role"], strict=True):
        role_of.update({d: role for d in devs.split(";")})
    for i in range(requests):
        into, out = flows[2 * i], flows[2 * i + 1]
        # prefill end <= transfer start <= transfer end <= decode start
        times = [into["s"]["ts"], into["f"]["ts"], out["s"]["ts"], out["f"]["ts"]]
        assert times == sorted(times)
        tracks = [names[(e["pid"], e["tid"])] for e in (into["s"], into["f"], out["s"], out["f"])]
        assert role_of[tracks[0].removesuffix(" (device)")] == "prefill"
        assert tracks[1] == tracks[2] and tracks[1].endswith("(transfer)")
        assert role_of[tracks[3].removesuffix(" (device)")] == "decode"
        for e in (into["s"], into["f"], out["s"], out["f"]):
            # each point lies inside a span of its track, next to that span's edge
            hit = [(a, b) for a, b in spans[(e["pid"], e["tid"])] if a < e["ts"] < b]
            assert len(hit) == 1
            edge = hit[0][1] if e["ph"] == "s" else hit[0][0]
            assert abs(e["ts"] - edge) == pytest.approx(FLOW_NUDGE_US, abs=1e-6)


def test_no_track_holds_two_spans_at_once(disaggregated: tuple[Path, pd.DataFrame]) -> None:
    path, _ = disaggregated
    events, names = _trace(path)
    for key, spans in _spans(events).items():
        spans.sort()
        # (1e-6 us: ts + dur in floating point)
        assert all(a[1] <= b[0] + 1e-6 for a, b in pairwise(spans)), names[key]


def test_flow_points_need_both_ends_on_shown_tracks() -> None:
    rec = Recorder()
    a, b = rec.track("g0", "n"), rec.track("g1", "n")
    rec.span(a, "prefill", 0.0, 1.0)
    rec.span(b, "decode", 2.0, 3.0)
    rec.flow(0, "s", a, 1.0, "kv")
    rec.flow(0, "f", b, 2.0, "kv")
    rec.flow(1, "s", a, 1.0, "kv")  # no finish: left out
    with pytest.raises(ValueError, match="phase 't'"):
        rec.flow(2, "t", a, 1.0, "kv")
    flows = [e for e in trace_events(rec) if e["ph"] in ("s", "f")]
    assert [(e["ph"], e["id"], e["ts"]) for e in flows] == [
        ("s", 0, 1.0 * US - FLOW_NUDGE_US),
        ("f", 0, 2.0 * US + FLOW_NUDGE_US),
    ]
    assert flows[1]["bp"] == "e"


def test_cluster_jobs_sit_on_the_gpus_they_hold(tmp_path: Path) -> None:
    """GPU-seconds on the trace's GPU tracks equal the allocations table's; no GPU holds
    two groups at once; only nodes that ran a job get tracks."""
    args = ["run", "cuckoo", "-q", "--out", str(tmp_path / "r"), "--trace",
            str(tmp_path / "t.json"), "--set", "workload.jobs.num_jobs=20"]  # fmt: skip
    assert main(args) == 0
    events, names = _trace(tmp_path / "t.json")
    spans = _spans(events)
    allocs = pd.read_csv(tmp_path / "r" / "tables" / "allocations.csv")
    held_s = float((allocs["gpus"] * (allocs["end_s"] - allocs["start_s"])).sum())
    traced_s = sum(b - a for s in spans.values() for a, b in s) / US
    assert traced_s == pytest.approx(held_s, rel=1e-9)
    for key, s in spans.items():
        s.sort()
        assert all(x[1] <= y[0] * (1 + 1e-12) for x, y in pairwise(s)), names[key]
    gpu_tracks = [n for n in names.values() if n.startswith("node")]
    assert gpu_tracks and all(spans[k] for k, n in names.items() if n.startswith("node"))
    assert "placeholder/gpu (device)" not in names.values()  # the unused cluster device
    jobs = {e["name"] for e in events if e["ph"] == "X"}
    assert all(name.startswith("j") for name in jobs)


def test_touching_spans_never_overlap_in_the_trace_text() -> None:
    """Spans that touch in simulated time touch exactly in the trace as written (whole
    nanoseconds): read back as decimals, each ends where the next begins, however the
    float times round (0.1 + 0.2, sums of thirds, times near a day)."""
    import json
    from decimal import Decimal

    from hetsim.simulator.trace import trace_json

    rec = Recorder()
    track = rec.track("g", "n")
    t = 86_399.0
    edges = [t]
    for k in range(200):
        t = t + (0.1 + 0.2) / (k % 7 + 3) + 1e-7 * k
        edges.append(t)
    for a, b in pairwise(edges):
        rec.span(track, "busy", a, b)
    doc = json.loads(trace_json(rec), parse_float=Decimal)
    xs = sorted((e["ts"], e["dur"]) for e in doc["traceEvents"] if e.get("ph") == "X")
    assert len(xs) == 200
    for (ts, dur), (nxt, _) in pairwise(xs):
        assert ts + dur == nxt
        assert dur > 0
