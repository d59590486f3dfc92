"""Nappa-style allocation of ops to the TEE and heterogeneous untrusted NNAs.

Nappa (IEEE 2026, abstract only; papers/tee.md section 3) compiles a model into an
encrypted computation graph over trusted and untrusted hardware, using *vector
decomposition* of linear ops' inputs, and allocates operators by hardware affinity and
cross-hardware communication cost. Here each op may run

- in the TEE;
- masked on one NNA (DAC'23-style: mask, NNA, unmask with a meta-key);
- decomposed across every NNA (:data:`DECOMPOSE`: one additive share per NNA, computed in
  parallel, recombined in the TEE, no meta-key; needs two or more non-colluding NNAs).

The objective is the step's pipelined makespan. An exact dynamic programme over the op
chain keeps, per last device, the Pareto front of (critical-chain seconds, TEE-busy
seconds): the makespan of the mechanism's task graph is at least the larger of the two
(the chain is sequential; the TEE is one resource). Device switches pay the view's toll
on both (once entering the first op, twice per boundary: forward and backward).
Candidates on the final front are then re-ranked with the mechanism's estimator
(``view.estimate_s``, the step's own task graph), and the best estimate wins. With
``exhaustive_limit`` or fewer placements in total, every placement is estimated instead.
Each candidate is estimated at every micro-batch count the view offers (the same
interleaving DAC'23's pipelined policy gets), and the best (placement, count) wins.
Reconstructed: the decomposition's TEE cost is priced like masking plus unmasking, the
DP-then-rerank search is this implementation's (the paper's heuristic is not public).
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.registry import policies
from hetsim.workloads.tee.view import (
    DECOMPOSE,
    TEE,
    ExecutionPlan,
    ExecutionView,
    OpView,
    best_micro_batches,
    post_s,
)


class NappaParams(BaseModel):
    """``depth``: meta-key prefetch distance; ``decompose``: allow vector decomposition;
    ``max_front``: Pareto points kept per state (thinned evenly beyond it);
    ``rerank``: front points re-estimated; ``exhaustive_limit``: enumerate every
    placement when there are at most this many."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    depth: int = Field(
        default=1,
        ge=0,
        description="Meta-key prefetch distance in layers (0: meta-keys "
        "made on demand, on the critical chain).",
    )
    decompose: bool = Field(
        default=True,
        description="Allow vector decomposition of an op across "
        "every NNA (needs two or more NNAs).",
    )
    max_front: int = Field(
        default=256,
        ge=1,
        description="Pareto points (chain, TEE-busy seconds) kept per "
        "DP state, thinned evenly beyond it.",
    )
    rerank: int = Field(
        default=32,
        ge=1,
        description="Points of the final front re-estimated with the mechanism's estimator.",
    )
    exhaustive_limit: int = Field(
        default=0,
        ge=0,
        description="Estimate every placement instead of the DP when "
        "there are at most this many (0: never).",
    )


class Choice(NamedTuple):
    """One placement of one op: its device and its (chain, TEE-busy) seconds."""

    device: int
    chain_s: float
    tee_s: float


def choices(op: OpView, n_nnas: int, depth: int, decompose: bool) -> list[Choice]:
    """Every feasible placement of ``op`` with its contribution to chain and TEE time."""
    out = [Choice(TEE, op.tee_s, op.tee_s)]
    if not op.offloadable:
        return out
    key_on_chain = op.metakey_s if depth == 0 else 0.0
    for k in range(n_nnas):
        remote = op.xfer_s[k] + op.nna_s[k]
        if math.isfinite(remote):
            chain = op.mask_s + remote + post_s(op) + key_on_chain
            out.append(Choice(k, chain, op.protect_s))
    if decompose and n_nnas >= 2:
        remote = max(op.xfer_s[k] + op.nna_s[k] for k in range(n_nnas))
        if math.isfinite(remote):
            local = op.mask_s + post_s(op)
            out.append(Choice(DECOMPOSE, local + remote, local))
    return out


Front = list[tuple[float, float, tuple[int, ...]]]  # (chain, tee, placement)


def _pareto(points: Front, cap: int) -> Front:
    pts = sorted(points, key=lambda p: (p[0], p[1], p[2]))
    out: Front = []
    best_tee = math.inf
    for p in pts:
        if p[1] < best_tee - 1e-15:
            out.append(p)
            best_tee = p[1]
    if len(out) > cap:
        idx = np.unique(np.linspace(0, len(out) - 1, cap).round().astype(int))
        out = [out[i] for i in idx]
    return out


def pareto_placements(view: ExecutionView, p: NappaParams) -> Front:
    """The DP (module doc): the final Pareto front of (chain, TEE busy, placement)."""
    n_nnas, toll = len(view.nnas), view.switch_s
    states: dict[int, Front] = {TEE: [(0.0, 0.0, ())]}
    for i, op in enumerate(view.ops):
        nxt: dict[int, Front] = {}
        for c in choices(op, n_nnas, p.depth, p.decompose):
            cand: Front = []
            for last, front in states.items():
                sw = 0.0 if last == c.device else toll * (1 if i == 0 else 2)
                cand += [
                    (a + c.chain_s + sw, b + c.tee_s + sw, (*pl, c.device)) for a, b, pl in front
                ]
            nxt[c.device] = _pareto(cand, p.max_front)
        states = nxt
    return _pareto([pt for f in states.values() for pt in f], p.max_front)


def allocate(view: ExecutionView, p: NappaParams) -> tuple[int, ...]:
    """The placement with the lowest estimated makespan (module doc)."""
    n_nnas = len(view.nnas)
    per_op = [[c.device for c in choices(op, n_nnas, p.depth, p.decompose)] for op in view.ops]
    total = math.prod(len(c) for c in per_op)
    est = view.estimate_s
    if est is not None and total <= p.exhaustive_limit:
        cands = [tuple(pl) for pl in itertools.product(*per_op)]
    else:
        front = pareto_placements(view, p)
        front.sort(key=lambda q: (max(q[0], q[1]), q[2]))
        cands = [q[2] for q in front[: p.rerank]]
        if est is None:
            return cands[0]
    return min(cands, key=lambda pl: (est(pl, p.depth), pl))


def allocate_interleaved(view: ExecutionView, p: NappaParams) -> tuple[tuple[int, ...], int]:
    """(placement, micro-batches): :func:`allocate`'s candidates, each at its best
    micro-batch count of ``view.micro_batch_options`` by the estimator."""
    if view.estimate_s is None or view.micro_batch_options == (1,):
        return allocate(view, p), 1
    n_nnas = len(view.nnas)
    per_op = [[c.device for c in choices(op, n_nnas, p.depth, p.decompose)] for op in view.ops]
    if math.prod(len(c) for c in per_op) <= p.exhaustive_limit:
        cands = [tuple(pl) for pl in itertools.product(*per_op)]
    else:
        front = pareto_placements(view, p)
        front.sort(key=lambda q: (max(q[0], q[1]), q[2]))
        cands = [q[2] for q in front[: p.rerank]]
    scored = [(*best_micro_batches(view, pl, p.depth), pl) for pl in cands]
    _, m, pl = min(scored, key=lambda s: (s[0], s[1], s[2]))
    return pl, m


@policies.register("tee.execution", "nappa")
class NappaExecution:
    """Ops in the TEE, masked on an NNA or decomposed across NNAs, for the least
    pipelined makespan (Nappa-style, reconstruction)."""

    Params = NappaParams

    def __init__(self, params: NappaParams, rng: np.random.Generator) -> None:
        self.params = params

    def plan(self, view: ExecutionView) -> ExecutionPlan:
        """DP over the op chain, re-ranked by the mechanism's estimate at every offered
        micro-batch count; ``depth``."""
        placement, m = allocate_interleaved(view, self.params)
        return ExecutionPlan(placement, self.params.depth, m)
