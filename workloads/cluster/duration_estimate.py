"""The job-length estimator the cluster policies see (``workload.estimates``).

The mechanism runs every job for its true iteration count; policies see a declared
count, true x f_j with a per-job error factor drawn once from a named random stream
(params.Estimates). Remaining iterations in every view come from here, never from the
true count.
"""

from __future__ import annotations

import numpy as np

from hetsim.workloads.cluster.params import Estimates


def error_factors(spec: Estimates, n: int, rng: np.random.Generator) -> np.ndarray:
    """Per-job factors f = (1 + bias) exp(sigma Z - sigma^2 / 2): E[f] = 1 + bias and
    std(ln f) = sigma (exactly 1 + bias everywhere when sigma = 0; no draw is taken then,
    so the stream is untouched)."""
    sigma = spec.duration_noise_sigma
    if sigma == 0.0:
        return np.full(n, 1.0 + spec.duration_bias)
    z = rng.standard_normal(n)
    return (1.0 + spec.duration_bias) * np.exp(sigma * z - 0.5 * sigma * sigma)


class DurationEstimator:
    """Declared job lengths (true iterations x error factor) and the remaining iterations
    a policy sees: declared - done, at least one whole iteration while the job is not
    finished (a job that overran its declaration still looks one iteration from the end)."""

    def __init__(self, iterations: np.ndarray, factors: np.ndarray) -> None:
        self.declared = np.asarray(iterations, dtype=float) * factors
        self.exact = bool(np.all(factors == 1.0))

    def remaining(self, done_iters: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Estimated remaining iterations of jobs ``ids`` (fractional; exact factors: the
        true remainder, unfloored)."""
        left = self.declared[ids] - done_iters[ids]
        return left if self.exact else np.maximum(left, 1.0)

    def remaining_whole(self, j: int, done: float) -> int:
        """Estimated whole iterations left for job ``j`` (ceil; at least 1 unless exact)."""
        left = int(np.ceil(self.declared[j] - done - 1e-9))
        return left if self.exact else max(1, left)
