"""Predicted output lengths (``workload.output_estimate``): what a policy sees of a
request's output length before it runs. Melange's size buckets are cut by them (its
plan and its routing), so no policy routes by the true length unless the scenario
asks for the ``oracle`` (an upper bound)."""

from __future__ import annotations

import numpy as np

from hetsim.workloads.serving.params import OutputEstimate

# prompt-size bucket edges of the history predictor (tokens), Melange's prompt grid
HISTORY_PROMPT_EDGES: tuple[int, ...] = (256, 1024, 2048)


def predict_outputs(
    spec: OutputEstimate,
    prompts: np.ndarray,
    outputs: np.ndarray,
    history: tuple[np.ndarray, np.ndarray],
    rng: np.random.Generator,
) -> np.ndarray:
    """Predicted output tokens of requests (``prompts``, true ``outputs``):

    * ``oracle``: the true lengths;
    * ``lognormal``: true x f, f = (1 + bias) exp(sigma Z - sigma^2 / 2), one Z per
      request (no draw when sigma = 0);
    * ``prompt-history``: the mean output of the ``history`` requests (held-out prompts,
      outputs) in the same prompt-size bucket (:data:`HISTORY_PROMPT_EDGES`; the
      history's overall mean where a bucket is empty), times the same f.

    Rounded, at least 1 token."""
    if spec.kind == "oracle":
        return np.asarray(outputs, dtype=np.int64).copy()
    if spec.kind == "lognormal":
        base = np.asarray(outputs, dtype=float)
    else:
        h_prompt, h_out = history
        h_key = np.searchsorted(HISTORY_PROMPT_EDGES, h_prompt, side="right")
        overall = float(np.mean(h_out))
        means = np.array([
            float(h_out[h_key == k].mean()) if (h_key == k).any() else overall
            for k in range(len(HISTORY_PROMPT_EDGES) + 1)
        ])  # fmt: skip
        base = means[np.searchsorted(HISTORY_PROMPT_EDGES, prompts, side="right")]
    sigma = spec.noise_sigma
    factor = np.full(len(base), 1.0 + spec.bias)
    if sigma > 0.0:
        factor = factor * np.exp(sigma * rng.standard_normal(len(base)) - 0.5 * sigma * sigma)
    return np.maximum(np.rint(base * factor), 1).astype(np.int64)
