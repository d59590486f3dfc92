"""The mechanism's estimates for the cluster policies, and the views built from them.

Iteration times come from the interleaving model (workloads.cluster_model) with the
job's GPU stage divided by its speed on each type (the throughput table); they are
cached per (type, member profiles), so a pass costs O(candidates), not O(cluster).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from hetsim.workloads.cluster.interference_estimate import InterferenceError
from hetsim.workloads.cluster.jobs import JobTable
from hetsim.workloads.cluster.model import interleaved_iter_s, stage_model_iter_s
from hetsim.workloads.cluster.params import Execution
from hetsim.workloads.cluster.view import (
    AllocationView,
    GroupView,
    OrderingView,
    PackingView,
    UnitView,
)


class Estimator:
    """Solo and packed iteration times per GPU type, cached by job profile.

    Two interference models (workloads.cluster_model): ``group`` (Muri's per-size factors)
    and ``stage`` (per-stage beta inflation). ``iter_s`` is the ground truth the mechanism
    runs groups with (``execution.interference_model``); ``estimate`` gives either model.
    What a policy sees (``seen``, and every method a view hands out) is its paper's model
    through the interference estimator ``error`` (its bias and noise,
    workloads.cluster.interference_estimate), or the truth when that is an oracle.
    """

    def __init__(
        self, jobs: JobTable, ex: Execution, ref_type: int, error: InterferenceError | None = None
    ) -> None:
        #: Gavel's measured pairs as slowdowns, (profile a, profile b, type) -> (a's, b's);
        #: empty: no pair table (workloads.cluster.pairs; set with :meth:`use_pairs`)
        self.pairs: dict[tuple[int, int, int], tuple[float, float]] = {}
        self.jobs = jobs
        self.error = error
        self.interference = ex.interference
        self.beta = ex.stage_beta
        self.spans = (ex.data_slots,) + (1,) * (jobs.stages_s.shape[1] - 1)
        self.model = ex.interference_model
        self.ref = ref_type
        keys = [(m, it, *row, *sp) for m, it, row, sp in zip(
            jobs.model, jobs.iter_ref_s.tolist(), jobs.stages_s.tolist(), jobs.speed.tolist(),
            strict=True)]  # fmt: skip
        index: dict[tuple[object, ...], int] = {}
        self.profile = np.array([index.setdefault(k, len(index)) for k in keys], dtype=np.int64)
        first = {p: j for j, p in reversed(list(enumerate(self.profile.tolist())))}
        self._rep = [first[p] for p in range(len(index))]
        self._cache: dict[tuple[str, int, tuple[int, ...]], float] = {}
        self._group_cache: dict[tuple[object, ...], tuple[float, ...]] = {}
        self._best_cache: dict[tuple[object, ...], float] = {}
        self._stretch_cache: dict[tuple[object, ...], float] = {}
        n_types = jobs.speed.shape[1]
        self.solo = np.array([
            [jobs.solo_iter_on(j, t) * self.interference[0] for t in range(n_types)]
            for j in self._rep
        ])  # fmt: skip
        per_job = self.solo[self.profile]  # (n, T)
        #: per job: solo iteration time on the reference type, and on its fastest allowed
        #: type (inf: none), fixed for the run (ordering views and the summary read them)
        self.ref_solo = per_job[:, ref_type]
        self._allowed = [tuple(row) for row in jobs.allowed.tolist()]  # per job, per type
        self.best_solo = np.where(jobs.allowed, per_job, np.inf).min(axis=1)

    def use_pairs(
        self,
        names: list[str | None],
        slowdown_of: Callable[[list[str | None]], dict[tuple[int, int, int], tuple[float, float]]],
    ) -> None:
        """Take measured pairs as the ground truth of two-job groups: ``names`` maps a job
        to its Gavel job type (None: none), ``slowdown_of`` turns the per-profile names
        into :attr:`pairs` (workloads.cluster.pairs.pair_slowdowns)."""
        self.pairs = slowdown_of([names[j] for j in self._rep])

    def member_iter_s(self, members: Sequence[int], t: int) -> tuple[float, float] | None:
        """Ground-truth iteration time of each member of a measured pair on type ``t``
        (its solo time there x its measured slowdown); None: not a measured pair."""
        if len(members) != 2 or not self.pairs:
            return None
        a, b = members
        s = self.pairs.get((int(self.profile[a]), int(self.profile[b]), t))
        if s is None:
            return None
        return (float(self.solo[self.profile[a], t]) * s[0],
                float(self.solo[self.profile[b], t]) * s[1])  # fmt: skip

    def iter_s(self, members: Sequence[int], t: int) -> float:
        """Ground-truth iteration time of the group ``members`` on type ``t`` (a measured
        pair: its slower member's; the mechanism advances each member at its own)."""
        own = self.member_iter_s(members, t)
        if own is not None:
            return max(own)
        return self.estimate(self.model, members, t)

    def combo_iter_s(self, members: tuple[int, ...], t: int) -> tuple[float, ...]:
        """Per member, the iteration time a policy sees for the combination ``members``
        on type ``t``: a lone job's profiled solo time; a measured pair's member times
        through the interference estimator (its factor, or the truth for an oracle);
        inf for every member where the combination is not measured or not allowed."""
        if not all(self._allowed[j][t] for j in members):
            return (float("inf"),) * len(members)
        if len(members) == 1:
            return (self.solo_s(members[0], t),)
        own = self.member_iter_s(members, t)
        if own is None:
            return (float("inf"),) * len(members)
        err = self.error
        if err is None or err.oracle or err.exact:
            return own
        g = err.factor(t, tuple(sorted(int(self.profile[j]) for j in members)))
        return (own[0] * g, own[1] * g)

    def estimate(self, model: str, members: Sequence[int], t: int) -> float:
        """Iteration time of ``members`` on type ``t`` under interference ``model``."""
        profiles = tuple(sorted(int(self.profile[j]) for j in members))
        if len(profiles) == 1:
            return float(self.solo[profiles[0], t])
        key = (model, t, profiles)
        hit = self._cache.get(key)
        if hit is None:
            stages = np.array([self.jobs.stages_on(self._rep[p], t) for p in profiles])
            hit = self._cache[key] = self._packed(model, stages)
        return hit

    def seen(self, model: str, members: Sequence[int], t: int) -> float:
        """What a policy sees for ``members`` on type ``t`` under its ``model``: the model's
        value x the estimator's error factor (the truth for an oracle estimator)."""
        err = self.error
        if err is None or len(members) < 2:
            return self.estimate(model, members, t)
        if err.oracle:
            return self.iter_s(members, t)
        value = self.estimate(model, members, t)
        if err.exact:
            return value
        return value * err.factor(t, tuple(sorted(int(self.profile[j]) for j in members)))

    def _packed(self, model: str, stages: np.ndarray) -> float:
        if model == "stage":
            return stage_model_iter_s(stages, self.beta, self.spans)
        return interleaved_iter_s(stages, self.interference, self.spans)

    def stretched_iter_s(
        self, members: Sequence[int], t: int, stretch: tuple[float, ...], model: str = ""
    ) -> float:
        """Ground-truth iteration time (or under interference ``model``) with stage s
        multiplied by ``stretch[s]`` (node contention, workloads.cluster_contention): a
        group's cycle is recomputed from the stretched stages; a lone job's measured time
        is scaled by the ratio of its stretched and plain stage sums (as across GPU
        types). Cached by stretch. With ``model`` given (a policy's estimate) the result
        is what that policy sees: through the interference estimator, as :meth:`seen`."""
        err = self.error
        if not model or err is None or len(members) < 2:
            return self._stretched(model or self.model, members, t, stretch)
        if err.oracle:
            return self._stretched(self.model, members, t, stretch)
        value = self._stretched(model, members, t, stretch)
        if err.exact:
            return value
        return value * err.factor(t, tuple(sorted(int(self.profile[j]) for j in members)))

    def _stretched(
        self, model: str, members: Sequence[int], t: int, stretch: tuple[float, ...]
    ) -> float:
        if all(x == 1.0 for x in stretch):
            return self.estimate(model, members, t)
        profiles = tuple(sorted(int(self.profile[j]) for j in members))
        key = (model, t, profiles, *stretch)
        hit = self._stretch_cache.get(key)
        if hit is None:
            stages = np.array([self.jobs.stages_on(self._rep[p], t) for p in profiles])
            scaled = stages * np.asarray(stretch)
            if len(profiles) == 1:
                plain = float(stages.sum())
                solo = float(self.solo[profiles[0], t])
                hit = solo * float(scaled.sum()) / plain if plain > 0 else solo
            else:
                hit = self._packed(model, scaled)
            self._stretch_cache[key] = hit
        return hit

    def solo_s(self, job: int, t: int) -> float:
        """Solo iteration time of ``job`` on type ``t``."""
        return float(self.solo[self.profile[job], t])

    def group_iters(
        self, members: Sequence[int], model: str = "group"
    ) -> tuple[tuple[bool, ...], tuple[float, ...]]:
        """Types every member may use, and the group's iteration time per type under
        ``model`` (inf: not allowed); cached by member profiles and allowed types."""
        rows = [self._allowed[j] for j in members]
        allowed = rows[0] if len(rows) == 1 else tuple(map(all, zip(*rows, strict=True)))
        key = (model, tuple(sorted(int(self.profile[j]) for j in members)), allowed)
        hit = self._group_cache.get(key)
        if hit is None:
            hit = self._group_cache[key] = tuple(
                self.seen(model, members, t) if ok else np.inf for t, ok in enumerate(allowed)
            )
        return allowed, hit

    def best_solo_s(self, job: int, allowed: tuple[bool, ...]) -> float:
        """Solo iteration time of ``job`` on its fastest type among ``allowed`` (0: none)."""
        key = (int(self.profile[job]), allowed)
        hit = self._best_cache.get(key)
        if hit is None:
            row = self.solo[key[0]]
            ok = [t for t, a in enumerate(allowed) if a]
            hit = self._best_cache[key] = min(float(row[t]) for t in ok) if ok else 0
        return hit

    def stage_iter_on(self, members: tuple[int, ...], t: int) -> float:
        """Stage-model iteration time of ``members`` on type ``t`` (one member: its solo
        time there); inf if a member may not use ``t``."""
        if not all(self._allowed[j][t] for j in members):
            return float("inf")
        return self.seen("stage", members, t)

    def ref_iter_s(self, members: tuple[int, ...]) -> float:
        """Group-model (Muri's factors) iteration time on the reference type, as seen."""
        return self.seen("group", members, self.ref)

    def ref_stage_iter_s(self, members: tuple[int, ...]) -> float:
        """Stage-model (per-stage beta) iteration time on the reference type, as seen."""
        return self.seen("stage", members, self.ref)


def readonly(*arrays: np.ndarray) -> list[np.ndarray]:
    """Read-only copies for a view."""
    out = []
    for a in arrays:
        a = np.array(a)
        a.flags.writeable = False
        out.append(a)
    return out


def ordering_view(
    now: float, ids: np.ndarray, running: np.ndarray, rem_iters: np.ndarray,
    attained: np.ndarray, jobs: JobTable, est: Estimator,
) -> OrderingView:  # fmt: skip
    """Ordering snapshot of the jobs ``ids``."""
    cols = readonly(
        ids, jobs.submit_s[ids], jobs.gpus[ids], rem_iters * est.ref_solo[ids],
        rem_iters * est.best_solo[ids], attained, jobs.deadline_s[ids], running,
    )  # fmt: skip
    return OrderingView(now, *cols)


def unit_view(members: Sequence[int], running: bool, rank: int, rem: dict[int, int],
              jobs: JobTable, est: Estimator, running_on: int = -1) -> UnitView:  # fmt: skip
    """A packing candidate (``running_on``: the type a running group holds)."""
    ms = tuple(int(j) for j in members)
    return UnitView(
        ms, int(jobs.gpus[list(ms)].max()), running, rank,
        tuple(est.solo_s(j, est.ref) for j in ms),
        tuple(rem[j] for j in ms), tuple(float(jobs.deadline_s[j]) for j in ms),
        tuple(int(jobs.gpus[j]) for j in ms), running_on,
    )  # fmt: skip


def packing_view(now: float, units: list[UnitView], free: np.ndarray, max_size: int,
                 restart_s: float, est: Estimator, cross_gpu: bool = False,
                 contended_on: Callable[[tuple[int, ...], int], float] | None = None,
                 ) -> PackingView:  # fmt: skip
    """Packing snapshot (``free``: free GPUs per type; ``contended_on``: the
    contention-aware estimate, offered only with node contention on)."""
    phases = int(sum(est.spans))
    return PackingView(now, tuple(units), int(free.sum()), max_size, phases, restart_s,
                       est.ref_iter_s, est.ref_stage_iter_s, cross_gpu,
                       tuple(int(f) for f in free), est.stage_iter_on,
                       contended_on)  # fmt: skip


def group_view(now: float, members: Sequence[int], rem: dict[int, int], restart_s: float,
               jobs: JobTable, est: Estimator, model: str = "group") -> GroupView:  # fmt: skip
    """A waiting group with its per-type estimates under interference ``model``."""
    allowed, iters = est.group_iters(members, model)
    worst = max(rem[j] for j in members)
    remaining = [restart_s + worst * it for it in iters]
    meets, urgency, has = [True] * len(iters), 0.0, False
    for j in members:
        d = float(jobs.deadline_s[j])
        if not np.isfinite(d):
            continue
        has = True
        left = d - now
        meets = [m and restart_s + rem[j] * it <= left for m, it in zip(meets, iters, strict=True)]
        best = est.best_solo_s(j, allowed)
        if 0 < rem[j] * best <= left:
            urgency = max(urgency, rem[j] * best / left)
    return GroupView(
        tuple(int(j) for j in members), int(jobs.gpus[list(members)].max()), allowed,
        iters, tuple(remaining), tuple(meets), has, urgency,
    )  # fmt: skip


def with_service(gv: GroupView, received: np.ndarray, submit_s: np.ndarray, now: float,
                 running_on: int = -1) -> GroupView:  # fmt: skip
    """``gv`` with its members' mean time held per GPU type and mean time since submission
    (for allocation policies that see running groups, e.g. Gavel's round priorities)."""
    ms = list(gv.members)
    return gv._replace(  # sum / count: np.mean's arithmetic without its per-call overhead
        received_s=tuple((received[ms].sum(axis=0) / len(ms)).tolist()),
        active_s=float(now - submit_s[ms].sum() / len(ms)),
        running_on=running_on,
    )


def allocation_view(now: float, types: list[str], free: np.ndarray, groups: list[GroupView],
                    groups_stage: list[GroupView]) -> AllocationView:  # fmt: skip
    """Allocation snapshot (groups with group-model and with stage-model estimates)."""
    return AllocationView(now, tuple(types), tuple(int(f) for f in free), tuple(groups),
                          groups_stage=tuple(groups_stage))  # fmt: skip
