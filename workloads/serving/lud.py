"""Per-request acceptance of lexical-unit decoding (LUD, LREC-COLING'24).

A request's acceptance probability ``p`` (the chance that the next look-ahead position
is kept after the previous one) is drawn once per request from a Beta distribution with
mean ``m`` and concentration ``kappa = alpha + beta`` (alpha = m kappa, beta = (1 - m)
kappa; variance m (1 - m) / (kappa + 1)). The instance then draws each step's accepted
tokens as ``min(K, Geometric(1 - p))``. The distribution's parameters are a labelled
reconstruction (see :class:`~workloads.serving.params.LudConfig`).
"""

from __future__ import annotations

import numpy as np

from hetsim.workloads.serving.params import LudConfig

#: largest acceptance probability drawn (Geometric(1 - p) needs 1 - p > 0)
MAX_ACCEPT_P = 1.0 - 1e-9


def lud_acceptance(cfg: LudConfig | None, n: int, rng: np.random.Generator) -> np.ndarray | None:
    """Acceptance probability of each of ``n`` requests (None: standard decoding)."""
    if cfg is None or not cfg.enabled:
        return None
    m, kappa = cfg.accept_p, cfg.accept_concentration
    if kappa is None or m == 0.0:
        return np.full(n, m)
    p = rng.beta(m * kappa, (1.0 - m) * kappa, n)
    return np.minimum(p, MAX_ACCEPT_P)


def expected_accepted(p: np.ndarray | float, lookahead: int) -> np.ndarray:
    """E[min(K, Geometric(1 - p))] = (1 - p^K) / (1 - p) (K at p = 1), elementwise."""
    q = np.asarray(p, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (1.0 - q**lookahead) / (1.0 - q)
    return np.where(q >= 1.0, float(lookahead), out)
