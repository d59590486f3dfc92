"""One model instance: continuous batching over a paged KV cache, one SimPy event per
iteration.

An instance (a TP group of GPUs of one type) holds a FCFS queue of prompts to prefill,
a queue of hand-offs whose KV cache has arrived (decode role), and a running decode
batch kept as numpy arrays (request id, cached tokens, tokens still to produce).
Before each iteration it admits hand-offs that fit, asks the ``serving.batching``
policy what to run when prompts wait, reserves KV blocks (preempting the most recently
admitted sequences by recompute, as vLLM does, when decodes run out of blocks), prices
the iteration with :class:`~workloads.serving_cost.IterationCost` and schedules one
timeout. Token accounting: a prefill of ``n`` tokens caches ``n`` tokens and emits one
token; a decode step of a sequence with ``c`` cached tokens caches ``c + 1`` and emits
one (LUD: ``K`` positions run, ``A`` tokens are accepted and kept).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schedulers.serving.view import BatchView, InstanceView, Role, blocks
from simulator.engine import InvariantViolation, Simulation
from workloads.serving_cost import IterationCost

WAITING_VIEW = 64  # queue entries a batching policy sees


@dataclass
class RequestState:
    """Mutable per-request state shared by the instances (plain lists: hot path)."""

    prefill_len: list[int]  # tokens the next (re)prefill must process
    left: list[int]  # output tokens still to produce (synced when a sequence leaves a batch)
    done: dict[int, int] = field(default_factory=dict)  # tokens already prefilled
    preemptions: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Lud:
    """Lexical-unit decoding: ``lookahead`` positions per step, each next one accepted
    with probability ``accept_p`` (truncated geometric, E[A] = (1 - p^K) / (1 - p))."""

    lookahead: int
    accept_p: float


class Instance:
    """A serving instance; the workload submits requests and receives callbacks."""

    def __init__(
        self,
        sim: Simulation,
        number: int,
        role: Role,
        group: int,
        cost: IterationCost,
        kv_tokens: int,
        block_tokens: int,
        policy: Any,
        reqs: RequestState,
        on_prefilled: Callable[[int, Instance], None],
        on_finished: Callable[[np.ndarray, Instance], None],
        lud: Lud | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.sim, self.number, self.role, self.group = sim, number, role, group
        self.cost, self.policy, self.reqs, self.lud, self.rng = cost, policy, reqs, lud, rng
        self.block_tokens = block_tokens
        self.capacity_blocks = kv_tokens // block_tokens
        self.on_prefilled, self.on_finished = on_prefilled, on_finished
        self.waiting: deque[int] = deque()
        self.pending: deque[int] = deque()  # decode role: KV arrived, not yet admitted
        self.ids = np.zeros(0, dtype=np.int64)
        self.ctx = np.zeros(0, dtype=np.int64)
        self.left = np.zeros(0, dtype=np.int64)
        self.used_blocks = 0
        self.queued_tokens = 0
        self.outstanding = 0
        self.ready = False
        self.busy = False
        self.goodput_rps = 0.0
        self.iterations = 0
        self.busy_s = 0.0
        self.preemptions = 0
        self.tokens_out = 0  # tokens emitted (first tokens and accepted decode tokens)
        self.peak_blocks = 0
        self._kv_area = 0.0  # integral of used blocks over time
        self._kv_t = 0.0
        self.track = sim.recorder.track(f"instance{number}:{role}", group="serving")

    # ---- what routers see ------------------------------------------------------------
    def view(self) -> InstanceView:
        """This instance as a router sees it."""
        return InstanceView(
            self.number, self.group, self.cost.spec.name, self.role, self.outstanding,
            self.queued_tokens, len(self.ids),
            (self.capacity_blocks - self.used_blocks) * self.block_tokens, self.goodput_rps,
        )  # fmt: skip

    # ---- inputs ------------------------------------------------------------------------
    def submit(self, i: int) -> None:
        """A request to prefill (entry) or to re-prefill after preemption."""
        self.waiting.append(i)
        self.outstanding += 1
        self.queued_tokens += self.reqs.prefill_len[i]
        self.kick()

    def handoff(self, i: int) -> None:
        """A request whose KV cache arrived from a prefill instance (decode role)."""
        self.pending.append(i)
        self.outstanding += 1
        self.kick()

    def release(self, i: int) -> None:
        """Free the KV blocks of a handed-off request once its transfer is done."""
        self._set_used(self.used_blocks - blocks(self.reqs.prefill_len[i], self.block_tokens))
        self.kick()

    def set_ready(self) -> None:
        """Weights are loaded: start serving."""
        self.ready = True
        self.kick()

    def kick(self) -> None:
        """Start an iteration at the end of this instant if idle and there is work."""
        if self.ready and not self.busy:
            self.sim.at_end_of_instant(("serving", self.number), self._start)

    # ---- one iteration -------------------------------------------------------------------
    def _start(self) -> None:
        if self.busy:
            return
        self._admit_pending()
        chunks: tuple[int, ...] = ()
        with_decodes = len(self.ids) > 0
        if self.waiting:
            plan = self.policy.plan(self._batch_view(with_decodes))
            chunks, with_decodes = plan.chunks, plan.with_decodes and with_decodes
        taken = [self.waiting.popleft() for _ in chunks]
        new, ctx_sum, attn = 0, 0, 0.0
        accepted = None
        if with_decodes:
            new, ctx_sum, attn, accepted = self._reserve_decodes()
        n_dec = len(self.ids) if with_decodes else 0
        for i, q in zip(taken, chunks, strict=True):
            c = self.reqs.done.get(i, 0)
            q = min(q, self.reqs.prefill_len[i] - c)
            new, ctx_sum, attn = new + q, ctx_sum + c, attn + q * (c + q / 2.0)
            self._set_used(
                self.used_blocks + blocks(c + q, self.block_tokens) - blocks(c, self.block_tokens)
            )
            self.reqs.done[i] = c + q
            self.queued_tokens -= q
        if self.used_blocks > self.capacity_blocks:
            raise InvariantViolation(f"instance {self.number}: KV over capacity")
        if new == 0:
            for i in reversed(taken):
                self.waiting.appendleft(i)
            return
        dt = self.cost.time_s(new, ctx_sum, attn)
        self.busy = True
        ev = self.sim.env.timeout(dt)
        start = self.sim.now
        ev.callbacks.append(lambda _e: self._finish(start, taken, n_dec, accepted))

    def _batch_view(self, decodes: bool) -> BatchView:
        head = []
        for k, i in enumerate(self.waiting):
            if k == WAITING_VIEW:
                break
            done = self.reqs.done.get(i, 0)
            head.append((self.reqs.prefill_len[i] - done, done))
        reserve = self._growth(self.ctx, 1) if decodes else 0
        free = max(self.capacity_blocks - self.used_blocks - reserve, 0) * self.block_tokens
        return BatchView(
            self.sim.now, self.role, len(self.ids), tuple(head), free, self.block_tokens
        )

    def _growth(self, ctx: np.ndarray, k: int) -> int:
        """New blocks the sequences need to grow by ``k`` tokens each."""
        bt = self.block_tokens
        if k == 1:  # a block is added exactly when the cache is a whole number of blocks
            return int(np.count_nonzero(ctx % bt == 0))
        return int(((ctx + k + bt - 1) // bt - (ctx + bt - 1) // bt).sum())

    def _reserve_decodes(self) -> tuple[int, int, float, np.ndarray | None]:
        """Blocks for this step's positions (preempting LIFO until they fit); returns
        the iteration's decode terms and the tokens each sequence will accept (None:
        one each, standard decoding)."""
        k = self.lud.lookahead if self.lud else 1
        growth = self._growth(self.ctx, k)
        while len(self.ids) and self.used_blocks + growth > self.capacity_blocks:
            self._preempt_last()
            growth = self._growth(self.ctx, k)
        self._set_used(self.used_blocks + growth)
        b = len(self.ids)
        accepted = None
        if self.lud is not None and self.rng is not None:
            accepted = np.minimum(self.rng.geometric(1.0 - self.lud.accept_p, b), k)
            accepted = np.minimum(accepted, self.left)
        ctx_sum = int(self.ctx.sum())
        return k * b, ctx_sum, k * ctx_sum + b * k * k / 2.0, accepted

    def _preempt_last(self) -> None:
        i, c = int(self.ids[-1]), int(self.ctx[-1])
        self.reqs.left[i] = int(self.left[-1])
        self.ids, self.ctx, self.left = self.ids[:-1], self.ctx[:-1], self.left[:-1]
        self._set_used(self.used_blocks - blocks(c, self.block_tokens))
        self.preemptions += 1
        self.reqs.preemptions.append(i)
        self.reqs.prefill_len[i] = c + 1  # recompute prompt and every token emitted
        self.reqs.done.pop(i, None)
        self.waiting.appendleft(i)
        self.queued_tokens += c + 1

    def _admit_pending(self) -> None:
        bt = self.block_tokens
        while self.pending:
            i = self.pending[0]
            need = blocks(self.reqs.prefill_len[i], bt)
            if self.used_blocks + need > self.capacity_blocks:
                break
            self.pending.popleft()
            self._set_used(self.used_blocks + need)
            self._join(i, self.reqs.prefill_len[i])

    def _join(self, i: int, ctx: int) -> None:
        self.ids = np.append(self.ids, i)
        self.ctx = np.append(self.ctx, ctx)
        self.left = np.append(self.left, self.reqs.left[i])

    def _finish(self, start: float, taken: list[int], n_dec: int, acc: np.ndarray | None) -> None:
        now = self.sim.now
        self.busy = False
        self.iterations += 1
        self.busy_s += now - start
        name = "mixed" if taken and n_dec else ("prefill" if taken else "decode")
        self.sim.recorder.span(self.track, name, start, now, None)
        if n_dec:
            self._advance_decodes(n_dec, acc)
        for i in reversed(taken):
            if self.reqs.done[i] < self.reqs.prefill_len[i]:
                self.waiting.appendleft(i)  # a partial (chunked) prefill
                continue
            del self.reqs.done[i]
            self.reqs.left[i] -= 1
            self.tokens_out += 1
            self.on_prefilled(i, self)
            if self.role == "prefill":
                self.outstanding -= 1
            elif self.reqs.left[i] <= 0:
                self._set_used(
                    self.used_blocks - blocks(self.reqs.prefill_len[i], self.block_tokens)
                )
                self.outstanding -= 1
                self.on_finished(np.array([i]), self)
            else:
                self._join(i, self.reqs.prefill_len[i])
        self.kick()

    def _advance_decodes(self, n: int, acc: np.ndarray | None) -> None:
        """The first ``n`` running sequences stepped: keep accepted positions only."""
        bt = self.block_tokens
        if acc is None:  # standard decoding: one token each, the reserved block is kept
            self.ctx[:n] += 1
            self.left[:n] -= 1
            self.tokens_out += n
        else:
            assert self.lud is not None
            ctx = self.ctx[:n]
            reserved = int(((ctx + self.lud.lookahead + bt - 1) // bt).sum())
            kept = int(((ctx + acc + bt - 1) // bt).sum())
            self._set_used(self.used_blocks - reserved + kept)
            self.ctx[:n] += acc
            self.left[:n] -= acc
            self.tokens_out += int(acc.sum())
        if self.left[:n].min() > 0:
            return
        done = self.left <= 0
        self._set_used(self.used_blocks - int(((self.ctx[done] + bt - 1) // bt).sum()))
        finished = self.ids[done]
        self.ids, self.ctx, self.left = self.ids[~done], self.ctx[~done], self.left[~done]
        self.outstanding -= len(finished)
        self.on_finished(finished, self)

    def _set_used(self, blocks_now: int) -> None:
        now = self.sim.now
        self._kv_area += self.used_blocks * (now - self._kv_t)
        self._kv_t = now
        self.used_blocks = blocks_now
        self.peak_blocks = max(self.peak_blocks, blocks_now)

    def kv_utilisation(self, end_s: float) -> float:
        """Time-average of used / capacity KV blocks over [0, end_s]."""
        area = self._kv_area + self.used_blocks * (end_s - self._kv_t)
        return area / (self.capacity_blocks * end_s) if end_s > 0 else 0.0
