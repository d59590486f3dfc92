"""Energy of one pipeline-parallel iteration (``training-pipeline``): a meter per stage.

A stage stands for its ``tp`` GPUs (one device doing 1/tp of the stage's work), so each
stage gets an :class:`~hetsim.devices.energy_meter.EnergyMeter` on the pricing device's
power model, reported with :func:`~hetsim.devices.energy.meters_report` (a row is one
GPU of the stage) and scaled by ``tp`` for the world. Every scheduled unit is a busy
interval at the compute utilisation of its FLOPs (per TP rank: a forward's GEMM and
causal-attention FLOPs, a backward twice that, full recompute adding the forward) at the
compute roof (:func:`~hetsim.devices.power.compute_roof_flops` at the run's clock
regime), clipped at 1 (:mod:`hetsim.devices.power`). Under SlimPipe's redistribution a
heavy slice's unit runs its FLOPs less the attention it hands over, and the partner's
helper runs share those moved FLOPs at one utilisation (their total over the helpers'
seconds). Between units a stage idles; the P2P sends are not priced as busy time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hetsim.devices.carbon import STEP_CARBON_METRICS, carbon_columns
from hetsim.devices.cluster import Cluster
from hetsim.devices.energy import meters_report, record_tables, report_columns
from hetsim.devices.energy_meter import POWER_TRACK_SUFFIX, EnergyMeter
from hetsim.devices.power import PowerModel
from hetsim.devices.spec import DeviceSpec
from hetsim.simulator.recorder import Recorder
from hetsim.workloads.training.view import Unit

PIPELINE_ENERGY: dict[str, str] = {
    "energy_J": "energy of the iteration over every GPU of the pipeline (stages x tp), J: "
    "each GPU's idle power over the iteration plus, over each of its stage's units, "
    "memory_W and the unit's compute utilisation (its FLOPs at the compute roof) of the "
    "way to the power limit (devices/power.py); host power not included",
    "energy_accelerator_J": "energy_J (the GPUs)",
    "energy_host_J": "0: host power is not modelled",
    "energy_per_step_J": "energy_J (one iteration is one step)",
    "energy_per_token_J": "energy_J / tokens of the iteration (micro_batches x micro_batch "
    "x seq_len)",
    "tokens_per_J": "tokens of the iteration / energy_J",
    "avg_power_W": "mean draw of one GPU over the iteration, W",
    "peak_power_W": "highest draw of one GPU over the iteration, W",
    "avg_power_W_by_type": "'type:W': avg_power_W by GPU type",
    "peak_power_W_by_type": "'type:W': peak_power_W by GPU type",
    "power_limit_W": "the GPU's power limit in effect: its TDP, or the cluster device's "
    "power_cap_w",
    **STEP_CARBON_METRICS,
}
"""Energy columns of the training-pipeline workload."""


def stage_meters(
    pm: PowerModel,
    recorder: Recorder,
    order: Sequence[Sequence[Unit]],
    starts: Sequence[Sequence[float]],
    ends: Sequence[Sequence[float]],
    unit_flops: Any,
    helpers: Sequence[Sequence[tuple[float, float, float]]],
    helper_flops: float,
    roof_flops: float,
) -> list[EnergyMeter]:
    """One meter per stage fed with its units (``unit_flops(unit)`` FLOPs each) and its
    helper runs (``helper_flops`` over all of them) as busy intervals (module doc)."""
    spans = recorder.record_spans
    if spans:
        for d in range(len(order)):
            recorder.track(f"stage{d}{POWER_TRACK_SUFFIX}", group="pipeline", kind="power")
    meters = [EnergyMeter(pm, recorder, f"stage{d}" if spans else "") for d in range(len(order))]
    help_s = sum(b - a for ran in helpers for a, b, _ in ran)
    u_help = helper_flops / (roof_flops * help_s) if roof_flops > 0 and help_s > 0 else 0.0
    for d, meter in enumerate(meters):
        for u, a, b in zip(order[d], starts[d], ends[d], strict=True):
            dur = b - a
            util = unit_flops(u) / (roof_flops * dur) if roof_flops > 0 and dur > 0 else 0.0
            meter.busy(a, b, util)
        for a, b, _ in helpers[d] if helpers else ():
            meter.busy(a, b, u_help)
    return meters


def pipeline_columns(cluster: Cluster, spec: DeviceSpec, meters: list[EnergyMeter],
                     recorder: Recorder, iteration_s: float, tp: int,
                     tokens: float) -> dict[str, Any]:  # fmt: skip
    """The :data:`PIPELINE_ENERGY` columns; writes the ``energy`` (one row per stage: one
    of its GPUs) and, with spans, ``power`` tables."""
    rep = meters_report(((f"stage{d}", spec.name, spec.kind, m) for d, m in enumerate(meters)),
                        iteration_s)  # fmt: skip
    record_tables(recorder, rep)
    one = report_columns(rep)
    total = tp * rep.total_J
    world = tp * len(meters)
    avg = total / world / iteration_s if iteration_s > 0 else float("nan")
    peak = max((r.peak_W for r in rep.rows), default=0.0)
    carbon = carbon_columns(total, iteration_s, {spec.name: world * iteration_s},
                            cluster.config.carbon, cluster.load_grid())  # fmt: skip
    carbon.pop("carbon_g")
    step_g = carbon["carbon_operational_g"] + carbon["carbon_embodied_g"]
    return {
        "energy_J": total,
        "energy_accelerator_J": total,
        "energy_host_J": 0.0,
        "energy_per_step_J": total,
        "energy_per_token_J": total / tokens if tokens > 0 else float("nan"),
        "tokens_per_J": tokens / total if total > 0 else float("nan"),
        "avg_power_W": avg,
        "peak_power_W": peak,
        "avg_power_W_by_type": f"{spec.name}:{avg:.6g}",
        "peak_power_W_by_type": one["peak_power_W_by_type"],
        "power_limit_W": meters[0].model.limit_W if meters else float("nan"),
        **carbon,
        "carbon_per_step_g": step_g,
        "carbon_per_token_g": step_g / tokens if tokens > 0 else float("nan"),
    }


def moved_flops(moved: float, attn_flops: float) -> float:
    """FLOPs of ``moved`` (a share) of a unit's ``attn_flops`` causal attention."""
    return float(np.clip(moved, 0.0, 1.0)) * attn_flops
