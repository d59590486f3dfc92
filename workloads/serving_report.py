"""Cost, capacity and per-instance figures of a finished serving run."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from workloads.serving import ServingWorkload

REQUEST_COLUMNS = (
    "request", "arrival_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens",
    "ttft_s", "tpot_s", "e2e_s", "meets_slo",
)  # fmt: skip


def instance_rows(w: ServingWorkload, end_s: float) -> list[dict[str, Any]]:
    """One row per instance: placement, work done, KV use, cost."""
    rows = []
    for s, devs in zip(w.instances, w.placement, strict=True):
        price = w.price_per_gpu_hour(s.cost.spec.name) * s.cost.tp
        rows.append(
            {
                "instance": s.number, "role": s.role, "group": s.group,
                "gpu_type": s.cost.spec.name, "tp": s.cost.tp, "devices": ";".join(devs),
                "iterations": s.iterations, "tokens_out": s.tokens_out, "busy_s": s.busy_s,
                "utilisation": s.busy_s / end_s if end_s > 0 else 0.0,
                "preemptions": s.preemptions,
                "kv_capacity_tokens": s.capacity_blocks * s.block_tokens,
                "kv_utilisation": s.kv_utilisation(end_s),
                "kv_peak_utilisation": s.peak_blocks / s.capacity_blocks,
                "goodput_estimate_rps": s.goodput_rps,
                "usd_per_hour": price, "cost_usd": price * end_s / 3600.0,
            }
        )  # fmt: skip
    return rows


def _write_requests(w: ServingWorkload) -> None:
    t = w.times
    table = w.sim.recorder.table("requests", REQUEST_COLUMNS)
    ok = t.meets(w.slo.ttft_s, w.slo.tpot_s)
    cols = (
        np.arange(len(t.arrival_s)), t.arrival_s, t.first_token_s, t.finish_s, t.prompt,
        t.output, t.ttft_s(), t.tpot_s(), t.finish_s - t.arrival_s, ok,
    )  # fmt: skip
    for row in zip(*(c.tolist() for c in cols), strict=True):
        table.append(*row)


def run_summary(w: ServingWorkload, end_s: float) -> dict[str, float | int | str]:
    """Cost, capacity and count metrics of :data:`workloads.serving_metrics.METRICS`."""
    _write_requests(w)
    t = w.times
    hours = end_s / 3600.0
    usd_h = sum(w.price_per_gpu_hour(s.cost.spec.name) * s.cost.tp for s in w.instances)
    cost = usd_h * hours
    per_req = t.output + (t.prompt if w.params.tokens == "total" else 0)
    ok = t.meets(w.slo.ttft_s, w.slo.tpot_s)
    by_type: dict[str, float] = {}
    for s in w.instances:
        by_type[s.cost.spec.name] = by_type.get(s.cost.spec.name, 0.0) + s.cost.tp * hours
    shapes = Counter(f"{s.role}:{s.cost.spec.name}/tp{s.cost.tp}" for s in w.instances)
    caps = [s.peak_blocks / s.capacity_blocks for s in w.instances]
    return {
        "cost_usd": cost,
        "usd_per_hour": usd_h,
        "tokens_per_usd": float(per_req.sum()) / cost if cost > 0 else 0.0,
        "goodput_tokens_per_usd": float(per_req[ok].sum()) / cost if cost > 0 else 0.0,
        "gpus": sum(s.cost.tp for s in w.instances),
        "gpu_hours": sum(by_type.values()),
        "gpu_hours_by_type": ";".join(f"{k}:{v:.4g}" for k, v in sorted(by_type.items())),
        "deployment": "+".join(f"{n}x{k}" for k, n in sorted(shapes.items())),
        "instances": len(w.instances),
        "kv_utilisation": float(np.mean([s.kv_utilisation(end_s) for s in w.instances])),
        "kv_peak_utilisation": float(max(caps)),
        "preemptions": sum(s.preemptions for s in w.instances),
        "kv_transfer_bytes": w.kv_transfer_bytes,
        "kv_transfer_mean_s": float(np.mean(w.kv_transfer_s)) if w.kv_transfer_s else 0.0,
        "iterations": sum(s.iterations for s in w.instances),
        "setup_s": w.setup_s,
        "price_preset": w.params.price_preset,
    }
