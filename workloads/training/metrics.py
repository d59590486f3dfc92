"""Summary metrics, the fit check and model sizing of the ``training`` workload."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from hetsim.devices.carbon import CARBON_METRICS
from hetsim.devices.memory import MemoryPool
from hetsim.workloads.training.model import (
    STATE_BYTES_PER_PARAM,
    TransformerSpec,
    activation_bytes_per_layer,
)
from hetsim.workloads.training.ops import Lifetimes

if TYPE_CHECKING:
    from hetsim.workloads.training.exec import IterationStats

METRICS = {
    "layers": "transformer layers of the model run (set by size_x_hbm when given)",
    "params": "parameters: layers x (4h^2 + 2hf) + 2vh",
    "footprint_x_hbm": "(16 B/param model states + peak live activations with nothing "
    "swapped or recomputed) / device memory capacity, first iteration's sequence",
    "iterations_done": "iterations that completed",
    "oom": "1 if an allocation did not fit and the plan did not handle it (run stopped)",
    "failure": "the allocation that failed, empty if none",
    "iteration_s": "mean step time of the completed iterations",
    "last_iteration_s": "step time of the last completed iteration",
    "stall_s": "total time the compute stream waited for swap-ins and forced swap-outs",
    "recompute_s": "total time spent rerunning forward ops to rematerialise dropped tensors",
    "profile_s": "total profiler overhead (per-op hook cost in profiled iterations)",
    "profiled_iterations": "iterations run with the profiler on",
    "d2h_bytes": "bytes copied device-to-host (swap-outs, forced included)",
    "h2d_bytes": "bytes copied host-to-device (swap-ins)",
    "forced_swaps": "tensors copied out synchronously because an allocation did not fit",
    "forced_events": "allocations that did not fit and were served by the runtime's fallback "
    "(each charged oom_fallback.sync_s)",
    "last_forced_swaps": "forced swaps in the last completed iteration (0: the plan alone "
    "fits; -1: none completed)",
    "plan_misses": "planned swaps whose tensor the executor could not match (summed)",
    "peak_bytes": "highest device memory in use (states + activations) over the run",
    "offload_d2h_bytes": "gradient bytes copied device-to-host for the host optimizer "
    "(2 B/param per offloaded iteration)",
    "offload_h2d_bytes": "parameter bytes copied host-to-device after the host optimizer "
    "(2 B/param per offloaded iteration)",
    "cpu_adam_s": "total CPU-Adam time of the offloaded iterations (host roofline)",
    "device_state_bytes": "model-state bytes held on the device at the end: 16 B/param, "
    "or 4 B/param with the optimizer offloaded",
    "mfu": "forward+backward FLOPs of the completed iterations / (their time x peak FLOP/s)",
    "model_error_p50": "kernel-fit residual p50, weighted by each kernel class's share of the "
    "first iteration's op time (absent under cost_model: roofline; docs/metrics.md)",
    "model_error_p90": "as model_error_p50, the p90 residual",
    "model_fits": "least trusted kernel fit used: calibrated, borrowed or uncalibrated "
    "(roofline under cost_model: roofline)",
    "kernel_classes": "kernel classes the ops were priced by",
    "borrowed_fits": "device.class<-lender for every class not fitted on this device; "
    "device.sustained<-lender for a borrowed clock ratio",
    "fit_extrapolated": "a kernel class used beyond the sizes it was fitted on (the error "
    "band then understates the error); empty if none",
    "energy_per_step_J": "GPU energy per completed iteration, J: idle power over the steps "
    "plus, over each step less its swap stalls, memory_W and the model FLOPs' compute "
    "utilisation's share of the way to the power limit (devices/power.py); host not included",
    "avg_power_W": "GPU energy over the completed iterations / their time, W",
    "peak_power_W": "GPU draw while kernels run (the steps' compute utilisation), W",
    "power_limit_W": "the GPU's power limit in effect: its TDP, or its power_cap_w",
    **CARBON_METRICS,
    "carbon_per_step_g": "carbon_g / completed iterations, gCO2e",
}


class TrainingRun(Protocol):
    """What the summary reads of a training run
    (workloads.training.workload.TrainingWorkload): the model run, the device memory pool
    and the statistics of the completed iterations."""

    #: the model run (its layers possibly set by ``size_x_hbm``)
    model: TransformerSpec
    #: the device's memory pool (capacity, peak and final use)
    pool: MemoryPool
    #: one entry per completed iteration
    stats: list[IterationStats]
    #: the allocation that failed, empty if none
    failure: str


def layers_for_size(model: TransformerSpec, size_x_hbm: float, capacity_bytes: int) -> int:
    """Layers whose footprint (states + all layers' stored activations) is closest to
    ``size_x_hbm`` times the capacity (at least one)."""
    m = model
    act = activation_bytes_per_layer(
        m.seq_len, m.micro_batch, m.hidden, m.heads, m.ffn, flash=m.flash_attention
    )
    per_layer = STATE_BYTES_PER_PARAM * m.params_per_layer + act
    fixed = STATE_BYTES_PER_PARAM * m.embedding_params
    return max(1, round((size_x_hbm * capacity_bytes - fixed) / per_layer))


def fit_check(model: TransformerSpec, seqs: list[Lifetimes], pool: MemoryPool,
              state_bytes_per_param: int = STATE_BYTES_PER_PARAM) -> None:  # fmt: skip
    """Raise ValueError when even swapping every activation cannot fit an op's working set
    next to the device's model states (16 B/param, 4 with the optimizer offloaded)."""
    states = state_bytes_per_param * model.params
    for lt in seqs:
        seq = lt.seq
        ws = [sum(seq.t_size[t] for t in seq.op_ins[i] + seq.op_outs[i]) for i in range(seq.n_ops)]
        i = int(np.argmax(ws))
        need = states + ws[i]
        if need > pool.capacity_bytes:
            names = [seq.t_key[t][1] for t in seq.op_ins[i] + seq.op_outs[i]]
            raise ValueError(
                f"model cannot fit even with every activation swapped: model states "
                f"{states} B ({state_bytes_per_param} B/param x {model.params} params) "
                f"+ op {seq.op_name[i]!r} "
                f"(layer {seq.op_layer[i]}) tensors {names} = {ws[i]} B need {need} B, "
                f"{need - pool.capacity_bytes} B over the {pool.capacity_bytes} B of "
                f"{pool.name}"
            )


def summarise(w: TrainingRun, fwd_peak: int, flops: list[float],
              peak_flops: float) -> dict[str, float | int | str]:  # fmt: skip
    """One summary row (see :data:`METRICS`)."""
    st = w.stats
    steps = np.array([s.step_s for s in st])
    total = float(steps.sum())
    return {
        "layers": w.model.layers,
        "params": w.model.params,
        "footprint_x_hbm": (w.model.state_bytes() + fwd_peak) / w.pool.capacity_bytes,
        "iterations_done": len(st),
        "oom": int(bool(w.failure)),
        "failure": w.failure,
        "iteration_s": float(steps.mean()) if len(st) else float("nan"),
        "last_iteration_s": float(steps[-1]) if len(st) else float("nan"),
        "stall_s": float(sum(s.stall_s for s in st)),
        "recompute_s": float(sum(s.recompute_s for s in st)),
        "profile_s": float(sum(s.profile_s for s in st)),
        "profiled_iterations": int(sum(s.profile_s > 0 for s in st)),
        "d2h_bytes": int(sum(s.d2h_bytes for s in st)),
        "h2d_bytes": int(sum(s.h2d_bytes for s in st)),
        "forced_swaps": int(sum(s.forced_swaps for s in st)),
        "forced_events": int(sum(s.forced_events for s in st)),
        "last_forced_swaps": int(st[-1].forced_swaps) if st else -1,
        "plan_misses": int(sum(s.plan_misses for s in st)),
        "peak_bytes": w.pool.peak_bytes,
        "offload_d2h_bytes": int(sum(s.offload_d2h_bytes for s in st)),
        "offload_h2d_bytes": int(sum(s.offload_h2d_bytes for s in st)),
        "cpu_adam_s": float(sum(s.cpu_adam_s for s in st)),
        "device_state_bytes": w.pool.usage_by_tag().get("states", 0),
        "mfu": sum(flops) / (total * peak_flops) if total > 0 else 0.0,
    }
