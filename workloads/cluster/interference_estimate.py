"""The interference estimator the cluster policies see (``workload.estimates``).

A policy prices a packed group (two or more jobs interleaved on one GPU type) with its
paper's interference model (Muri's measured per-size factors, Cuckoo's stage model); the
run's ground truth is ``execution.interference_model``. On top of the model the
estimator has its own error: the estimate is the model's packed iteration time x g,

    g = (1 + bias) exp(sigma Z - sigma^2 / 2),  Z ~ N(0, 1),

so E[g] = 1 + bias and std(ln g) = sigma. g is drawn once per (member profiles, GPU
type) from a stream seeded by the run's named random stream and the key, so the same
group is misjudged the same way at every pass and in any order of queries (an estimator
that profiles a combination once). A lone job's time is its profiled solo time (g = 1):
the error is on the interference, not on the throughput table.
"""

from __future__ import annotations

import numpy as np

from hetsim.workloads.cluster.params import Estimates


class InterferenceError:
    """Per-(profiles, type) error factors of the packed iteration-time estimate."""

    def __init__(self, spec: Estimates, seed: int) -> None:
        self.bias = spec.interference_bias
        self.sigma = spec.interference_noise_sigma
        self.oracle = spec.interference_oracle
        self.seed = int(seed)
        #: the estimate equals the model's value (no factor to apply)
        self.exact = self.bias == 0.0 and self.sigma == 0.0
        self._cache: dict[tuple[int, tuple[int, ...]], float] = {}

    def factor(self, t: int, profiles: tuple[int, ...]) -> float:
        """g of the group of (sorted) member ``profiles`` on type ``t`` (1 for one job)."""
        if self.exact or len(profiles) < 2:
            return 1.0
        key = (t, profiles)
        hit = self._cache.get(key)
        if hit is None:
            g = 1.0 + self.bias
            if self.sigma > 0.0:
                z = float(
                    np.random.default_rng(
                        [self.seed, len(profiles), t, *profiles]
                    ).standard_normal()
                )
                g *= float(np.exp(self.sigma * z - 0.5 * self.sigma * self.sigma))
            hit = self._cache[key] = g
        return hit
