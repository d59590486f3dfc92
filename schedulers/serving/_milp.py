"""Integer program of a deployment: cheapest replica counts meeting a goodput target."""

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
