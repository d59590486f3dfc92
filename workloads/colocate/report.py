"""Rows of a multi-workload run: one per workload, and the cluster's."""

from __future__ import annotations

from typing import Any

from hetsim.devices.carbon import CARBON_METRICS, carbon_columns
from hetsim.devices.energy import ENERGY_METRICS, energy_columns
from hetsim.simulator.engine import InvariantViolation
from hetsim.simulator.overload import METRICS as OVERLOAD_METRICS
from hetsim.simulator.overload import load_check
from hetsim.workloads.colocate.energy_split import UNOWNED_METRICS, EnergySplit, carbon_of

CLUSTER_METRICS = {
    "makespan_s": "simulated end time of the run",
    "accelerators": "GPUs and NPUs in the cluster",
    "busy_gpu_hours": "GPU-hours some workload was using a GPU (a serving instance from "
    "its creation to its release; a training gang from its restore to its release)",
    "idle_gpu_hours": "GPU-hours no workload was using a GPU: gpus x makespan - busy",
    "gpu_utilisation": "busy_gpu_hours / (gpus x makespan)",
    "gpu_utilisation_<type>": "the same over the GPUs of one catalogue type",
    "idle_gpu_hours_<type>": "idle GPU-hours of one catalogue type",
    "ownership_changes": "times a GPU passed from one workload to another",
    "arbiter": "the arbiter policy",
    **{k: f"{v} (every device of the cluster, every workload)" for k, v in ENERGY_METRICS.items()},
    **UNOWNED_METRICS,
    **{k: f"{v} (every device of the cluster, every workload)" for k, v in CARBON_METRICS.items()},
}


def member_row(
    sc: Any, name: str, w: Any, end_s: float
) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """The summary row of workload ``name`` (its own metrics, unchanged), its metric
    definitions and its warnings."""
    row: dict[str, Any] = {"scenario": sc.name, "seed": sc.seed, "workload": name,
                           "kind": w.params.kind}  # fmt: skip
    row.update(w.summary(end_s))
    metrics = dict(type(w).metrics)
    notes = list(w.run_warnings(end_s))
    times = w.request_times()
    check = load_check(*times) if times is not None else None
    if check is not None:
        row.update(check.summary())
        metrics.update(OVERLOAD_METRICS)
        if check.overloaded:
            notes.insert(0, check.message())
    return row, metrics, notes


def cluster_row(
    sc: Any,
    cluster: Any,
    ledger: Any,
    used: dict[str, list[tuple[str, float, float]]],
    end_s: float,
    arb: Any,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``cluster`` row: utilisation and idle GPU-hours, overall and per type."""
    accel = cluster.device_names(("gpu", "npu"))
    busy: dict[str, list[tuple[float, float]]] = {d: [] for d in accel}
    for spans in used.values():
        for d, a, b in spans:
            busy.setdefault(d, []).append((a, min(b, end_s)))
    for d, o, a, b in ledger.all_intervals(end_s):  # no usage record: busy while owned
        if o not in used:
            busy[d].append((a, b))
    per_type: dict[str, list[float]] = {}
    for d in accel:
        t = cluster.device(d).spec.name
        s = _union(busy[d])
        per_type.setdefault(t, []).append(s)
    row: dict[str, Any] = {"scenario": sc.name, "seed": sc.seed, "workload": "cluster",
                           "kind": "cluster", "makespan_s": end_s,
                           "accelerators": len(accel)}  # fmt: skip
    total = sum(sum(v) for v in per_type.values())
    cap = len(accel) * end_s
    row["busy_gpu_hours"] = total / 3600
    row["idle_gpu_hours"] = (cap - total) / 3600
    row["gpu_utilisation"] = total / cap if cap > 0 else float("nan")
    for t in sorted(per_type):
        v = per_type[t]
        row[f"gpu_utilisation_{t}"] = sum(v) / (len(v) * end_s) if end_s > 0 else float("nan")
        row[f"idle_gpu_hours_{t}"] = (len(v) * end_s - sum(v)) / 3600
    row.update(energy_columns(cluster, end_s))
    row["ownership_changes"] = ledger.changes
    row["arbiter"] = sc.colocation.arbiter.name
    return row, CLUSTER_METRICS


def attribute_energy(
    split: EnergySplit, ledger: Any, end_s: float, rows: list[dict[str, Any]],
    crow: dict[str, Any], cluster: Any,
) -> None:  # fmt: skip
    """Add each workload's share of the energy and carbon to its row, the unowned rest and
    the whole cluster's carbon to the cluster row; the shares must add up to the
    cluster's ``energy_J``."""
    names = [str(r["workload"]) for r in rows]
    parts, unowned = split.split(ledger, end_s, names)
    type_s = split.owned_type_s(ledger, end_s)
    for r in rows:
        w = str(r["workload"])
        r.update(parts[w])
        r["carbon_attributed_g"] = carbon_of(parts[w]["energy_attributed_J"], end_s,
                                             dict(type_s.get(w, {})), cluster)  # fmt: skip
    crow["energy_unowned_J"] = unowned
    total = sum(p["energy_attributed_J"] for p in parts.values()) + unowned
    if abs(total - float(crow["energy_J"])) > 1e-6 * max(1.0, float(crow["energy_J"])):
        raise InvariantViolation(
            f"energy split: the workloads' shares add to {total:.6g} J, the cluster used "
            f"{float(crow['energy_J']):.6g} J"
        )
    accel_s: dict[str, float] = {}
    for d in cluster.device_names(("gpu", "npu")):
        t = cluster.device(d).spec.name
        accel_s[t] = accel_s.get(t, 0.0) + end_s
    crow.update(carbon_columns(float(crow["energy_J"]), end_s, accel_s, cluster.config.carbon,
                               cluster.load_grid()))  # fmt: skip


def _union(spans: list[tuple[float, float]]) -> float:
    """Total length of the union of intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total
