"""Gavel (Narayanan et al., OSDI'20): heterogeneity-aware max-min fairness as an LP, then
round-based dispatch by priority.

The LP (Gavel's ``MaxMinFairnessPolicyWithPerf``, solved here with scipy's HiGHS instead
of CVXPY) chooses time fractions ``X[j, t]`` of every active job (running or waiting) on
every GPU type::

    maximise  min_j  sf_j * sum_t X[j, t] * T[j, t] / T_eq[j]
    s.t.      sum_t X[j, t] <= 1,   sum_j sf_j * X[j, t] <= N_t,   X >= 0,
              X[j, t] = 0 where the job may not use type t

with ``T[j, t] = 1 / iteration time`` (the mechanism's estimate for the job's group on
type t), ``sf_j`` its GPU count (Gavel's scale factor), ``N_t`` the GPUs of type t, and
``T_eq[j] = sum_t T[j, t] * N_t / sum N`` the throughput of an equal (proportional) share
(Gavel's ``ProportionalPolicy``, whose rows are ``N_t / sum N`` after its normalisation).

Dispatch (Gavel's round mechanism): priority ``X[j, t] / f[j, t]`` where ``f`` is the
fraction of the job's time in the system spent on type t (the paper's "fraction of rounds
received"; Gavel's code divides by the type's total worker time since the last
allocation reset instead: a simplification here); a job that has not yet run on t gets
``X * 1e9`` (Gavel's code), a job with ``X = 0`` gets 0. Types are visited in inventory
order (Gavel's code: v100, p100, k80); on each, candidates sorted by (priority, X,
queue rank) take GPUs while they fit; a job is placed at most once. Zero-priority jobs
still fill idle GPUs (work conserving, as in Gavel's code except for its FIFO policy).

Time-sharing needs the mechanism's preemptive rounds (``execution.preemption: true``):
the policy declares ``sees_running`` so the mechanism hands it the running groups and,
at each round, lets it re-decide them; ``execution.round_s`` plays Gavel's round length
(360 s in the paper). Simplified: no space-sharing pairs (packing is the packing point's
job), no water-filling, priority weights all 1.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from hetsim.simulator.registry import policies
from hetsim.workloads.cluster.view import AllocationView, GroupView

#: priority of a job with a positive allocation that has not yet run on the type (Gavel)
UNSERVED_PRIORITY_SCALE = 1e9


class GavelParams(BaseModel):
    """Gavel's dispatch switches."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    work_conserving: bool = Field(
        True, description="zero-priority jobs may fill GPUs left idle (Gavel's code)"
    )
    heterogeneity_aware: bool = Field(
        True,
        description="false: the LP sees throughput 1 on every allowed type (Gavel's "
        "heterogeneity-agnostic MaxMinFairnessPolicy, the paper's baseline)",
    )
    preempt_at_rounds: bool = Field(
        False,
        description="re-decide running jobs at every round even with "
        "execution.preemption off (Gavel always runs preemptive rounds; lets one sweep "
        "set Gavel's rounds without making every other policy preempt)",
    )


def throughput_matrix(groups: tuple[GroupView, ...], n_types: int) -> np.ndarray:
    """(U, T) iterations per second of each unit on each type (0 where not allowed)."""
    thr = np.zeros((len(groups), n_types))
    for u, g in enumerate(groups):
        for t in range(n_types):
            it = g.iter_s[t]
            if g.allowed[t] and np.isfinite(it) and it > 0:
                thr[u, t] = 1.0 / it
    return thr


def max_min_lp(thr: np.ndarray, sf: np.ndarray, gpus: np.ndarray) -> tuple[np.ndarray, float]:
    """Gavel's max-min fairness LP over time fractions; returns (X, optimal min value).

    Rows of ``thr`` without any usable type get X = 0 and do not bound the minimum.
    """
    n_units, n_types = thr.shape
    x = np.zeros((n_units, n_types))
    share = gpus / max(float(gpus.sum()), 1e-12)
    t_eq = thr @ share
    live = np.flatnonzero(t_eq > 0)
    if len(live) == 0:
        return x, 0.0
    m = len(live)
    coef = sf[live, None] * thr[live] / t_eq[live, None]  # (m, T)
    nv = m * n_types + 1  # X flattened row-major, then z
    rows, cols, vals = [], [], []
    for i in range(m):  # z - sum_t coef x <= 0
        rows += [i] * (n_types + 1)
        cols += [i * n_types + t for t in range(n_types)] + [nv - 1]
        vals += [-float(c) for c in coef[i]] + [1.0]
    for i in range(m):  # sum_t x <= 1
        rows += [m + i] * n_types
        cols += [i * n_types + t for t in range(n_types)]
        vals += [1.0] * n_types
    for t in range(n_types):  # sum_j sf_j x <= N_t
        rows += [2 * m + t] * m
        cols += [i * n_types + t for i in range(m)]
        vals += [float(sf[j]) for j in live]
    a_ub = coo_matrix((vals, (rows, cols)), shape=(2 * m + n_types, nv))
    b_ub = np.concatenate([np.zeros(m), np.ones(m), gpus.astype(float)])
    bounds = [(0.0, 1.0 if thr[j, t] > 0 else 0.0) for j in live for t in range(n_types)]
    c = np.zeros(nv)
    c[-1] = -1.0
    res = linprog(c, A_ub=a_ub.tocsr(), b_ub=b_ub, bounds=[*bounds, (0.0, None)], method="highs")
    if res.status != 0:
        raise RuntimeError(f"Gavel LP failed: {res.message}")
    x[live] = np.clip(res.x[:-1].reshape(m, n_types), 0.0, 1.0)
    return x, float(res.x[-1])


def priorities(x: np.ndarray, received_s: np.ndarray, active_s: np.ndarray) -> np.ndarray:
    """Gavel's round priority X / (fraction of the job's time spent on the type)."""
    frac = received_s / np.maximum(active_s, 1e-12)[:, None]
    served = frac > 0
    out = np.where(served, x / np.where(served, frac, 1.0), x * UNSERVED_PRIORITY_SCALE)
    return np.where(x > 0, out, 0.0)


def dispatch(
    groups: tuple[GroupView, ...], x: np.ndarray, prio: np.ndarray, free: list[int],
    work_conserving: bool, type_order: list[int] | None = None,
) -> list[int | None]:  # fmt: skip
    """Per type in ``type_order`` (default: inventory order), the highest-priority units
    that fit take its GPUs."""
    out: list[int | None] = [None] * len(groups)
    for t in type_order if type_order is not None else range(len(free)):
        order = sorted(range(len(groups)), key=lambda u: (-prio[u, t], -x[u, t], u))
        for u in order:
            g = groups[u]
            if out[u] is not None or not g.allowed[t] or g.gpus > free[t]:
                continue
            if prio[u, t] <= 0 and not work_conserving:
                continue
            out[u] = t
            free[t] -= g.gpus
    return out


@policies.register("cluster.allocation", "gavel")
class GavelLPAllocation:
    """Gavel's heterogeneity-aware max-min fairness LP with round-based priority dispatch."""

    Params = GavelParams
    #: the mechanism hands this policy the running groups and lets it re-decide them at
    #: preemptive rounds
    sees_running = True

    def __init__(self, params: GavelParams, rng: np.random.Generator) -> None:
        self.params = params
        self.rng = rng
        self._cache: dict[tuple[object, ...], np.ndarray] = {}
        self.lp_solves = 0

    @property
    def preempts_at_rounds(self) -> bool:
        """Whether the mechanism runs this policy's preemptive rounds regardless of
        ``execution.preemption``."""
        return self.params.preempt_at_rounds

    def allocate(self, view: AllocationView) -> list[int | None]:
        """Type index per group (a running group given its own type keeps running)."""
        if not view.groups:
            return []
        seen = {g.members for g in view.groups}
        units = view.groups + tuple(r for r in view.running if r.members not in seen)
        total = np.array(view.total_gpus or view.free_gpus, dtype=float)
        x = self._solve(units, total)[: len(view.groups)]
        recv = np.array([g.received_s or (0.0,) * len(total) for g in view.groups])
        active = np.array([g.active_s for g in view.groups])
        prio = priorities(x, recv, active)
        order = list(range(len(total)))
        if not self.params.heterogeneity_aware:  # Gavel shuffles types for agnostic policies
            self.rng.shuffle(order)
        return dispatch(view.groups, x, prio, list(view.free_gpus), self.params.work_conserving,
                        order)  # fmt: skip

    def _solve(self, units: tuple[GroupView, ...], total: np.ndarray) -> np.ndarray:
        key = (tuple((u.members, u.gpus, u.iter_s) for u in units), tuple(total))
        hit = self._cache.get(key)
        if hit is None:
            thr = throughput_matrix(units, len(total))
            if not self.params.heterogeneity_aware:
                thr = (thr > 0).astype(float)
            sf = np.array([u.gpus for u in units], dtype=float)
            hit, _ = max_min_lp(thr, sf, total)
            self.lp_solves += 1
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = hit
        return hit
