"""Summary metrics of the serving workload, each with its written definition."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsim.devices.carbon import CARBON_METRICS
from hetsim.devices.energy import ENERGY_METRICS

METRICS: dict[str, str] = {
    "model_error_p50": "cost model's expected relative error of the run's times: the "
    "kernel fits' median |predicted/measured - 1|, weighted by each kernel class's share "
    "of GPU time, widest over the deployed configs (a lower bound on end-to-end error: "
    "see docs/fidelity/report.md)",
    "model_error_p90": "as model_error_p50, the fits' 90th percentiles",
    "model_fits": "least trusted kernel fit used: calibrated (fitted on this GPU), "
    "borrowed (another GPU's efficiencies) or uncalibrated (catalogue roofline)",
    "kernel_classes": "kernel classes (and collective) the run's iterations were priced with",
    "borrowed_fits": "GPU.class<-device for every kernel class priced with another device's fit; "
    "GPU.sustained<-device and GPU.gemm.<format>_scale<-device for a clock ratio or GEMM "
    "format scale measured on another device",
    "requests": "requests completed",
    "throughput_rps": "requests / (last finish_s - first arrival_s)",
    "output_tokens_per_s": "output tokens of completed requests / "
    "(last finish_s - first arrival_s)",
    "ttft_mean_s": "mean of TTFT = first_token_s - arrival_s (first token: end of the prefill)",
    "ttft_p50_s": "median TTFT",
    "ttft_p90_s": "90th percentile of TTFT",
    "ttft_p99_s": "99th percentile of TTFT",
    "tpot_mean_s": "mean of TPOT = (finish_s - first_token_s) / (output_tokens - 1), "
    "requests with more than one output token",
    "tpot_p50_s": "median TPOT",
    "tpot_p90_s": "90th percentile of TPOT",
    "tpot_p99_s": "99th percentile of TPOT",
    "e2e_p50_s": "median of E2E = finish_s - arrival_s",
    "e2e_p90_s": "90th percentile of E2E",
    "e2e_p99_s": "99th percentile of E2E",
    "slo_attainment": "fraction of requests with TTFT <= and TPOT <= their class's targets "
    "(slo_classes; slo.ttft_s and slo.tpot_s without classes; a one-token request meets "
    "TPOT)",
    "slo_attainment_by_class": "'class:attainment' pairs joined by ';': the slo_attainment "
    "of each SLO class's requests against that class's targets ('default' without classes)",
    "goodput_rps": "SLO-meeting requests / (last finish_s - first arrival_s)",
    "cost_usd": "sum over instances of GPUs x $/GPU-hour (price_preset) x provisioned "
    "hours; an instance is provisioned from its start (t = 0, or its scale-out; weight "
    "loading included) to its release after a drain, or to the end",
    "usd_per_hour": "cost_usd / run hours (for a static deployment: the sum over "
    "instances of GPUs x $/GPU-hour)",
    "instance_hours": "sum over instances of provisioned hours",
    "tokens_per_usd": "tokens served (output, or prompt + output if tokens = total) / cost_usd",
    "usd_per_million_tokens": "1e6 x cost_usd / tokens served (tokens as in tokens_per_usd)",
    "goodput_tokens_per_usd": "tokens of SLO-meeting requests / cost_usd",
    "offered_tokens_per_usd": "tokens of every request / cost accrued between the first and "
    "the last arrival (instance lifetimes clipped to that window; excludes the drain tail "
    "of a finite run)",
    "gpus": "most GPUs provisioned at once",
    "gpu_hours": "sum over instances of GPUs x provisioned hours",
    "gpu_hours_by_type": "'type:hours' pairs joined by ';'",
    "deployment": "every instance provisioned over the run as 'count x role:type/tpN', "
    "with '@<W>W' for GPUs under a power cap, joined by '+'",
    "instances": "instances provisioned over the run (scale-outs included)",
    "scale_out_events": "units (combo replicas or colocated instances) added by the scaling policy",
    "scale_in_events": "units the scaling policy drained",
    "kv_utilisation": "mean over instances of time-averaged used / total KV blocks",
    "kv_peak_utilisation": "max over instances of peak used / total KV blocks",
    "preemptions": "decode sequences preempted (recompute) for lack of KV blocks",
    "prefill_preemptions": "partial (chunked) prefills preempted (recompute) to free KV blocks "
    "when no decode ran and no prefill chunk fitted",
    "kv_transfer_bytes": "bytes of KV cache moved from prefill to decode instances "
    "(prompt tokens x kv_bytes_per_token per hand-off)",
    "kv_transfer_mean_s": "mean time from prefill end to KV arrival at the decode instance",
    "iterations": "batch iterations run, all instances",
    "setup_s": "time the last instance finished loading its weights",
    "price_preset": "name of the $/GPU-hour preset",
    "prefix_hit_rate": "prefix cache (prefix_cache: true): prompt tokens found cached / prompt "
    "tokens of the prefills that looked up a cached prefix (every first prefill and "
    "re-prefill on a colocated or prefill instance); 0 with the cache off",
    "prefix_saved_tokens": "prefill tokens skipped because their KV blocks were cached "
    "(the numerator of prefix_hit_rate)",
    **ENERGY_METRICS,
    "energy_per_request_J": "energy_accelerator_J / requests completed (the whole run, "
    "warm-up and idle time included), J",
    "energy_per_output_token_J": "energy_accelerator_J / output tokens of completed requests, "
    "J (GPU energy, as the ML.ENERGY benchmark reports it)",
    "tokens_per_J": "output tokens of completed requests / energy_accelerator_J",
    "energy_deployed_J": "energy of the GPUs the deployment placed instances on (idle "
    "over the whole run plus their iterations' draw), J: energy_accelerator_J without the "
    "cluster's unused GPUs",
    "tokens_per_J_deployed": "output tokens of completed requests / energy_deployed_J",
    **CARBON_METRICS,
    "carbon_per_request_g": "carbon_g / requests completed, gCO2e",
    "carbon_per_output_token_g": "carbon_g / output tokens of completed requests, gCO2e",
}


@dataclass(frozen=True)
class RequestTimes:
    """Per-request arrays of a run (NaN where a request did not finish)."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray

    def ttft_s(self) -> np.ndarray:
        """first_token_s - arrival_s."""
        return self.first_token_s - self.arrival_s

    def tpot_s(self) -> np.ndarray:
        """(finish_s - first_token_s) / (output - 1); NaN for one-token requests."""
        steps = (self.output - 1).astype(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(steps > 0, (self.finish_s - self.first_token_s) / steps, np.nan)

    def subset(self, keep: np.ndarray) -> RequestTimes:
        """The requests where ``keep`` is true."""
        return RequestTimes(self.arrival_s[keep], self.first_token_s[keep],
                            self.finish_s[keep], self.prompt[keep], self.output[keep])  # fmt: skip

    def meets(self, ttft_s: float | np.ndarray, tpot_s: float | np.ndarray) -> np.ndarray:
        """Boolean per request: finished within both SLOs (scalars or per request)."""
        tpot = self.tpot_s()
        ok_tpot = np.isnan(tpot) | (tpot <= tpot_s + 1e-12)
        return np.isfinite(self.finish_s) & (self.ttft_s() <= ttft_s + 1e-12) & ok_tpot


def _pct(x: np.ndarray, q: float) -> float:
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if len(x) else 0.0


def by_class(ok: np.ndarray, cls: np.ndarray, names: list[str]) -> str:
    """``slo_attainment_by_class``: 'name:attainment' of each class with requests."""
    parts = [f"{n}:{ok[cls == k].mean():.4g}" for k, n in enumerate(names) if (cls == k).any()]
    return ";".join(parts)


def latency_summary(
    t: RequestTimes, ttft_slo: float | np.ndarray, tpot_slo: float | np.ndarray
) -> dict[str, float]:
    """Latency, throughput and SLO metrics of :data:`METRICS`."""
    done = np.isfinite(t.finish_s)
    span = float(t.finish_s[done].max() - t.arrival_s.min()) if done.any() else 0.0
    ttft, tpot, e2e = t.ttft_s(), t.tpot_s(), t.finish_s - t.arrival_s
    ok = t.meets(ttft_slo, tpot_slo)
    rate = 1.0 / span if span > 0 else 0.0
    return {
        "requests": int(done.sum()),
        "throughput_rps": float(done.sum()) * rate,
        "output_tokens_per_s": float(t.output[done].sum()) * rate,
        "ttft_mean_s": float(np.nanmean(ttft)) if done.any() else 0.0,
        "ttft_p50_s": _pct(ttft, 50),
        "ttft_p90_s": _pct(ttft, 90),
        "ttft_p99_s": _pct(ttft, 99),
        "tpot_mean_s": float(np.nanmean(tpot)) if np.isfinite(tpot).any() else 0.0,
        "tpot_p50_s": _pct(tpot, 50),
        "tpot_p90_s": _pct(tpot, 90),
        "tpot_p99_s": _pct(tpot, 99),
        "e2e_p50_s": _pct(e2e, 50),
        "e2e_p90_s": _pct(e2e, 90),
        "e2e_p99_s": _pct(e2e, 99),
        "slo_attainment": float(ok.mean()) if len(ok) else 0.0,
        "goodput_rps": float(ok.sum()) * rate,
    }
