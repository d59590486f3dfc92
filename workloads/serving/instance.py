"""One model instance: continuous batching over a paged KV cache, one SimPy event per
iteration.

An instance (a TP group of GPUs of one type) holds a FCFS queue of prompts to prefill,
a queue of hand-offs whose KV cache has arrived (decode role), and a running decode
batch. Before each iteration it admits hand-offs that fit, asks the
``serving.batching`` policy what to run when prompts wait, reserves KV blocks
(preempting the most recently admitted sequences by recompute, as vLLM does, when
decodes run out of blocks), prices the iteration with
:class:`~workloads.serving_cost.IterationCost` and schedules one timeout. Token
accounting: a prefill of ``n`` tokens caches ``n`` tokens and emits one token; a decode
step of a sequence with ``c`` cached tokens caches ``c + 1`` and emits one (LUD: ``K``
positions run, ``A`` tokens are accepted and kept). With a prefix cache
(:mod:`workloads.serving_prefix`, colocated and prefill roles), a prefill starts after
the request's longest cached prefix and finished prompts' blocks stay cached until
evicted.

Hot path: the running batch is stored relative to a step counter ``S`` (standard decode
steps taken): a sequence's cached tokens are ``ctx0 + S`` and its tokens left
``left0 - S``, so a standard decode step is ``S += 1``; the batch's context sum, the
count of sequences at a block boundary (a histogram of ``ctx0 mod block``) and the
smallest ``left0`` are running values, so pricing and reserving a step costs O(1)
instead of a pass over the batch.

Decode runs (:class:`DecodeRun`): most iterations are decode-only steps of an unchanged
batch, so when a decode-only iteration starts, the instance prices the following ones
too, up to the first that would finish a sequence, need more KV blocks than are free,
or reach :data:`RUN_ITERATIONS`, and schedules one event at the end of the last (an
:class:`~hetsim.simulator.engine.Alarm` at the exact sum of the iteration times, added
in the same order as step by step). The iterations in between are applied when the run
ends or someone looks: a request that arrives (``submit``, ``handoff``) cuts the run at
the first iteration end at or after its arrival; ``view``, ``empty`` and ``settle``
apply the iteration ends before now. Every counter, integral and time is the same
float arithmetic in the same order as one event per iteration, so results are
identical (``tests/test_serving_decode_runs.py`` compares the tables). Runs are off with
look-ahead decoding, a prefix cache or per-iteration spans, and when
:attr:`Instance.decode_runs` is False.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from hetsim.devices.energy import POWER_TRACK_SUFFIX
from hetsim.devices.power import compute_roof_flops, power_model
from hetsim.simulator.engine import MAX_TIME_S, Alarm, InvariantViolation, Simulation
from hetsim.workloads.serving.cost import IterationCost
from hetsim.workloads.serving.prefix import CachedKv, PrefixCache
from hetsim.workloads.serving.view import BatchView, InstanceView, Role, blocks

WAITING_VIEW = 64  # queue entries a batching policy sees
NO_SEQUENCE = 1 << 62  # min(left0) of an empty batch
RUN_ITERATIONS = 16
"""Most iterations one decode run prices ahead (an arrival cuts a run and the
iterations priced past the cut are wasted; a run that ends uncut is followed by the
next one)."""


def kv_flow_ids(i: int) -> tuple[int, int]:
    """Trace flow ids of request ``i``'s KV hand-off: prefill -> transfer, transfer ->
    decode."""
    return 2 * i, 2 * i + 1


@dataclass
class RequestState:
    """Mutable per-request state shared by the instances (plain lists: hot path)."""

    prefill_len: list[int]  # tokens the next (re)prefill must process
    left: list[int]  # output tokens still to produce (synced when a sequence leaves a batch)
    done: dict[int, int] = field(default_factory=dict)  # tokens already prefilled
    preemptions: list[int] = field(default_factory=list)


@dataclass(frozen=True, eq=False)
class Lud:
    """Lexical-unit decoding: ``lookahead`` positions per step, each next one accepted
    with request ``i``'s probability ``accept_p[i]`` (truncated geometric, E[A] =
    (1 - p^K) / (1 - p)); the workload draws one probability per request."""

    lookahead: int
    accept_p: np.ndarray  # per request index


class DecodeRun:
    """Iterations ``1..last`` of a run of decode-only steps of an unchanged batch of
    ``seqs`` sequences: iteration ``j`` runs from ``times[j-1]`` to ``times[j]`` and,
    for ``j >= 2``, reserves ``growth[j-1]`` KV blocks at its start; iteration ends
    ``1..applied`` (and the starts after them) are applied to the instance."""

    __slots__ = ("alarm", "applied", "growth", "last", "seqs", "times")

    def __init__(self, times: list[float], growth: list[int], seqs: int) -> None:
        self.times, self.growth, self.seqs = times, growth, seqs
        self.last = len(times) - 1
        self.applied = 0
        self.alarm: Alarm | None = None


class Instance(CachedKv):
    """A serving instance; the workload submits requests and receives callbacks."""

    #: advance runs of decode-only iterations in one event (identical results; False:
    #: one event per iteration, the reference the tests compare against)
    decode_runs: ClassVar[bool] = True

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
        cache: PrefixCache | None = None,
    ) -> None:
        self.sim, self.number, self.role, self.group = sim, number, role, group
        self.cost, self.policy, self.reqs, self.lud, self.rng = cost, policy, reqs, lud, rng
        self.block_tokens, self.cache = block_tokens, cache
        self.capacity_blocks = kv_tokens // block_tokens
        self.on_prefilled, self.on_finished = on_prefilled, on_finished
        self.waiting: deque[int] = deque()
        self.pending: deque[int] = deque()  # decode role: KV arrived, not yet admitted
        self.ids: list[int] = []  # running batch, in admission order
        self._ctx0: list[int] = []  # cached tokens minus self._steps
        self._left0: list[int] = []  # tokens left plus self._steps
        self._steps = 0
        self._ctx0_sum = 0
        self._min_left0 = NO_SEQUENCE
        self._residues = [0] * block_tokens  # sequences by ctx0 mod block_tokens
        self.used_blocks = 0
        self.queued_tokens = 0
        self.outstanding = 0
        self._resident_area = 0.0  # integral of outstanding requests over time (request-s)
        self._resident_t = 0.0
        self.ready = False
        self.busy = False
        # lifetime (autoscaling): provisioned at, released at (None: still held), and
        # whether it is draining; on_drained fires once a draining instance is empty
        self.provisioned_s = float(sim.now)
        self.released_s: float | None = None
        self.draining = False
        self.on_drained: Callable[[Instance], None] | None = None
        self.goodput_rps = 0.0
        self.kv_layerwise = False  # a prefill instance sends KV layer by layer (Splitwise)
        self.iterations = 0
        self.busy_s = 0.0
        self.preemptions = 0
        self.prefill_preemptions = 0  # partial prefills preempted to unblock (_preempt_partial)
        self.tokens_out = 0  # tokens emitted (first tokens and accepted decode tokens)
        self.peak_blocks = 0
        self._kv_area = 0.0  # integral of used blocks over time
        self._kv_t = 0.0
        self._kv_level = 0  # used blocks plus cached blocks requests hold
        self._env = sim.env
        self._key = ("serving", number)
        self._step_s = cost.transformer.step_s  # the iteration price (IterationCost.step_s)
        # the iteration in flight (one at a time): start, prefilled requests, decodes,
        # accepted tokens per decode (LUD)
        self._it: tuple[float, list[int], int, np.ndarray | None] = (0.0, [], 0, None)
        #: trace tracks of the GPUs the instance runs on (set when placed: :meth:`place`)
        self.device_tracks: tuple[str, ...] = ()
        self._run: DecodeRun | None = None  # the decode run in flight
        self._runs = (
            Instance.decode_runs and lud is None and cache is None
            and not sim.recorder.record_spans
        )  # fmt: skip
        # energy (devices/energy.py): the GPUs' draw above idle over the iterations run,
        # all GPUs of the instance; an iteration of n new positions takes n x _s_per_token
        # at the full compute roof (weight GEMMs, 2 FLOPs per active parameter per token)
        self.energy_J = 0.0
        self.peak_W = 0.0
        self._power = power_model(cost.spec)
        active = float(getattr(cost.model, "active_params", cost.model.params))
        roof = compute_roof_flops(
            cost.spec, cost.precision.math_dtype(), cost.transformer.fits.clock_ratio
        )
        self._s_per_token = 2.0 * active / (cost.tp * roof) if roof > 0 else 0.0
        self._it_tokens = 0  # new positions of the iteration in flight
        #: host time per iteration before its kernels (engine loop): the GPUs idle then
        self._host_s = cost.overheads.framework_s

    def place(self, device_tracks: tuple[str, ...]) -> None:
        """Run on the GPUs whose trace tracks are ``device_tracks`` (TP group order):
        each iteration is recorded as a span on every one of them."""
        self.device_tracks = device_tracks

    # ---- what routers see ------------------------------------------------------------
    def view(self) -> InstanceView:
        """This instance as a router sees it."""
        if self._run is not None:
            self._sync()
        return InstanceView(
            self.number, self.group, self.cost.spec.name, self.role, self.outstanding,
            self.queued_tokens, len(self.ids),
            self._free_blocks() * self.block_tokens, self.goodput_rps,
        )  # fmt: skip

    # ---- inputs ------------------------------------------------------------------------
    @property
    def iteration_start_s(self) -> float:
        """Start of the iteration running now or, between iterations, of the last one
        (during its completion callbacks: of the iteration that just ended)."""
        run = self._run
        if run is not None:
            self._sync()
            return run.times[run.applied]
        return self._it[0]

    def submit(self, i: int) -> None:
        """A request to prefill (entry) or to re-prefill after preemption."""
        if self._run is not None:
            self._cut()
        self.waiting.append(i)
        self._add_outstanding(1)
        self.queued_tokens += self.reqs.prefill_len[i]
        self.kick()

    def handoff(self, i: int) -> None:
        """A request whose KV cache arrived from a prefill instance (decode role)."""
        if self._run is not None:
            self._cut()
        self.pending.append(i)
        self._add_outstanding(1)
        self.kick()

    def release(self, i: int) -> None:
        """Free the KV blocks of a handed-off request once its transfer is done."""
        if self._run is not None:
            self._cut()
            self._sync()
        self._free_seq(i, self.reqs.prefill_len[i])
        self.kick()
        self.check_drained()

    def empty(self) -> bool:
        """No request queued, pending, running or holding KV blocks, no iteration."""
        if self._run is not None:
            self._sync()
        return not (
            self.busy or self.waiting or self.pending or self.ids or self.used_blocks
            or self.outstanding
        )  # fmt: skip

    def check_drained(self) -> None:
        """Fire ``on_drained`` (once) if this instance drains and is now empty."""
        if self.draining and self.released_s is None and self.on_drained and self.empty():
            self.on_drained(self)

    def set_ready(self) -> None:
        """Weights are loaded: start serving."""
        self.ready = True
        self.kick()

    def kick(self) -> None:
        """Start an iteration at the end of this instant if idle and there is work."""
        if self.ready and not self.busy:
            self.sim.at_end_of_instant(self._key, self._start)

    # ---- one iteration -------------------------------------------------------------------
    def _start(self) -> None:
        if self.busy:
            return
        if self.pending:
            self._admit_pending()
        if not self.waiting:  # a decode-only iteration (most are): no batching decision
            self._start_decodes()
            return
        preempted = self.preemptions
        chunks: tuple[int, ...] = ()
        with_decodes = len(self.ids) > 0
        if self.waiting:
            plan = self.policy.plan(self._batch_view(with_decodes))
            chunks, with_decodes = plan.chunks, plan.with_decodes and with_decodes
        taken = [self.waiting.popleft() for _ in chunks]
        dec_new, dec_ctx = 0, 0
        accepted = None
        if with_decodes:
            dec_new, dec_ctx, accepted = self._reserve_decodes()
        n_dec = len(self.ids) if with_decodes else 0
        pre = (0, 0, 0.0, 0.0, 0)
        if taken:
            pre = self._reserve_prefills(taken, chunks)
        if chunks and not taken and not n_dec and self.ids:  # prefills went back: decode
            dec_new, dec_ctx, accepted = self._reserve_decodes()
            n_dec = len(self.ids)
        if not self._fits(0):
            raise InvariantViolation(f"instance {self.number}: KV over capacity")
        new = dec_new + pre[0]
        if new == 0:
            for i in reversed(taken):
                self.waiting.appendleft(i)
            if self.preemptions != preempted or self._preempt_partial():
                self._start()  # blocks were freed: plan again (docs/serving.md, stalls)
            return
        dt = self._step_s(
            new, dec_new + pre[4], pre[0], pre[1], pre[2], pre[3], n_dec, dec_ctx + n_dec
        )
        self._it_tokens = new
        self._launch(dt, taken, n_dec, accepted)

    def _start_decodes(self) -> None:
        """:meth:`_start` with no prompt waiting: one decode step of the running batch
        (the general path's arithmetic, without its prefill terms)."""
        if not self.ids:
            if not self._fits(0):
                raise InvariantViolation(f"instance {self.number}: KV over capacity")
            return
        dec_new, dec_ctx, accepted = self._reserve_decodes()
        n_dec = len(self.ids)
        if not self._fits(0):
            raise InvariantViolation(f"instance {self.number}: KV over capacity")
        if dec_new == 0:
            if self.waiting:  # every sequence was preempted: prefill them again
                self._start()
            return
        dt = self._step_s(dec_new, dec_new, 0, 0, 0.0, 0.0, n_dec, dec_ctx + n_dec)
        self._it_tokens = dec_new
        if (
            self._runs and not self.waiting  # no preemption just now
            and self._min_left0 - self._steps > 1 and self._launch_run(dt, n_dec)
        ):  # fmt: skip
            return
        self._launch(dt, [], n_dec, accepted)

    # ---- decode runs (module doc) ----------------------------------------------------------
    def _launch_run(self, dt: float, b: int) -> bool:
        """Price the decode-only iterations after the one just reserved (``dt`` s, ``b``
        sequences) that would start as it ends: each grows the batch by a token and
        costs what :meth:`_start_decodes` would price, up to the first that finishes
        a sequence (that one ends the run), would not fit its blocks (the run ends
        before it) or :data:`RUN_ITERATIONS`. Schedules the run's end and returns True,
        or False if the run would be one iteration."""
        bt, res, cap = self.block_tokens, self._residues, self.capacity_blocks
        used, s = self.used_blocks, self._steps
        growth = [0]
        for _ in range(1, min(self._min_left0 - s, RUN_ITERATIONS)):  # the last finishes one
            s += 1  # steps taken when the next iteration starts
            g = res[-s % bt]
            if used + g > cap:  # it would preempt: the run ends before it
                break
            used += g
            growth.append(g)
        if len(growth) == 1:
            return False
        t = float(self._env.now)
        times = [t]
        t += dt
        times.append(t)
        ctx = self._ctx0_sum + b * (self._steps + 1)  # cached tokens as iteration 2 starts
        for dt_next in self.cost.transformer.decode_steps_s(b, ctx, len(growth) - 1):
            t += dt_next
            if not t <= MAX_TIME_S:  # the step-by-step path raises there
                break
            times.append(t)
        del growth[len(times) - 1 :]
        if len(times) == 2:
            return False
        self.busy = True
        self._it = (times[0], [], b, None)
        self._it_tokens = b
        run = self._run = DecodeRun(times, growth, b)
        run.alarm = Alarm(self.sim, times[-1], self._run_done)
        return True

    def _run_done(self, _ev: object) -> None:
        """The run's last iteration ended: apply the ones before it, then finish it."""
        run = self._run
        assert run is not None
        self._apply(run.last - 1, True)
        self._run = None
        self._it = (run.times[run.last - 1], [], run.seqs, None)
        self._finish(*self._it)

    def _apply(self, upto: int, start: bool) -> None:
        """Apply the run's iteration ends through ``upto`` (< ``last``) as
        :meth:`_finish` and :meth:`_advance_decodes` do, and the start of the iteration
        after each (its blocks, as :meth:`_reserve_decodes` and ``_set_used``, no
        cache); ``start`` False: not the start after ``upto``."""
        run = self._run
        assert run is not None
        first = run.applied + 1
        if upto < first:
            return
        times, growth, b = run.times, run.growth, run.seqs
        busy, area, kv_t = self.busy_s, self._kv_area, self._kv_t
        used, level, peak = self.used_blocks, self._kv_level, self.peak_blocks
        t_prev = times[first - 1]
        c_it = b * self._s_per_token  # the iterations' time at the full compute roof
        pm, tp = self._power, self.cost.tp
        energy, top = self.energy_J, self.peak_W
        host = self._host_s
        for j in range(first, upto + 1):
            t = times[j]
            busy += t - t_prev
            dt = t - t_prev - host if t - t_prev > host else 0.0  # the GPUs' busy part
            c = c_it if c_it < dt else dt
            energy += tp * ((pm.memory_W - pm.idle_W) * dt + (pm.limit_W - pm.memory_W) * c)
            if dt > 0 and c < dt:
                top = max(top, pm.memory_W + (pm.limit_W - pm.memory_W) * (c / dt))
            elif dt > 0:
                top = max(top, pm.limit_W)
            t_prev = t
            if j == upto and not start:
                break
            area += level * (t - kv_t)
            kv_t = t
            used += growth[j]
            level = used
            if level > peak:
                peak = level
        n = upto - first + 1
        self.iterations += n
        self._steps += n
        self.tokens_out += n * b
        self.busy_s, self._kv_area, self._kv_t = busy, area, kv_t
        self.used_blocks, self._kv_level, self.peak_blocks = used, level, peak
        self.energy_J, self.peak_W = energy, top
        run.applied = upto

    def _sync(self) -> None:
        """Apply the run's iteration ends before now: the state anyone sees now (an
        iteration end at exactly now is not applied: the next iteration starts after
        every other event of the instant)."""
        run = self._run
        assert run is not None
        upto = bisect_left(run.times, float(self._env.now), run.applied + 1, run.last) - 1
        if upto > run.applied:
            self._apply(upto, True)

    def _cut(self) -> None:
        """Work arrived: the run ends at the first iteration end at or after now (the
        iteration starting there sees the new work)."""
        run = self._run
        assert run is not None and run.alarm is not None
        j = bisect_left(run.times, float(self._env.now), run.applied + 1, run.last)
        if j < run.last:
            run.last = j
            run.alarm.cancel()
            run.alarm = Alarm(self.sim, run.times[j], self._run_done)

    def settle(self, end_s: float) -> None:
        """The simulation stopped at ``end_s`` (``until_s``; call it only then): apply
        the decode run's iterations that ended by then (one ending at exactly ``end_s``
        ends, the next does not start: the stop comes first)."""
        run = self._run
        if run is None:
            return
        upto = bisect_left(run.times, end_s, run.applied + 1, run.last) - 1
        self._apply(upto, True)
        if upto + 1 < run.last and run.times[upto + 1] == end_s:
            self._apply(upto + 1, False)

    def _launch(self, dt: float, taken: list[int], n_dec: int, acc: np.ndarray | None) -> None:
        """Run the iteration priced ``dt``: one timeout, :meth:`_finish` at its end."""
        self.busy = True
        env = self._env
        ev = env.timeout(dt)
        self._it = (float(env.now), taken, n_dec, acc)
        ev.callbacks.append(self._iteration_done)

    def _iteration_done(self, _ev: object) -> None:
        self._finish(*self._it)

    def _reserve_prefills(
        self, taken: list[int], chunks: tuple[int, ...]
    ) -> tuple[int, int, float, float, int]:
        """Blocks for this iteration's prefill chunks; returns their cost terms: new
        tokens ``sum q``, cached tokens ``sum c``, ``sum q c``, ``sum q^2`` and the
        chunks that finish their prompt (they sample a token). With a prefix cache, a
        request starting its prefill first takes its cached prefix, and requests whose
        blocks no longer fit go back to the queue."""
        done, bt, plen = self.reqs.done, self.block_tokens, self.reqs.prefill_len
        if self.cache is not None:
            self._take_prefixes(taken, chunks)
        new, ctx_sum, cross, own, last = 0, 0, 0.0, 0.0, 0
        for i, q in zip(taken, chunks, strict=False):
            c = done.get(i, 0)
            q = min(q, plen[i] - c)
            new, ctx_sum, cross, own = new + q, ctx_sum + c, cross + q * c, own + q * q
            last += c + q == plen[i]
            self._set_used(self.used_blocks + blocks(c + q, bt) - blocks(c, bt))
            done[i] = c + q
            self.queued_tokens -= q
        return new, ctx_sum, cross, own, last

    def _batch_view(self, decodes: bool) -> BatchView:
        head = []
        for k, i in enumerate(self.waiting):
            if k == WAITING_VIEW:
                break
            done = self.reqs.done.get(i)
            if done is None:
                done = self.cache.peek(i, self.reqs.prefill_len[i]) if self.cache else 0
            head.append((self.reqs.prefill_len[i] - done, done))
        reserve = self._growth(1) if decodes else 0
        free = max(self._free_blocks() - reserve, 0) * self.block_tokens
        return BatchView(
            float(self._env.now), self.role, len(self.ids), tuple(head), free, self.block_tokens
        )

    def _ctx(self) -> np.ndarray:
        """Cached tokens of the running sequences."""
        return np.array(self._ctx0, dtype=np.int64) + self._steps

    def _growth(self, k: int) -> int:
        """New blocks the running sequences need to grow by ``k`` tokens each."""
        bt = self.block_tokens
        if k == 1:  # a block is added exactly when the cache is a whole number of blocks
            if self.lud is None:  # ctx0 mod bt kept up to date
                return self._residues[-self._steps % bt]
            return int(np.count_nonzero(self._ctx() % bt == 0))
        ctx = self._ctx()
        return int(((ctx + k + bt - 1) // bt - (ctx + bt - 1) // bt).sum())

    def _reserve_decodes(self) -> tuple[int, int, np.ndarray | None]:
        """Blocks for this step's positions (preempting LIFO until they fit); returns
        the step's new positions, the decoding sequences' cached tokens and the tokens
        each sequence will accept (None: one each, standard decoding). A LUD step of
        ``K`` positions reads each sequence's KV once, as a decode step does."""
        if self.lud is None:  # _growth(1), inlined: sequences at a block boundary
            k = 1
            growth = self._residues[-self._steps % self.block_tokens]
        else:
            k = self.lud.lookahead
            growth = self._growth(k)
        while self.ids and not self._fits(growth):
            self._preempt_last()
            growth = self._growth(k)
        self._set_used(self.used_blocks + growth)
        b = len(self.ids)
        accepted = None
        if self.lud is not None and self.rng is not None:
            p = self.lud.accept_p[np.asarray(self.ids, dtype=np.int64)]
            accepted = np.minimum(self.rng.geometric(1.0 - p), k)
            left = np.array(self._left0, dtype=np.int64) - self._steps
            accepted = np.minimum(accepted, left)
        return k * b, self._ctx0_sum + b * self._steps, accepted

    def _preempt_last(self) -> None:
        i, c0, left0 = self.ids.pop(), self._ctx0.pop(), self._left0.pop()
        c = c0 + self._steps
        self.reqs.left[i] = left0 - self._steps
        self._ctx0_sum -= c0
        self._residues[c0 % self.block_tokens] -= 1
        if left0 == self._min_left0:
            self._min_left0 = min(self._left0, default=NO_SEQUENCE)
        self._free_seq(i, c)
        self.preemptions += 1
        self.reqs.preemptions.append(i)
        self.reqs.prefill_len[i] = c + 1  # recompute prompt and every token emitted
        self.reqs.done.pop(i, None)
        self.waiting.appendleft(i)
        self.queued_tokens += c + 1

    def _preempt_partial(self) -> bool:
        """Nothing can run (no decode, no prefill chunk fits) while partial (chunked)
        prefills hold KV blocks: preempt the most recently admitted one behind the head
        of the queue, as vLLM's scheduler preempts the last running request when one
        cannot get blocks: its blocks are freed, its computed tokens dropped
        (recomputed later) and it keeps its queue place. Returns False if there is
        none (the head alone holds blocks: the instance waits for a release)."""
        done, waiting = self.reqs.done, self.waiting
        for k in range(len(waiting) - 1, 0, -1):
            i = waiting[k]
            c = done.pop(i, None)
            if c is None:  # not started: holds no blocks
                continue
            self._free_seq(i, c)
            self.queued_tokens += c
            self.prefill_preemptions += 1
            self.reqs.preemptions.append(i)
            return True
        return False

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
            rec = self.sim.recorder
            if rec.record_spans and self.device_tracks:  # the KV arrow ends at this iteration
                rec.flow(kv_flow_ids(i)[1], "f", self.device_tracks[0], self._env.now, "kv")

    def _join(self, i: int, ctx: int) -> None:
        c0, left0 = ctx - self._steps, self.reqs.left[i] + self._steps
        self.ids.append(i)
        self._ctx0.append(c0)
        self._left0.append(left0)
        self._ctx0_sum += c0
        self._residues[c0 % self.block_tokens] += 1
        self._min_left0 = min(self._min_left0, left0)

    def _finish(self, start: float, taken: list[int], n_dec: int, acc: np.ndarray | None) -> None:
        now = float(self._env.now)
        self.busy = False
        self.iterations += 1
        self.busy_s += now - start
        power = self._account_energy(now - start, self._it_tokens)
        if self.sim.recorder.record_spans:
            self._record_iteration(start, now, len(taken), n_dec, power)
        if n_dec:
            self._advance_decodes(n_dec, acc)
        for i in reversed(taken):
            self._prefilled(i)
        # Start the next iteration now when nothing else is due at this instant: the
        # same order of events as deferring it to the end of the instant, minus a pass.
        if self.ready and self._env.peek() > self._env.now:
            self._start()
        else:
            self.kick()
        if self.draining:
            self.check_drained()

    def _account_energy(self, dt: float, tokens: int) -> float:
        """Add an iteration of ``dt`` s and ``tokens`` new positions to the instance's
        energy (per GPU: :meth:`~hetsim.devices.power.PowerModel.interval_J` over the
        iteration less the engine's per-iteration host time, when the GPUs idle); returns
        each GPU's draw while its kernels run, W."""
        pm = self._power
        c = tokens * self._s_per_token
        dt = dt - self._host_s if dt > self._host_s else 0.0  # the engine loop: GPUs idle
        self.energy_J += self.cost.tp * pm.interval_J(dt, c)
        power = pm.busy_W(c / dt) if dt > 0 else pm.idle_W
        if dt > 0 and power > self.peak_W:
            self.peak_W = power
        return power

    def _record_iteration(
        self, start: float, end: float, prefills: int, decodes: int, power_W: float
    ) -> None:
        """One span per GPU of the instance for the iteration [start, end], and its
        draw on each GPU's power counter track."""
        name = "mixed" if prefills and decodes else ("prefill" if prefills else "decode")
        args = {"instance": self.number, "role": self.role, "prefills": prefills,
                "decodes": decodes}  # fmt: skip
        rec, idle = self.sim.recorder, self._power.idle_W
        for track in self.device_tracks:
            rec.span(track, name, start, end, args)
            rec.counter(track + POWER_TRACK_SUFFIX, start, power_W)
            rec.counter(track + POWER_TRACK_SUFFIX, end, idle)

    def _prefilled(self, i: int) -> None:
        """Request ``i``'s prefill chunk ran: requeue it, emit its first token, hand
        it off, finish it or let it join the decode batch."""
        reqs = self.reqs
        if reqs.done[i] < reqs.prefill_len[i]:
            self.waiting.appendleft(i)  # a partial (chunked) prefill
            return
        del reqs.done[i]
        if self.cache is not None:  # its prompt blocks join the cache, held by it
            self._set_used(self.used_blocks - self.cache.insert(i))
        reqs.left[i] -= 1
        self.tokens_out += 1
        self.on_prefilled(i, self)
        if self.role == "prefill":
            self._add_outstanding(-1)
        elif reqs.left[i] <= 0:
            self._free_seq(i, reqs.prefill_len[i])
            self._add_outstanding(-1)
            self.on_finished(np.array([i]), self)
        else:
            self._join(i, reqs.prefill_len[i])

    def _advance_decodes(self, n: int, acc: np.ndarray | None) -> None:
        """The ``n`` running sequences stepped: keep accepted positions only."""
        if n != len(self.ids):
            raise InvariantViolation(f"instance {self.number}: decode batch changed mid-step")
        if acc is None:  # standard decoding: one token each, the reserved block is kept
            self._steps += 1
            self.tokens_out += n
        else:
            self._advance_lud(acc)
        if self._min_left0 - self._steps > 0:
            return
        self._retire()

    def _advance_lud(self, acc: np.ndarray) -> None:
        """LUD step: free the reserved positions that were not accepted."""
        assert self.lud is not None
        bt = self.block_tokens
        ctx = self._ctx()
        reserved = int(((ctx + self.lud.lookahead + bt - 1) // bt).sum())
        kept = int(((ctx + acc + bt - 1) // bt).sum())
        self._set_used(self.used_blocks - reserved + kept)
        ctx0 = np.array(self._ctx0, dtype=np.int64) + acc
        left0 = np.array(self._left0, dtype=np.int64) - acc
        self._ctx0, self._left0 = ctx0.tolist(), left0.tolist()
        self._ctx0_sum = int(ctx0.sum())
        self._min_left0 = int(left0.min())
        self.tokens_out += int(acc.sum())

    def _retire(self) -> None:
        """Remove the sequences with no tokens left and free their blocks."""
        s, bt, cache = self._steps, self.block_tokens, self.cache
        ids, ctx0, left0 = self.ids, self._ctx0, self._left0
        gone = [k for k, l0 in enumerate(left0) if l0 <= s]  # no tokens left: l0 - s <= 0
        finished = [ids[k] for k in gone]
        freed = 0
        for k, i in zip(gone, finished, strict=True):
            c0 = ctx0[k]
            freed += -(-(c0 + s) // bt) - (cache.release(i) if cache else 0)
            self._ctx0_sum -= c0
            self._residues[c0 % bt] -= 1
        for k in reversed(gone):
            del ids[k], ctx0[k], left0[k]
        self._set_used(self.used_blocks - freed)
        self._min_left0 = min(left0, default=NO_SEQUENCE)
        self._add_outstanding(-len(finished))
        self.on_finished(np.array(finished, dtype=np.int64), self)

    def _add_outstanding(self, delta: int) -> None:
        now = float(self._env.now)
        self._resident_area += self.outstanding * (now - self._resident_t)
        self._resident_t = now
        self.outstanding += delta

    def request_seconds(self, end_s: float) -> float:
        """Integral over [0, end_s] of the requests this instance holds (queued, pending,
        running): its share of the time-average number in the system (Little's L)."""
        return self._resident_area + self.outstanding * (end_s - self._resident_t)
