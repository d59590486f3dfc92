"""Gavel (Narayanan et al., OSDI'20): heterogeneity-aware max-min fairness as an LP, then
round-based dispatch by priority, optionally with space sharing (measured pairs).

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
(360 s in the paper). Simplified: no water-filling, priority weights all 1.

Space sharing (``space_sharing: true``; Gavel's ``MaxMinFairnessPolicyWithPacking``, run
in the paper as "Gavel w/ SS"): where the run offers measured pairs
(``speeds.pairs_path``, ``AllocationView.combo_iter_s``), the LP's variables are time
fractions ``X[k, t]`` of every job combination k (each active job alone, and every pair
of jobs with equal GPU counts that has a measured pair on some type), with each job's
effective throughput ``sum_{k containing j} sum_t X[k, t] T[k, t, j]``, ``T[k, t, j]``
= 1 / j's own iteration time in k (its pair rate); constraints ``sum_{k containing j}
sum_t X[k, t] <= 1`` per job and ``sum_k sf_k X[k, t] <= N_t`` per type; the objective
and ``T_eq`` as above (from the lone rates). Dispatch is over combinations: per type,
by priority ``X[k, t] / f[k, t]`` (``f``: the share of the combination's time together
in the system it ran on t), a combination placed only if none of its jobs is; a pair
is formed only with a positive allocation (zero-priority fill is for lone jobs). The
chosen pairs go back to the mechanism as :class:`SpaceShared` (a running job that is to
join a new pair is preempted at the round and placed with its partner by the fill).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from hetsim.simulator.registry import policies
from hetsim.workloads.cluster.view import AllocationView, GroupView, SpaceShared

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
    space_sharing: bool = Field(
        False,
        description="Gavel's space sharing: the LP over lone jobs and measured pairs "
        "(needs speeds.pairs_path and execution.max_group_size >= 2; without measured "
        "pairs in the run it has nothing to pair and runs the plain LP)",
    )

    @model_validator(mode="after")
    def _aware_packing(self) -> GavelParams:
        if self.space_sharing and not self.heterogeneity_aware:
            raise ValueError("space_sharing needs heterogeneity_aware: true (Gavel's packed "
                             "policy is heterogeneity-aware)")  # fmt: skip
        return self


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


def max_min_packed_lp(
    combos: list[tuple[int, ...]], rates: np.ndarray, sf: np.ndarray, t_eq: np.ndarray,
    gpus: np.ndarray,
) -> tuple[np.ndarray, float]:  # fmt: skip
    """Gavel's max-min LP with space sharing; returns (X per combination and type, min).

    ``combos``: job indices of each combination (one or two); ``rates[k, t, i]``: steps/s
    of the i-th job of combination k on type t (0: the combination may not run there);
    ``sf``: GPUs per job (a combination takes its first job's); ``t_eq``: each job's
    equal-share throughput (jobs with 0 do not bound the minimum)."""
    n_combos, n_types = rates.shape[:2]
    x = np.zeros((n_combos, n_types))
    first = np.array([c[0] for c in combos], dtype=np.int64)
    second = np.array([c[1] if len(c) > 1 else -1 for c in combos], dtype=np.int64)
    paired = second >= 0
    runs = (rates[:, :, 0] > 0) & (~paired[:, None] | (rates[:, :, 1] > 0))
    k_of, t_of = np.nonzero(runs)  # (combination, type) of every variable
    live = t_eq > 0
    if len(k_of) == 0 or not live.any():
        return x, 0.0
    n_jobs, n_var = len(sf), len(k_of)
    row_of = np.full(n_jobs, -1, dtype=np.int64)
    row_of[live] = np.arange(int(live.sum()))
    m = int(live.sum())
    coef = np.divide(sf, t_eq, out=np.zeros(n_jobs), where=live)
    v = np.arange(n_var)
    parts_r, parts_c, parts_v = [], [], []
    for slot, job in ((0, first[k_of]), (1, second[k_of])):
        has = job >= 0
        j, vv = job[has], v[has]
        rate = rates[k_of[has], t_of[has], slot]
        obj = row_of[j] >= 0  # z - sum coef x <= 0 (jobs that bound the minimum)
        parts_r += [row_of[j][obj], m + j]  # and the job's time: sum <= 1
        parts_c += [vv[obj], vv]
        parts_v += [-coef[j][obj] * rate[obj], np.ones(len(j))]
    parts_r += [m + n_jobs + t_of, np.arange(m)]  # GPUs of each type; z's column
    parts_c += [v, np.full(m, n_var)]
    parts_v += [sf[first[k_of]], np.ones(m)]
    a_ub = coo_matrix(
        (np.concatenate(parts_v), (np.concatenate(parts_r), np.concatenate(parts_c))),
        shape=(m + n_jobs + n_types, n_var + 1),
    )
    b_ub = np.concatenate([np.zeros(m), np.ones(n_jobs), gpus.astype(float)])
    c = np.zeros(n_var + 1)
    c[-1] = -1.0
    bounds = [(0.0, 1.0)] * n_var + [(0.0, None)]
    res = linprog(c, A_ub=a_ub.tocsr(), b_ub=b_ub, bounds=bounds, method="highs")
    if res.status != 0:
        raise RuntimeError(f"Gavel space-sharing LP failed: {res.message}")
    x[k_of, t_of] = np.clip(res.x[:-1], 0.0, 1.0)
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
        self._shared_cache: dict[
            tuple[object, ...], tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]
        ] = {}
        self._rate_cache: dict[tuple[int, ...], np.ndarray] = {}
        self.lp_solves = 0

    @property
    def preempts_at_rounds(self) -> bool:
        """Whether the mechanism runs this policy's preemptive rounds regardless of
        ``execution.preemption``."""
        return self.params.preempt_at_rounds

    def allocate(self, view: AllocationView) -> list[int | None] | SpaceShared:
        """Type index per group (a running group given its own type keeps running); with
        space sharing, also the pairs to co-locate."""
        if not view.groups:
            return []
        seen = {g.members for g in view.groups}
        units = view.groups + tuple(r for r in view.running if r.members not in seen)
        total = np.array(view.total_gpus or view.free_gpus, dtype=float)
        if self.params.space_sharing and view.combo_iter_s is not None:
            return self._allocate_shared(view, units, total)
        x = self._solve(units, total)[: len(view.groups)]
        recv = np.array([g.received_s or (0.0,) * len(total) for g in view.groups])
        active = np.array([g.active_s for g in view.groups])
        prio = priorities(x, recv, active)
        order = list(range(len(total)))
        if not self.params.heterogeneity_aware:  # Gavel shuffles types for agnostic policies
            self.rng.shuffle(order)
        return dispatch(view.groups, x, prio, list(view.free_gpus), self.params.work_conserving,
                        order)  # fmt: skip

    def _allocate_shared(
        self, view: AllocationView, units: tuple[GroupView, ...], total: np.ndarray
    ) -> SpaceShared:
        """Space sharing: the packed LP over combinations, dispatch by combination."""
        unit_of = {j: i for i, u in enumerate(units) for j in u.members}
        gpus = {j: u.gpus for u in units for j in u.members}
        combos, runs, x = self._solve_shared(view, gpus, total)
        prio = np.zeros_like(x)
        assert view.combo_service is not None
        for k in np.flatnonzero(x.any(axis=1)).tolist():
            held, active = view.combo_service(combos[k])
            prio[k] = priorities(x[k : k + 1], np.array([held]), np.array([active]))[0]
        n_groups = len(view.groups)
        placed = {j for j, u in unit_of.items() if u >= n_groups}  # running, kept
        free = list(view.free_gpus)
        types: list[int | None] = [None] * n_groups
        pairs: list[tuple[int, int]] = []
        n_jobs = len(gpus)  # the first n_jobs combinations are the lone jobs
        for t in range(len(total)):
            # by (priority, X, index) descending, index ascending; a zero priority only
            # for a lone job filling idle GPUs (work conserving)
            pos = np.flatnonzero(runs[:, t] & (prio[:, t] > 0))
            cand = pos[np.lexsort((pos, -x[pos, t], -prio[pos, t]))].tolist()
            if self.params.work_conserving:
                cand += np.flatnonzero(runs[:n_jobs, t] & (prio[:n_jobs, t] <= 0)).tolist()
            for k in cand:
                c = combos[k]
                need = gpus[c[0]]
                if need > free[t] or placed.intersection(c):
                    continue
                placed.update(c)
                free[t] -= need
                us = sorted({unit_of[j] for j in c})
                if len(us) == 1 and len(units[us[0]].members) == len(c):
                    types[us[0]] = t  # the unit as it is (a lone job or a running pair)
                elif len(us) == 2 and all(len(units[u].members) == 1 for u in us):
                    types[us[0]] = types[us[1]] = t
                    pairs.append((us[0], us[1]))
                # else: a member of a running pair alone or re-paired: the pair is not
                # kept (None at a round); the fill that follows places its jobs
        return SpaceShared(types, tuple(pairs))

    def _solve_shared(
        self, view: AllocationView, gpus: dict[int, int], total: np.ndarray
    ) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]:
        """Combinations (job ids: every job alone, then every pair of equal GPU count
        measured on some type), where each may run (combination x type) and the LP's X,
        cached per active set (the jobs in id order)."""
        jobs = sorted(gpus)
        key = (tuple(jobs), tuple(gpus[j] for j in jobs), tuple(total))
        hit = self._shared_cache.get(key)
        if hit is not None:
            return hit
        n_types = len(total)
        combos: list[tuple[int, ...]] = [(j,) for j in jobs]
        rows = [self._rates(view, (j,), n_types) for j in jobs]
        for a, ja in enumerate(jobs):
            for jb in jobs[a + 1 :]:
                if gpus[ja] != gpus[jb]:
                    continue
                r = self._rates(view, (ja, jb), n_types)
                if (r > 0).all(axis=1).any():
                    combos.append((ja, jb))
                    rows.append(r)
        rates = np.zeros((len(combos), n_types, 2))
        for k, r in enumerate(rows):
            rates[k, :, : r.shape[1]] = r
        t_eq = rates[: len(jobs), :, 0] @ (total / max(float(total.sum()), 1e-12))
        pos = {j: i for i, j in enumerate(jobs)}
        sf = np.array([gpus[j] for j in jobs], dtype=float)
        x, _ = max_min_packed_lp([tuple(pos[j] for j in c) for c in combos], rates, sf, t_eq,
                                 total)  # fmt: skip
        runs = (rates[:, :, 0] > 0) & ((rates[:, :, 1] > 0) | (np.arange(len(combos)) < len(
            jobs))[:, None])  # fmt: skip
        self.lp_solves += 1
        if len(self._shared_cache) > 256:
            self._shared_cache.clear()
        hit = self._shared_cache[key] = (combos, runs, x)
        return hit

    def _rates(self, view: AllocationView, members: tuple[int, ...], n_types: int) -> np.ndarray:
        """(types, members) steps/s of a combination (0 where it may not run); cached by
        job ids (a job's rates do not change during a run)."""
        hit = self._rate_cache.get(members)
        if hit is None:
            assert view.combo_iter_s is not None
            hit = np.zeros((n_types, len(members)))
            for t in range(n_types):
                it = np.asarray(view.combo_iter_s(members, t), dtype=float)
                if np.all(np.isfinite(it) & (it > 0)):
                    hit[t] = 1.0 / it
            if len(self._rate_cache) > 1_000_000:
                self._rate_cache.clear()
            self._rate_cache[members] = hit
        return hit

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
