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
    out_st = stage[p.last_fwd_use[cand]]
    in_st = np.maximum(stage[p.first_bwd_use[cand]] - 1, out_st + 1)
    mri_st = stage[mri]
    covers = (mri_st[None, :] > out_st[:, None]) & (mri_st[None, :] < in_st[:, None])
    size = p.size_bytes[cand].astype(float)
    out_s, in_s = p.swap_out_s[cand].tolist(), p.swap_in_s[cand].tolist()
    score = _norm(covers.sum(axis=1).astype(float)) + weight * _norm(np.cbrt(size))
    residual = need[mri].astype(float)
    taken = np.zeros(len(cand), dtype=bool)
    orders: list[SwapOrder] = []
    while residual.max() > 0:
        j = int(np.argmax(residual))
        pool = np.flatnonzero(covers[:, j] & ~taken)
        if not len(pool):
            break  # nothing can relieve this point
        pool = pool[np.lexsort((out_st[pool], -score[pool]))]
        accepted = False
        for c in pool.tolist():
            d_out, d_in = out_s[c], in_s[c]
            if time_left[out_st[c]] >= d_out and time_left[in_st[c]] >= d_in:
                _accept(c, in_st[c], d_out, d_in, out_st, mri_st, time_left, residual, size)
                taken[c], accepted = True, True
                orders.append(SwapOrder(p.keys[cand[c]], in_at_stage=labels[in_st[c]]))
                if residual[j] <= 0:
                    break
        if not accepted:
            c = int(pool[0])  # delay mode
            d_out, d_in = out_s[c], in_s[c]
            st = _delay_stage(int(out_st[c]), int(in_st[c]), d_in, time_left)
            _accept(c, st, d_out, d_in, out_st, mri_st, time_left, residual, size)
            taken[c] = True
            orders.append(SwapOrder(p.keys[cand[c]], in_at_stage=labels[st]))
    return tuple(orders)


def _delay_stage(out_st: int, in_st: int, d_in: float, time_left: np.ndarray) -> int:
    """Delay mode: the latest stage before ``in_st`` (after the swap-out) with slack."""
    for s in range(in_st - 1, out_st, -1):
        if time_left[s] >= d_in:
            return s
    return in_st


def _accept(c: int, in_stage: int, d_out: float, d_in: float, out_st: np.ndarray,
            mri_st: np.ndarray, time_left: np.ndarray, residual: np.ndarray,
            size: np.ndarray) -> None:  # fmt: skip
    time_left[out_st[c]] -= d_out
    time_left[in_stage] -= d_in
    residual[(mri_st > out_st[c]) & (mri_st < in_stage)] -= size[c]
