"""Chameleon/SmartSwap policy generator v1 (reconstruction from MindSpeed ``smart_swap``).

From one profile: candidates are activations of at least ``size_filter_bytes`` used in
forward and backward; memory-reduction points (MRIs) are ops whose profiled memory exceeds
``capacity - redundant_bytes``; a candidate covers an MRI lying strictly between its
swap-out stage and its swap-in stage (one stage before its first backward use). Score =
min-max(coverage) + w * min-max(size^(1/3)). Greedy: take the MRI with the largest residual
need, accept its covering candidates by score while their copies fit in the stages' slack
("delay test": step time spread uniformly over the ops, a swap-out charges its D2H copy
time to its swap-out stage, a swap-in its H2D copy time to its swap-in stage; both times
from the view), else accept the best one in delay mode, moving its swap-in to the latest
earlier stage with slack.

Swap-in buffers (issue 19): a prefetched tensor occupies device memory again from its
swap-in stage. When a memory-reduction point cannot be covered by any untaken candidate
(typically the first backward layers, where the early prefetches of the next layers land),
the generator postpones accepted prefetches whose first backward use lies after the point
("late mode", reconstruction): the latest-used first, each to the stage just after the
point, until the point's need is met. The consumer may then wait for its copy (stall)
instead of the run hitting a forced swap, which would restart the state machine.

Orders carry the profiled tensor's signature, so the executor finds the tensor again by
signature similarity (MindSpeed's fuzzy matching), and misses it when too little agrees.

Not modelled: peak grouping (the largest single need is attacked each round), the
``free_stage_delay`` release timing (the executor frees when the copy ends), optimizer-state
swapping (BETTER_MEMORY_SAVING).
"""

from __future__ import annotations

import numpy as np

from hetsim.workloads.training.view import ProfileView, SwapOrder


def _norm(x: np.ndarray) -> np.ndarray:
    span = float(x.max() - x.min()) if len(x) else 0.0
    return (x - x.min()) / span if span > 0 else np.zeros_like(x, dtype=float)


class _Memory:
    """The generator's memory model of a plan: which memory-reduction points each accepted
    swap relieves. A swapped-out tensor's memory is free only once its device-to-host copy
    has ended (copies run FIFO in swap-out order, from the end of the tensor's last forward
    op under uniform op time), and is taken again from its swap-in stage on (the swap-in
    buffer)."""

    def __init__(self, need: np.ndarray, mri: np.ndarray, mri_st: np.ndarray, op_s: float,
                 out_op: np.ndarray, out_s: np.ndarray, size: np.ndarray) -> None:  # fmt: skip
        self.need, self.mri_t, self.mri_st = need, mri * op_s, mri_st
        self.ready_t, self.out_s, self.size = (out_op + 1) * op_s, out_s, size
        self.order = np.argsort(out_op, kind="stable")

    def residual(self, taken: np.ndarray, in_at: np.ndarray, wait: np.ndarray) -> np.ndarray:
        """Need left at every point under the accepted swaps (``wait``: swaps accepted
        although their copy may end late; the executor's allocation waits for them, so
        they count as freed when their last forward op ends)."""
        acc = self.order[taken[self.order]]
        if not len(acc):
            return self.need.copy()
        free_t = np.empty(len(acc))
        t = 0.0
        for k, c in enumerate(acc.tolist()):
            t = max(t, float(self.ready_t[c])) + float(self.out_s[c])
            free_t[k] = self.ready_t[c] if wait[c] else t
        mask = (self.mri_t[None, :] >= free_t[:, None]) & (
            self.mri_st[None, :] < in_at[acc][:, None]
        )
        return self.need - self.size[acc] @ mask


def generate(p: ProfileView, redundant_bytes: int, size_filter_bytes: int,
             weight: float) -> tuple[SwapOrder, ...]:  # fmt: skip
    """The swap orders that clear the memory-reduction points (see module docstring)."""
    stage = p.stage
    first = np.flatnonzero(np.r_[True, np.diff(stage) != 0])
    labels = [(int(p.phase[i]), int(p.layer[i])) for i in first]
    op_s = p.step_s / max(p.n_ops - 1, 1)  # uniform time per op
    time_left = np.bincount(stage) * op_s
    need = p.memory_bytes - (p.capacity_bytes - redundant_bytes)
    mri = np.flatnonzero(need > 0)
    cand = np.flatnonzero(
        (p.size_bytes >= size_filter_bytes) & (p.last_fwd_use >= 0) & (p.first_bwd_use >= 0)
    )
    if not len(mri) or not len(cand):
        return ()
    out_op = p.last_fwd_use[cand]
    out_st = stage[out_op]
    use_st = stage[p.first_bwd_use[cand]]
    in_st = np.maximum(use_st - 1, out_st + 1)
    mri_st = stage[mri]
    covers = (mri_st[None, :] > out_st[:, None]) & (mri_st[None, :] < in_st[:, None])
    size = p.size_bytes[cand].astype(float)
    out_s, in_s = p.swap_out_s[cand], p.swap_in_s[cand]
    score = _norm(covers.sum(axis=1).astype(float)) + weight * _norm(np.cbrt(size))
    mem = _Memory(need[mri].astype(float), mri, mri_st, op_s, out_op, out_s, size)
    taken = np.zeros(len(cand), dtype=bool)
    in_at = in_st.copy()  # the swap-in stage finally planned per candidate
    tried = np.zeros((len(cand), len(mri)), dtype=bool)  # did not help that point
    wait = np.zeros(len(cand), dtype=bool)
    residual = mem.residual(taken, in_at, wait)
    hopeless = np.zeros(len(mri), dtype=bool)  # points nothing more can relieve
    while (open_ := np.where(hopeless, 0.0, residual)).max() > 0:
        j = int(np.argmax(open_))
        pool = np.flatnonzero(covers[:, j] & ~taken & ~tried[:, j])
        pool = pool[np.lexsort((out_st[pool], -score[pool]))]
        helped = False
        for c in pool.tolist():
            taken[c] = True
            trial = mem.residual(taken, in_at, wait)
            if trial[j] >= residual[j]:  # not freed before the point: its copy is queued
                taken[c], tried[c, j] = False, True
                continue
            st = int(in_st[c])
            if not (time_left[out_st[c]] >= out_s[c] and time_left[st] >= in_s[c]):
                st = _delay_stage(int(out_st[c]), st, float(in_s[c]), time_left)  # delay mode
                in_at[c] = st
                trial = mem.residual(taken, in_at, wait)
            time_left[out_st[c]] -= out_s[c]
            time_left[st] -= in_s[c]
            residual, helped = trial, True
            if residual[j] <= 0:
                break
        if not helped:
            late = np.flatnonzero(covers[:, j] & ~taken)
            if len(late):  # accept the best one anyway: the allocation will wait for it
                c = int(late[np.lexsort((out_st[late], -score[late]))][0])
                taken[c] = wait[c] = True
            elif not _postpone(j, taken, in_at, use_st, mri_st, size):
                hopeless[j] = True  # nothing can relieve this point: attack the others
            residual = mem.residual(taken, in_at, wait)
    orders: list[SwapOrder] = []
    chosen = np.flatnonzero(taken)  # prefetch order: by swap-in stage, nearest use first
    for c in chosen[np.lexsort((use_st[chosen], in_at[chosen]))].tolist():
        sig = p.signatures[cand[c]] if p.signatures else None
        orders.append(SwapOrder(p.keys[cand[c]], in_at_stage=labels[in_at[c]], signature=sig))
    return tuple(orders)


def _postpone(j: int, taken: np.ndarray, in_at: np.ndarray, use_st: np.ndarray,
              mri_st: np.ndarray, size: np.ndarray) -> bool:  # fmt: skip
    """Late mode (module doc): move accepted prefetches landing at or before point ``j``'s
    stage, and used after it, to just after it (smaller tensors of the latest use first).
    False when none can move."""
    s = int(mri_st[j])
    movable = np.flatnonzero(taken & (in_at <= s) & (use_st > s))
    if not len(movable):
        return False
    in_at[movable] = s + 1
    return True


def _delay_stage(out_st: int, in_st: int, d_in: float, time_left: np.ndarray) -> int:
    """Delay mode: the latest stage before ``in_st`` (after the swap-out) with slack."""
    for s in range(in_st - 1, out_st, -1):
        if time_left[s] >= d_in:
            return s
    return in_st
