"""Cost, capacity and per-instance figures of a finished serving run.

Cost integrates each instance's price over its own provisioned lifetime: from
``provisioned_s`` (t = 0 for the initial deployment, the decision time for a
scale-out, so weight loading is paid) to ``released_s`` (after a drain) or the end.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from hetsim.workloads.serving.metrics import by_class

if TYPE_CHECKING:
    from hetsim.simulator.engine import Simulation
    from hetsim.workloads.serving.autoscale import Autoscaler
    from hetsim.workloads.serving.instance import Instance
    from hetsim.workloads.serving.metrics import RequestTimes
    from hetsim.workloads.serving.params import ServingParams

REQUEST_COLUMNS = (
    "request", "arrival_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens",
    "ttft_s", "tpot_s", "e2e_s", "meets_slo", "slo_class", "entry_instance",
    "decode_instance",
)  # fmt: skip
WINDOW_COLUMNS = (
    "start_s", "arrivals", "attainment", "ttft_p90_s", "tpot_p90_s", "instances",
    "gpus", "cost_usd", "tokens", "tokens_per_usd",
)  # fmt: skip


class ServingOutcome(Protocol):
    """What the report reads of a finished serving run
    (workloads.serving.workload.ServingWorkload): its requests, instances, transfers and
    scaling counts."""

    sim: Simulation
    params: ServingParams
    #: per-request arrival, first-token and finish times and lengths
    times: RequestTimes
    #: SLO class names, and each request's class index
    class_names: list[str]
    slo_class: np.ndarray
    #: per request: its entry and decode instance (-1: none)
    entry_of: np.ndarray
    decode_of: np.ndarray
    #: every instance ever started, by number, and the devices of each
    instances: list[Instance]
    placement: list[list[str]]
    #: KV bytes copied between instances, and the duration of each copy (s)
    kv_transfer_bytes: int
    kv_transfer_s: list[float]
    #: when the initial deployment finished loading its weights
    setup_s: float
    #: the scale-out and scale-in counts and the peak GPUs held
    autoscaler: Autoscaler

    def meets(self) -> np.ndarray:
        """Per request: finished within its class's TTFT and TPOT targets."""
        ...

    def price_per_gpu_hour(self, gpu_type: str) -> float:
        """$/GPU-hour of ``gpu_type`` under the run's preset."""
        ...


def lifetime_s(s: Instance, end_s: float) -> tuple[float, float]:
    """(start, stop) of an instance's provisioned time, clipped to [0, end_s]."""
    stop = end_s if s.released_s is None else min(s.released_s, end_s)
    return min(s.provisioned_s, stop), stop


def instance_rows(w: ServingOutcome, end_s: float) -> list[dict[str, Any]]:
    """One row per instance: placement, lifetime, work done, KV use, cost."""
    rows = []
    for s, devs in zip(w.instances, w.placement, strict=True):
        price = w.price_per_gpu_hour(s.cost.spec.name) * s.cost.tp
        a, b = lifetime_s(s, end_s)
        rows.append(
            {
                "instance": s.number, "role": s.role, "group": s.group,
                "gpu_type": s.cost.spec.name, "tp": s.cost.tp, "devices": ";".join(devs),
                "provisioned_s": a, "released_s": b if s.released_s is not None else np.nan,
                "iterations": s.iterations, "tokens_out": s.tokens_out, "busy_s": s.busy_s,
                "utilisation": s.busy_s / (b - a) if b > a else 0.0,
                "preemptions": s.preemptions,
                "kv_capacity_tokens": s.capacity_blocks * s.block_tokens,
                "kv_utilisation": s.kv_utilisation(end_s),
                "kv_peak_utilisation": s.peak_blocks / s.capacity_blocks,
                "request_seconds": s.request_seconds(end_s),
                "prefix_hit_tokens": s.cache.hit_tokens if s.cache else 0,
                "prefix_evicted_blocks": s.cache.evicted_blocks if s.cache else 0,
                "goodput_estimate_rps": s.goodput_rps,
                "usd_per_hour": price, "cost_usd": price * (b - a) / 3600.0,
            }
        )  # fmt: skip
    return rows


def _write_requests(w: ServingOutcome) -> None:
    t = w.times
    table = w.sim.recorder.table("requests", REQUEST_COLUMNS)
    names = np.array(w.class_names)[w.slo_class]
    cols = (
        np.arange(len(t.arrival_s)), t.arrival_s, t.first_token_s, t.finish_s, t.prompt,
        t.output, t.ttft_s(), t.tpot_s(), t.finish_s - t.arrival_s, w.meets(), names,
        w.entry_of, w.decode_of,
    )  # fmt: skip
    for row in zip(*(c.tolist() for c in cols), strict=True):
        table.append(*row)


def _pct(x: np.ndarray, q: float) -> float:
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if len(x) else float("nan")


def write_windows(w: ServingOutcome, end_s: float, per_req: np.ndarray) -> None:
    """Table ``windows``: per ``report_window_s`` of arrival time, the requests that
    arrived in it (their attainment, p90 TTFT/TPOT, tokens), the instances and GPUs
    provisioned at its end, and the cost accrued in it (price x overlap of each
    instance's lifetime with the window); tokens_per_usd = tokens / cost_usd."""
    t, width = w.times, w.params.report_window_s
    table = w.sim.recorder.table("windows", WINDOW_COLUMNS)
    ok = w.meets()
    spans = [(lifetime_s(s, end_s), s) for s in w.instances]
    ttft, tpot = t.ttft_s(), t.tpot_s()
    for k in range(int(np.ceil(end_s / width - 1e-9))):
        a, b = k * width, min((k + 1) * width, end_s)
        sel = (t.arrival_s >= a) & (t.arrival_s < b)
        live = [s for (x, y), s in spans if x <= b and y >= b - 1e-12 and y > x]
        cost = sum(
            w.price_per_gpu_hour(s.cost.spec.name) * s.cost.tp * max(min(y, b) - max(x, a), 0.0)
            for (x, y), s in spans
        ) / 3600.0  # fmt: skip
        tokens = float(per_req[sel].sum())
        table.append(
            a, int(sel.sum()), float(ok[sel].mean()) if sel.any() else float("nan"),
            _pct(ttft[sel], 90), _pct(tpot[sel], 90), len(live),
            sum(s.cost.tp for s in live), cost, tokens, tokens / cost if cost > 0 else 0.0,
        )  # fmt: skip


def _by_type(w: ServingOutcome, end_s: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in w.instances:
        a, b = lifetime_s(s, end_s)
        out[s.cost.spec.name] = out.get(s.cost.spec.name, 0.0) + s.cost.tp * (b - a) / 3600.0
    return out


def _offered_tokens_per_usd(w: ServingOutcome, per_req: np.ndarray) -> float:
    """Tokens of every request over the cost accrued between the first and the last
    arrival (instance lifetimes clipped to that window): the deployment's Tokens/USD at
    the offered load, without the tail after the last arrival in which a finite run
    drains (slow instances finishing the last requests)."""
    first, last = float(w.times.arrival_s.min()), float(w.times.arrival_s.max())
    cost = 0.0
    for s in w.instances:
        a, b = lifetime_s(s, last)
        cost += w.price_per_gpu_hour(s.cost.spec.name) * s.cost.tp * max(b - max(a, first), 0.0)
    cost /= 3600.0
    return float(per_req.sum()) / cost if cost > 0 else 0.0


def run_summary(
    w: ServingOutcome, end_s: float, rows: list[dict[str, Any]]
) -> dict[str, float | int | str]:
    """Cost, capacity and count metrics of :data:`workloads.serving_metrics.METRICS`;
    ``rows``: the run's :func:`instance_rows`."""
    _write_requests(w)
    t = w.times
    hours = end_s / 3600.0
    cost = sum(r["cost_usd"] for r in rows)
    per_req = t.output + (t.prompt if w.params.tokens == "total" else 0)
    write_windows(w, end_s, per_req)
    ok = w.meets()
    by_type = _by_type(w, end_s)
    shapes = Counter(f"{s.role}:{s.cost.spec.name}/tp{s.cost.tp}{_cap(s.cost.spec)}"
                     for s in w.instances)  # fmt: skip
    caps = [s.peak_blocks / s.capacity_blocks for s in w.instances]
    scaler = w.autoscaler
    caches = [s.cache for s in w.instances if s.cache is not None]
    hits, looked = sum(c.hit_tokens for c in caches), sum(c.lookup_tokens for c in caches)
    return {
        "slo_attainment_by_class": by_class(ok, w.slo_class, w.class_names),
        "cost_usd": cost,
        "usd_per_hour": cost / hours if hours > 0 else 0.0,
        "instance_hours": sum(b - a for a, b in (lifetime_s(s, end_s) for s in w.instances))
        / 3600.0,
        "tokens_per_usd": float(per_req.sum()) / cost if cost > 0 else 0.0,
        "usd_per_million_tokens": 1e6 * cost / float(per_req.sum()) if per_req.sum() > 0 else 0.0,
        "goodput_tokens_per_usd": float(per_req[ok].sum()) / cost if cost > 0 else 0.0,
        "offered_tokens_per_usd": _offered_tokens_per_usd(w, per_req),
        "gpus": scaler.gpus_peak,
        "gpu_hours": sum(by_type.values()),
        "gpu_hours_by_type": ";".join(f"{k}:{v:.4g}" for k, v in sorted(by_type.items())),
        "deployment": "+".join(f"{n}x{k}" for k, n in sorted(shapes.items())),
        "instances": len(w.instances),
        "scale_out_events": scaler.scale_out,
        "scale_in_events": scaler.scale_in,
        "kv_utilisation": float(np.mean([s.kv_utilisation(end_s) for s in w.instances])),
        "kv_peak_utilisation": float(max(caps)),
        "preemptions": sum(s.preemptions for s in w.instances),
        "prefill_preemptions": sum(s.prefill_preemptions for s in w.instances),
        "kv_transfer_bytes": w.kv_transfer_bytes,
        "kv_transfer_mean_s": float(np.mean(w.kv_transfer_s)) if w.kv_transfer_s else 0.0,
        "iterations": sum(s.iterations for s in w.instances),
        "setup_s": w.setup_s,
        "price_preset": w.params.price_preset,
        "prefix_hit_rate": hits / looked if looked else 0.0,
        "prefix_saved_tokens": hits,
    }


def _cap(spec: Any) -> str:
    """``@<W>W`` for an instance whose GPUs run under a power cap ("" at the TDP)."""
    cap = getattr(spec, "power_cap_w", None)
    return f"@{cap:g}W" if cap is not None else ""
