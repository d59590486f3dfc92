"""Run metrics of the MoE workload: counters kept per phase and the summary row."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hetsim.workloads.metered import metered_metrics
from hetsim.workloads.moe.view import Placement

METRICS: dict[str, str] = {
    "system": "registered names of the gating/placement/prefetch/cache policies",
    "ttft_s": "end of the prefill step (its LM head included); the request arrives at 0",
    "tbt_mean_s": "mean duration of a decode step (time between tokens)",
    "tbt_p99_s": "99th percentile of decode step durations",
    "decode_tokens_per_s": "decode tokens (steps x batch) / total decode time",
    "prefill_tokens_per_s": "prompt tokens / ttft_s",
    "experts_per_token": "decode: mean over (token, MoE layer) of routed experts activated",
    "cache_hit_rate": "decode: activated experts cached or in flight at router time / activated "
    "(unique experts per layer-step)",
    "prefill_hit_rate": "the same over the prefill step",
    "resident_hit_rate": "decode: activated experts already resident (landed) at router time / "
    "activated",
    "inflight_hit_rate": "decode: activated experts still in flight (prefetch under way) at "
    "router time / activated (cache_hit_rate = resident + in flight)",
    "prefetches_cancelled": "stale prefetches cancelled before they started (priority queue)",
    "gpu_expert_share": "activated experts (unique per layer-step, all phases) computed on GPU "
    "/ activated",
    "pcie_bytes": "bytes copied host to GPU: (demand copies + prefetches) x expert bytes",
    "prefetches": "experts copied ahead by the prefetch policy",
    "prefetch_accuracy": "prefetched experts activated in the layer-step they were fetched for "
    "/ prefetches",
    "load_stall_s": "GPU seconds waiting for expert weights to arrive",
    "gpu_busy_frac": "GPU busy seconds (attention, dense, experts, LM head) / end time",
    "cpu_busy_frac": "CPU busy seconds (experts, llama.cpp CPU layers) / end time",
    "pcie_busy_frac": "copy-engine busy seconds / end time",
    "cache_slots": "GPU expert slots allocated over all layers",
    "expert_bytes": "bytes of one routed expert at expert_bits",
    "model_error_p50": "kernel-fit residual p50: the GPU's kernel classes weighted by a "
    "decode token's layer work, the CPU's share (CPU model, no fit) at the uncalibrated "
    "band, weighted by busy time (workloads/moe/trust.py)",
    "model_error_p90": "as model_error_p50, the p90 residual",
    "model_fits": "least trusted fit used: calibrated, borrowed or uncalibrated (any CPU work)",
    "kernel_classes": "GPU kernel classes used (and cpu when the CPU computed)",
    "borrowed_fits": "gpu.class<-lender for every GPU class not fitted on this GPU; "
    "gpu.sustained<-lender and gpu.gemm.<format>_scale<-lender for a borrowed clock ratio "
    "or format scale",
    # energy (workloads/metered.py): each layer-step's busy time on the GPU and the CPU
    **metered_metrics(
        {"output_token": "tokens decoded (decode steps x batch; the prefill's energy included)"},
        "output_token",
    ),
}


@dataclass
class Counters:
    """Totals accumulated layer by layer (keys of the dicts: ``prefill``, ``decode``)."""

    activated_pairs: int = 0
    computed_pairs: int = 0
    token_layers: int = 0
    gpu_busy_s: float = 0.0
    cpu_busy_s: float = 0.0
    stall_s: float = 0.0
    gpu_experts: int = 0
    prefetch_used: int = 0
    experts: dict[str, int] = field(default_factory=lambda: {"prefill": 0, "decode": 0})
    hits: dict[str, int] = field(default_factory=lambda: {"prefill": 0, "decode": 0})
    resident: dict[str, int] = field(default_factory=lambda: {"prefill": 0, "decode": 0})

    def add_layer(
        self, phase: str, mask: np.ndarray, ids: tuple[int, ...], loads: tuple[int, ...],
        hits: int, placed: Placement, copied: int, used: int, gpu_busy_s: float,
        cpu_busy_s: float, stall_s: float,
    ) -> int:  # fmt: skip
        """Account one MoE layer-step; returns its token-expert activations (mask count)."""
        tokens = mask.shape[0]
        if tokens == 1:  # one token: each activated expert (the row's nonzero) has load 1,
            # and check_placement placed each exactly once
            activated = len(ids)
            computed = len(placed.gpu) + len(placed.cpu)
        else:
            by_id = dict(zip(ids, loads, strict=True))
            activated = int(np.count_nonzero(mask))
            computed = sum(map(by_id.__getitem__, placed.gpu)) + sum(
                map(by_id.__getitem__, placed.cpu)
            )
        self.activated_pairs += activated
        self.computed_pairs += computed
        self.token_layers += tokens
        self.experts[phase] += len(ids)
        self.hits[phase] += hits
        self.gpu_experts += len(placed.gpu)
        self.prefetch_used += used
        self.gpu_busy_s += gpu_busy_s
        self.cpu_busy_s += cpu_busy_s
        self.stall_s += stall_s
        return activated


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def summarise(wl: Any, end_s: float) -> dict[str, float | int | str]:
    """The summary row of a finished run."""
    c: Counters = wl.counters
    steps = wl._steps_tbl
    phase = steps.column("phase")
    dur = steps.column("end_s") - steps.column("start_s")
    dec = dur[phase == "decode"] if len(phase) else np.zeros(0)
    pre = steps.column("end_s")[phase == "prefill"] if len(phase) else np.zeros(0)
    ept = steps.column("experts_per_token")
    ept_dec = ept[phase == "decode"] if len(phase) else np.zeros(0)
    res = wl.res
    return {
        "system": wl.policy_names(),
        "ttft_s": float(pre[0]) if len(pre) else 0.0,
        "tbt_mean_s": float(dec.mean()) if len(dec) else 0.0,
        "tbt_p99_s": float(np.percentile(dec, 99)) if len(dec) else 0.0,
        "decode_tokens_per_s": _ratio(len(dec) * wl.params.batch, float(dec.sum())),
        "prefill_tokens_per_s": _ratio(wl.params.prompt_tokens, float(pre[0])) if len(pre) else 0.0,
        "experts_per_token": float(ept_dec.mean()) if len(ept_dec) else float(ept.mean()),
        "cache_hit_rate": _ratio(c.hits["decode"], c.experts["decode"]),
        "prefill_hit_rate": _ratio(c.hits["prefill"], c.experts["prefill"]),
        "resident_hit_rate": _ratio(c.resident["decode"], c.experts["decode"]),
        "inflight_hit_rate": _ratio(c.hits["decode"] - c.resident["decode"], c.experts["decode"]),
        "prefetches_cancelled": res.cancelled,
        "gpu_expert_share": _ratio(c.gpu_experts, c.experts["decode"] + c.experts["prefill"]),
        "pcie_bytes": res.copies * wl.costs.expert_bytes,
        "prefetches": res.prefetches,
        "prefetch_accuracy": _ratio(c.prefetch_used, res.prefetches),
        "load_stall_s": c.stall_s,
        "gpu_busy_frac": _ratio(c.gpu_busy_s, end_s),
        "cpu_busy_frac": _ratio(c.cpu_busy_s, end_s),
        "pcie_busy_frac": _ratio(res.pcie_busy_s, end_s),
        "cache_slots": int(res.slots.sum()),
        "expert_bytes": wl.costs.expert_bytes,
    }
