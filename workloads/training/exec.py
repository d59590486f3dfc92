"""Execution of one training iteration on one accelerator: a compute stream, two copy streams.

The compute stream runs the ops in order (one SimPy process per run, one timeout per op).
Swap-outs go device-to-host and swap-ins host-to-device over the cluster's PCIe link
(``Cluster.copy``: FIFO copy engine per direction). Device memory is the cluster's
:class:`~devices.memory.MemoryPool`: an op's outputs are allocated when it starts, a tensor
is freed after its last consumer, a swapped-out tensor when its D2H copy ends, a swap-in
buffer when its copy starts. A consumer whose input is still on the host or in flight waits:
that wait is stall time, exactly ``copy end - consumer's ready time``. An allocation that
does not fit while planned swap-outs are still copying waits for them, oldest first (their
memory is freed when each copy ends; a forced copy would queue behind them on the same
FIFO engine anyway): that wait is stall time too. A dropped (recomputed)
tensor is rematerialised with the rest of its layer's dropped tensors by rerunning their
producers on the compute stream (recompute time). An allocation that does not fit raises
:class:`~devices.memory.OutOfMemory` unless the plan allows forced swaps: then the
runtime's fallback (:mod:`workloads.training.oom_fallback`: victims chosen without future
knowledge, least recently used by default) copies resident activations out synchronously,
evicting extra bytes for fragmentation; the copy time and a per-failure synchronisation
cost stall the compute stream.
With optimizer offload (:mod:`workloads.training_offload`) the device Adam ops are skipped,
gradients are copied out per layer (or after backward) and the host step ends the iteration.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from hetsim.devices.cluster import Cluster
from hetsim.devices.memory import OutOfMemory
from hetsim.workloads.training.offload import OffloadStep, step_tail
from hetsim.workloads.training.oom_fallback import OomFallback, victims
from hetsim.workloads.training.ops import OPT, Lifetimes
from hetsim.workloads.training.view import SwapPlan

NOT_YET, RESIDENT, SWAPPING_OUT, HOST, SWAPPING_IN, DROPPED, DEAD = range(7)
ACT = "activations"


@dataclass
class IterationStats:
    """What one iteration measured."""

    step_s: float = 0.0
    stall_s: float = 0.0
    recompute_s: float = 0.0
    profile_s: float = 0.0
    d2h_bytes: int = 0
    h2d_bytes: int = 0
    forced_swaps: int = 0
    forced_events: int = 0  # allocations that failed and were served by the fallback
    plan_misses: int = 0
    peak_bytes: int = 0
    offload_d2h_bytes: int = 0
    offload_h2d_bytes: int = 0
    cpu_adam_s: float = 0.0
    offload_tail_s: float = 0.0
    op_start_s: list[float] = field(default_factory=list)
    op_end_s: list[float] = field(default_factory=list)
    op_used_bytes: list[int] = field(default_factory=list)


class Executor:
    """Runs iterations of op sequences on ``device`` with its ``host`` for swapped tensors."""

    def __init__(self, cluster: Cluster, device: str, host: str, overhead_s: float,
                 dispatch_scale: float = 1.0,
                 fallback: OomFallback | None = None) -> None:  # fmt: skip
        self.cluster = cluster
        self.env = cluster.sim.env
        self.device = device
        self.host = host
        self.pool = cluster.memory(device)
        self.host_pool = cluster.memory(host)
        self.profiler_op_overhead_s = overhead_s  # per ATen dispatch the profiler hooks
        self.dispatch_scale = dispatch_scale
        self.fallback = fallback if fallback is not None else OomFallback()

    def run(
        self, lt: Lifetimes, op_s: np.ndarray, plan: SwapPlan, profile: bool,
        offload: OffloadStep | None = None,
    ) -> Generator[simpy.Event, Any, IterationStats]:  # fmt: skip
        """SimPy generator: one iteration under ``plan``; returns its statistics.

        With ``plan.offload`` the device Adam ops are skipped (zero length) and ``offload``
        (required then) prices the host-side step that replaces them.
        Raises OutOfMemory when an allocation cannot be satisfied.
        """
        if plan.offload is not None and offload is None:
            raise ValueError("the plan offloads the optimizer but no OffloadStep was given")
        st = self.stats = IterationStats()
        self._begin(lt, plan)
        self._op_s = op_s  # also prices recomputation
        t_begin = self.env.now
        per = self.profiler_op_overhead_s * self.dispatch_scale if profile else 0.0
        hooks = [per * d for d in lt.seq.op_dispatches]  # one hook per ATen dispatch
        op_list = op_s.tolist()
        skip = (lt.phase == OPT).tolist() if offload is not None else [False] * lt.seq.n_ops
        grads: list[simpy.Event] = []
        for i in range(lt.seq.n_ops):
            for t in lt.seq.op_ins[i]:
                if self.state[t] != RESIDENT and self.state[t] != SWAPPING_OUT:
                    yield from self._ensure(t, i)
            outs = lt.seq.op_outs[i]
            if outs:
                yield from self._alloc(sum(self.size[t] for t in outs), i, outs)
                for t in outs:
                    self.state[t] = RESIDENT
                    self.resident.add(t)
            st.op_start_s.append(self.env.now - t_begin)
            st.op_used_bytes.append(self.pool.used_bytes)
            if not skip[i]:
                yield self.env.timeout(op_list[i] + hooks[i])
                st.profile_s += hooks[i]
            st.op_end_s.append(self.env.now - t_begin)
            self._after_op(i)
            if offload is not None:
                self._copy_grads(i, offload, grads)
        if offload is not None:
            yield from self._offload_tail(offload, grads)
        self._check_clean()
        st.step_s = self.env.now - t_begin
        return st

    def _copy_grads(self, i: int, step: OffloadStep, grads: list[simpy.Event]) -> None:
        """Issue the gradient copies due after op ``i`` (per layer, or all at once)."""
        assert self.plan.offload is not None
        if self.plan.offload.overlap_grad_copy:
            nbytes = int(step.grad_bytes_at_op[i])
        else:
            nbytes = int(step.grad_bytes_at_op.sum()) if i == step.last_bwd_op else 0
        if nbytes:
            grads.append(self.cluster.copy(self.device, self.host, nbytes, name="grad-d2h"))
            self.stats.offload_d2h_bytes += nbytes

    def _offload_tail(
        self, step: OffloadStep, grads: list[simpy.Event]
    ) -> Generator[simpy.Event, Any, None]:
        t0 = self.env.now
        self.stats.cpu_adam_s = yield from step_tail(
            self.cluster, self.device, self.host, grads, step
        )
        self.stats.offload_h2d_bytes += step.param_bytes
        self.stats.offload_tail_s = self.env.now - t0

    # ---- set-up -------------------------------------------------------------------
    def _begin(self, lt: Lifetimes, plan: SwapPlan) -> None:
        self.lt = lt
        self.plan = plan
        self.size = lt.size.tolist()
        self.last_use = lt.last_use.tolist()
        self.state = [NOT_YET] * len(self.size)
        self.resident: set[int] = set()
        self.events: dict[int, simpy.Event] = {}
        self.out_events: dict[int, simpy.Event] = {}  # swap-outs in flight, issue order
        self.pending_prefetch: list[int] = []
        n = lt.seq.n_ops
        self.out_after: list[list[int]] = [[] for _ in range(n)]
        self.prefetch_at: list[list[int]] = [[] for _ in range(n)]
        self.drop_after: list[list[int]] = [[] for _ in range(n)]
        starts = lt.stage_start()
        matcher = _Matcher(lt, plan.match_threshold) if plan.swaps else None
        op_index = {k: i for i, k in enumerate(lt.op_keys())} if plan.swaps else {}
        for order in plan.swaps:
            assert matcher is not None
            t = matcher.find(order)
            if t is None or lt.first_bwd_use[t] < 0:
                self.stats.plan_misses += 1
                continue  # the planned tensor is not found in this sequence
            out = order.out_after_op if order.out_after_op is not None else lt.last_fwd_use[t]
            at = order.in_at_op
            if order.in_at_stage is not None:
                at = starts.get(order.in_at_stage)
            if order.in_at_key is not None:
                at = op_index.get(order.in_at_key)
            if 0 <= out < n and at is not None and 0 <= at < n:
                self.out_after[out].append(t)
                self.prefetch_at[at].append(t)
        dropped: set[int] = set()
        for key in plan.recompute:
            t = lt.key_index.get(key)
            if t is not None and lt.first_bwd_use[t] >= 0 and lt.last_fwd_use[t] >= 0:
                self.drop_after[lt.last_fwd_use[t]].append(t)
                dropped.add(t)
        self.drops_of_layer: dict[int, list[int]] = {}
        for t in sorted(dropped):
            self.drops_of_layer.setdefault(int(lt.layer[lt.producer[t]]), []).append(t)

    # ---- per-op bookkeeping ---------------------------------------------------------
    def _after_op(self, i: int) -> None:
        seq = self.lt.seq
        for t in seq.op_ins[i] + seq.op_outs[i]:
            if self.last_use[t] == i and self.state[t] in (RESIDENT, SWAPPING_OUT):
                self._release(t)
        for t in self.drop_after[i]:
            if self.state[t] == RESIDENT:
                self._release(t, DROPPED)
        for t in self.out_after[i]:
            if self.state[t] == RESIDENT and self.last_use[t] > i:
                self._swap_out(t)
        self.pending_prefetch.extend(self.prefetch_at[i])
        waiting, self.pending_prefetch = self.pending_prefetch, []
        for t in waiting:
            if self.state[t] == SWAPPING_OUT:
                self.state[t] = RESIDENT  # still on the device: cancel the free
                self.resident.add(t)
            elif self.state[t] == HOST and self.last_use[t] > i:
                if self.pool.can_fit(self.size[t]):
                    self._swap_in(t)
                else:
                    self.pending_prefetch.append(t)  # retry after the next op

    def _release(self, t: int, to: int = DEAD) -> None:
        self.pool.free(ACT, self.size[t])
        self.resident.discard(t)
        self.state[t] = to

    def _check_clean(self) -> None:
        left = [t for t, s in enumerate(self.state) if s in (RESIDENT, SWAPPING_IN, HOST)]
        if left:
            raise RuntimeError(f"tensors still live after the iteration: {left[:5]}")

    # ---- copies -----------------------------------------------------------------------
    def _swap_out(self, t: int) -> simpy.Event:
        self.state[t] = SWAPPING_OUT
        self.resident.discard(t)
        self.host_pool.allocate("swap", self.size[t])
        ev = self.cluster.copy(self.device, self.host, self.size[t], name="swap-out")
        self.stats.d2h_bytes += self.size[t]
        self.out_events[t] = ev

        def done(_: simpy.Event) -> None:
            self.out_events.pop(t, None)
            if self.state[t] == SWAPPING_OUT:
                self.pool.free(ACT, self.size[t])
                self.state[t] = HOST
            else:
                self.host_pool.free("swap", self.size[t])  # device copy kept or dead

        ev.callbacks.append(done)
        return ev

    def _swap_in(self, t: int) -> simpy.Event:
        self.pool.allocate(ACT, self.size[t])
        self.state[t] = SWAPPING_IN
        ev = self.cluster.copy(self.host, self.device, self.size[t], name="swap-in")
        self.stats.h2d_bytes += self.size[t]
        self.events[t] = ev

        def done(_: simpy.Event) -> None:
            self.host_pool.free("swap", self.size[t])
            self.state[t] = RESIDENT
            self.resident.add(t)

        ev.callbacks.append(done)
        return ev

    # ---- waiting, recompute, OOM --------------------------------------------------------
    def _ensure(self, t: int, i: int) -> Generator[simpy.Event, Any, None]:
        t0 = self.env.now
        if self.state[t] == HOST:
            yield from self._alloc(self.size[t], i, self.lt.seq.op_ins[i])
            self.pool.free(ACT, self.size[t])  # _swap_in allocates it again
            self._swap_in(t)
        if self.state[t] == SWAPPING_IN:
            yield self.events[t]
            self.stats.stall_s += self.env.now - t0
        elif self.state[t] == DROPPED:
            yield from self._rematerialise(int(self.lt.layer[self.lt.producer[t]]), i)
        if self.state[t] != RESIDENT:
            raise RuntimeError(f"tensor {self.lt.seq.t_key[t]} not available at op {i}")

    def _rematerialise(self, layer: int, i: int) -> Generator[simpy.Event, Any, None]:
        """Rerun the producers of every dropped tensor of ``layer`` (compute stream)."""
        lt = self.lt
        group = [t for t in self.drops_of_layer.get(layer, ()) if self.state[t] == DROPPED]
        yield from self._alloc(sum(self.size[t] for t in group), i, ())
        producers = sorted({int(lt.producer[t]) for t in group})
        cost = float(self._op_s[producers].sum()) if producers else 0.0
        yield self.env.timeout(cost)
        self.stats.recompute_s += cost
        for t in group:
            self.state[t] = RESIDENT
            self.resident.add(t)

    def _alloc(
        self, nbytes: int, i: int, protect: tuple[int, ...]
    ) -> Generator[simpy.Event, Any, None]:
        t0 = self.env.now
        while not self.pool.can_fit(nbytes):
            flying = [t for t, ev in self.out_events.items() if self.state[t] == SWAPPING_OUT]
            if not flying:
                break
            yield self.out_events[flying[0]]  # the oldest planned swap-out frees its memory
        self.stats.stall_s += self.env.now - t0
        try:
            self.pool.allocate(ACT, nbytes)
        except OutOfMemory:
            if not self.plan.forced_swap_on_oom:
                raise
            yield from self._forced_swap(nbytes - self.pool.free_bytes, i, protect)
            self.pool.allocate(ACT, nbytes)
        self.stats.peak_bytes = max(self.stats.peak_bytes, self.pool.used_bytes)

    def _forced_swap(
        self, need: int, i: int, protect: tuple[int, ...]
    ) -> Generator[simpy.Event, Any, None]:
        """The runtime's fallback (:class:`OomFallback`): after the failed allocation's
        synchronisation cost, copy out resident activations in the fallback's victim order
        until ``need`` bytes are usable (more for fragmentation), synchronously."""
        fb = self.fallback
        if fb.victims == "fail":
            raise OutOfMemory(self.pool.name, ACT, need, self.pool.free_bytes)
        seq = self.lt.seq
        live = [t for t in self.resident if t not in protect and self.last_use[t] > i]
        order = victims(fb.victims, live, i, seq.t_uses, seq.t_producer, self.size)
        want = fb.bytes_to_evict(need)
        chosen, freed = [], 0
        for t in order:
            if freed >= want:
                break
            chosen.append(t)
            freed += self.size[t]
        if freed < need:
            raise OutOfMemory(self.pool.name, ACT, need, freed)
        t0 = self.env.now
        if fb.sync_s:
            yield self.env.timeout(fb.sync_s)
        yield self.env.all_of([self._swap_out(t) for t in chosen])
        self.stats.stall_s += self.env.now - t0
        self.stats.forced_swaps += len(chosen)
        self.stats.forced_events += 1


class _Matcher:
    """Finds a planned tensor in the current sequence: by exact key, or, when the order
    carries a signature, by signature similarity (the share of its five features that
    agree) within the key's layer, best first, at or above ``threshold``."""

    def __init__(self, lt: Lifetimes, threshold: float) -> None:
        self.lt = lt
        self.threshold = threshold
        self._sigs: list[tuple[int, str, int, tuple[str, ...], int]] | None = None
        self._by_layer: dict[int, list[int]] = {}

    def find(self, order: Any) -> int | None:
        """The tensor index ``order`` refers to in this sequence (None: a miss)."""
        if order.signature is None:
            return self.lt.key_index.get(order.key)
        if self._sigs is None:
            self._sigs = self.lt.signatures()
            for t, sig in enumerate(self._sigs):
                self._by_layer.setdefault(sig[0], []).append(t)
        want = order.signature
        best, best_score = None, -1.0
        for t in self._by_layer.get(want[0], ()):
            sig = self._sigs[t]
            score = sum(a == b for a, b in zip(sig[1:], want[1:], strict=True)) / 4
            if score > best_score:
                best, best_score = t, score
        return best if best_score >= self.threshold else None
