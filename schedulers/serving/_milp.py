"""Integer programs of deployments: cheapest replica counts meeting a goodput target
(Cauchy), and Melange's slice-to-GPU-type assignment."""

from __future__ import annotations

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp


def min_cost_counts(
    cost: np.ndarray, goodput: np.ndarray, use: np.ndarray, avail: np.ndarray, demand: float
) -> np.ndarray | None:
    """Integer ``x >= 0`` minimising ``cost @ x`` subject to ``goodput @ x >= demand`` and
    ``use @ x <= avail`` (``use``: GPUs of each type per unit, types x units).

    Solved with scipy's HiGHS MILP; None when no such ``x`` exists.
    """
    k = len(cost)
    if k == 0:
        return None
    upper = np.full(k, np.inf)
    for t in range(use.shape[0]):
        pos = use[t] > 0
        upper[pos] = np.minimum(upper[pos], np.floor(avail[t] / use[t][pos]))
    cons = [
        LinearConstraint(goodput[None, :], lb=demand, ub=np.inf),
        LinearConstraint(use, lb=-np.inf, ub=avail),
    ]
    res = milp(cost, constraints=cons, integrality=np.ones(k), bounds=Bounds(0, upper))
    if res.status != 0 or res.x is None:
        return None
    return np.rint(res.x).astype(int)


def slice_assignment(
    cost: np.ndarray, load: np.ndarray, use: np.ndarray, avail: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Melange's integer program (Griggs et al. 2024, ``melange/solver.py``), with
    availability caps added: integer units ``x_g >= 0`` and a binary assignment of
    every slice ``s`` to exactly one unit type ``g`` minimising ``cost @ x`` subject to
    ``sum_s a_sg load_sg <= x_g`` (the slices' loads fit the units) and
    ``use @ x <= avail``.

    ``load``: slices x units, the fraction of one unit a slice occupies (its rate over
    the unit's max rate for its bucket; ``inf`` where the unit cannot serve it).
    Returns (x, the unit of each slice), or None when infeasible. Scipy HiGHS MILP.
    """
    n_s, n_g = load.shape
    if n_g == 0 or n_s == 0:
        return None
    ok = np.isfinite(load)
    coef = np.where(ok, load, 0.0)
    n = n_g + n_s * n_g  # variables: x (n_g), then a row-major (slice, unit)
    one = np.zeros((n_s, n))
    fit = np.zeros((n_g, n))
    for s in range(n_s):
        one[s, n_g + s * n_g : n_g + (s + 1) * n_g] = 1.0
    for g in range(n_g):
        fit[g, g] = -1.0
        fit[g, n_g + g :: n_g] = coef[:, g]
    cap = np.hstack([use, np.zeros((use.shape[0], n_s * n_g))])
    cons = [
        LinearConstraint(one, lb=1.0, ub=1.0),
        LinearConstraint(fit, lb=-np.inf, ub=0.0),
        LinearConstraint(cap, lb=-np.inf, ub=avail),
    ]
    upper = np.concatenate([np.full(n_g, np.inf), ok.astype(float).ravel()])
    c = np.concatenate([cost, np.zeros(n_s * n_g)])
    res = milp(c, constraints=cons, integrality=np.ones(n), bounds=Bounds(0, upper))
    if res.status != 0 or res.x is None:
        return None
    x = np.rint(res.x[:n_g]).astype(int)
    a = np.rint(res.x[n_g:]).reshape(n_s, n_g)
    return x, a.argmax(axis=1)
