"""Summary metrics of the serving workload, each with its written definition."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

METRICS: dict[str, str] = {
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
    "slo_attainment": "fraction of requests with TTFT <= slo.ttft_s and TPOT <= slo.tpot_s "
    "(a one-token request meets TPOT)",
    "goodput_rps": "SLO-meeting requests / (last finish_s - first arrival_s)",
    "cost_usd": "sum over instances of GPUs x $/GPU-hour (price_preset) x provisioned "
    "hours; instances are provisioned from t = 0 (weight loading included) to the end",
    "usd_per_hour": "sum over instances of GPUs x $/GPU-hour",
    "tokens_per_usd": "tokens served (output, or prompt + output if tokens = total) / cost_usd",
    "goodput_tokens_per_usd": "tokens of SLO-meeting requests / cost_usd",
    "gpus": "GPUs provisioned",
    "gpu_hours": "GPUs x provisioned hours",
    "gpu_hours_by_type": "'type:hours' pairs joined by ';'",
    "deployment": "instances as 'count x role:type/tpN', joined by '+'",
    "instances": "instances provisioned",
    "kv_utilisation": "mean over instances of time-averaged used / total KV blocks",
    "kv_peak_utilisation": "max over instances of peak used / total KV blocks",
    "preemptions": "decode sequences preempted (recompute) for lack of KV blocks",
    "kv_transfer_bytes": "bytes of KV cache moved from prefill to decode instances "
    "(prompt tokens x kv_bytes_per_token per hand-off)",
    "kv_transfer_mean_s": "mean time from prefill end to KV arrival at the decode instance",
    "iterations": "batch iterations run, all instances",
    "setup_s": "time the last instance finished loading its weights",
    "price_preset": "name of the $/GPU-hour preset",
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

    def meets(self, ttft_s: float, tpot_s: float) -> np.ndarray:
        """Boolean per request: finished within both SLOs."""
        tpot = self.tpot_s()
        ok_tpot = np.isnan(tpot) | (tpot <= tpot_s + 1e-12)
        return np.isfinite(self.finish_s) & (self.ttft_s() <= ttft_s + 1e-12) & ok_tpot


def _pct(x: np.ndarray, q: float) -> float:
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if len(x) else 0.0


def latency_summary(t: RequestTimes, ttft_slo: float, tpot_slo: float) -> dict[str, float]:
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
