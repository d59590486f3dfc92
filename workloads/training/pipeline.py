"""Long-context pipeline parallelism (decision ``training.schedule``): one training iteration.

p stages of a transformer, each a tensor-parallel group of ``tp`` devices modelled by one
device doing 1/tp of the stage's work (TP communication is not modelled), m microbatches, a
schedule from the policy (GPipe, 1F1B, interleaved, SlimPipe). A forward or backward unit of
``k`` layers on ``s'`` tokens (slice j of n attends to the slices before it) costs ``k``
times one layer's kernels as the ``training-parallel`` kind prices them (``cost_model:
kernel``, the default; :mod:`hetsim.workloads.training.pipeline_cost`), or, with
``cost_model: roofline``, the former single roofline op on its GEMM FLOPs plus causal
attention (slice j of n: ``(2j-1)/n^2`` of the sequence's attention), backward 2x; full
recompute adds the forward to every backward. Units hand ``s' b h`` bf16 activations (1/tp
of them, sequence parallel) to the next stage over ``p2p_link``. Each stage's memory is a
MemoryPool holding 16 B/param states/(p tp) plus the activations of its in-flight units
(Korthikanti ``34 s b h / tp`` per layer with flash attention; ``2 s b h / tp`` per layer
with full recompute, plus one layer's full activations while a backward runs; a sliced
schedule under full recompute also holds each slice's K and V, ``4 s' b h / tp`` per layer,
until its backward, since later slices' recomputed forwards attend to them). Allocations are
replayed in time order; one that does not fit makes the iteration an OOM (``oom = 1``).
Energy: one meter per stage, each unit a busy interval at its FLOPs' compute
utilisation (:mod:`hetsim.workloads.training.pipeline_energy`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, PositiveInt

from hetsim.devices.attention_kernels import AttentionKernel
from hetsim.devices.cluster import Cluster
from hetsim.devices.memory import MemoryPool, OutOfMemory
from hetsim.devices.power import cap_ratio, compute_roof_flops
from hetsim.devices.sustained import DEFAULT_GPU_CLOCKS, GPU_CLOCKS_DESCRIPTION, GpuClocks
from hetsim.simulator import registry
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, WorkloadParams
from hetsim.workloads.training.model import (
    TransformerSpec,
    activation_bytes_per_layer,
    layer_forward_flops,
)
from hetsim.workloads.training.pipeline_cost import (
    ChunkPrices,
    CostModel,
    fit_trust,
    kernel_prices,
    roofline_prices,
)
from hetsim.workloads.training.pipeline_energy import (
    PIPELINE_ENERGY,
    moved_flops,
    pipeline_columns,
    stage_meters,
)
from hetsim.workloads.training.pipeline_sim import (
    Helper,
    HelperRun,
    bubble_fraction,
    peak_in_flight,
    run_schedule,
    unit_conservation,
)
from hetsim.workloads.training.slice_exchange import (
    helper,
    own_exchange_s,
    partner,
    redistribution,
)
from hetsim.workloads.training.view import PipelineView, Schedule, Unit

UNIT_COLUMNS = ("stage", "kind", "micro", "chunk", "slice", "start_s", "end_s")
LLAMA70B = TransformerSpec(
    layers=80, hidden=8192, heads=64, ffn=28672, vocab=128256, seq_len=131072, micro_batch=1,
    flash_attention=True, causal=True,
)  # fmt: skip


class PipelineParams(WorkloadParams):
    """The ``workload:`` block of a pipeline-schedule scenario."""

    kind: Literal["training-pipeline"] = Field(
        default="training-pipeline", description="Workload kind (training-pipeline)."
    )
    model: TransformerSpec = Field(
        default=LLAMA70B,
        description="The dense transformer trained (default: a "
        "Llama-3-70B shape at 131072 tokens per sequence).",
    )
    stages: PositiveInt = Field(
        default=8, description="Pipeline stages (the model's layers split evenly over them)."
    )
    micro_batches: PositiveInt = Field(default=8, description="Micro-batches per iteration.")
    tp: PositiveInt = Field(8, description="tensor-parallel degree inside a stage")
    recompute: Literal["none", "full"] = Field(
        default="none",
        description="Activation recomputation: none, or full (every backward reruns its forward).",
    )
    dtype: Literal["bf16", "fp16"] = Field(
        default="bf16",
        description="Number format of compute and of the activations sent between stages.",
    )
    p2p_link: str = Field(
        default="ib-ndr",
        description="Catalogue link type carrying activations between adjacent stages.",
    )
    device: str | None = Field(
        default=None,
        description="Cluster device that prices a stage's compute (null: the first GPU or NPU).",
    )
    cost_model: CostModel = Field(
        "kernel",
        description="kernel: each chunk as its layers' kernels (the training-parallel "
        "pricing, TP communication left out); roofline: one roofline op per chunk at "
        "large-GEMM efficiency (the former pricing)",
    )
    attention_kernel: AttentionKernel = Field(
        "fitted",
        description="cost_model kernel: the attention kernel (fitted: the attention_prefill "
        "class fit; fa2/fa3/cudnn/eager: a published kernel profile, "
        "devices/attention_kernels.yaml)",
    )
    gpu_clocks: GpuClocks = Field(default=DEFAULT_GPU_CLOCKS, description=GPU_CLOCKS_DESCRIPTION)


@workloads.register("training-pipeline")
class PipelineWorkload(Workload):
    """One iteration of pipeline-parallel training under a schedule policy."""

    Params = PipelineParams
    domain = "training"
    decision_points: ClassVar[dict[str, str]] = {"schedule": "1f1b"}
    metrics: ClassVar[dict[str, str]] = {
        "iteration_s": "end of the last backward unit (makespan of the iteration)",
        "bubble": "mean over stages of 1 - busy / makespan (busy: its units' own work and "
        "the moved attention it ran for other stages)",
        "peak_act_bytes": "largest, over stages, peak activation bytes held at once",
        "peak_act_stage0_bytes": "stage 0's peak activation bytes",
        "peak_bytes": "largest, over stages, states + activations peak",
        "oom": "1 if some stage's memory pool could not hold its allocation",
        "mfu": "model FLOPs per device (3x forward, no recompute) / (makespan x peak)",
        "p2p_bytes": "activation and gradient bytes sent between (virtual) stages, all stages "
        "together (per TP rank)",
        "exchange_bytes": "SlimPipe's attention-context exchange bytes per step, all stages "
        "together (per TP rank; reconstruction, balance: redistribute)",
        "model_fits": "least trusted kernel fit used: calibrated, borrowed or uncalibrated "
        "(roofline: cost_model roofline)",
        "kernel_classes": "kernel classes the chunks were priced with",
        "borrowed_fits": "GPU.class<-device for every kernel class priced with another "
        "device's fit; GPU.sustained<-device and GPU.gemm.<format>_scale<-device for a "
        "clock ratio or GEMM format scale measured on another device",
        **PIPELINE_ENERGY,
    }

    def __init__(self, sim: Simulation, cluster: Cluster, params: PipelineParams,
                 policies: dict[str, Any], base_dir: Path) -> None:  # fmt: skip
        super().__init__(sim, cluster, params, policies, base_dir)
        name = cluster.accelerator(params.device, "device")
        self.dev = cluster.device(name)
        capacity = cluster.memory(name).capacity_bytes
        self.link = registry.link_types.get(params.p2p_link)
        self.sched: Schedule = policies["schedule"].schedule(self._view())
        if self.sched.split_backward:
            raise ValueError("policies.schedule: this schedule splits the backward into B "
                             "and W units, which the training-pipeline kind does not price "
                             "apart; use the training-parallel kind")  # fmt: skip
        layers_per_chunk, rem = divmod(params.model.layers, params.stages * self.sched.chunks)
        if rem or not layers_per_chunk:
            raise ValueError(f"model.layers {params.model.layers} not divisible into "
                             f"{params.stages} stages x {self.sched.chunks} chunks")  # fmt: skip
        self.k = layers_per_chunk
        self.pools = [MemoryPool(sim, f"stage{d}:mem", capacity, group="pipeline")
                      for d in range(params.stages)]  # fmt: skip
        self.rows = sim.recorder.table("units", UNIT_COLUMNS)
        self.tracks = [sim.recorder.track(f"stage{d}", "pipeline", "device")
                       for d in range(params.stages)]  # fmt: skip
        self.oom = ""
        self._price()

    def _view(self) -> PipelineView:
        """The policy's view: shape plus one layer's forward FLOPs per TP rank for one
        microbatch's whole sequence, split into linear and causal-attention parts."""
        m, p = self.params.model, self.params
        gemm, attn = layer_forward_flops(m.seq_len, m.micro_batch, m.hidden, m.ffn,
                                         causal=m.causal)  # fmt: skip
        gemm, attn = gemm / p.tp, attn / p.tp
        if not m.causal:  # full attention costs the same per token: it is linear work
            gemm, attn = gemm + attn, 0.0
        return PipelineView(p.stages, p.micro_batches, gemm, attn)

    def _bounds(self) -> np.ndarray:
        """Slice boundaries as fractions of the sequence (uniform when the policy gives none)."""
        n, b = self.sched.slices, self.sched.bounds
        if not b:
            return np.arange(n + 1) / n
        x = np.asarray(b, dtype=float)
        if len(x) != n + 1 or x[0] != 0.0 or x[-1] != 1.0 or np.any(np.diff(x) <= 0):
            raise ValueError(f"schedule bounds must be {n + 1} increasing fractions from 0 to 1")
        return x

    def _price(self) -> None:
        """Per slice: forward/backward time, activation bytes, P2P bytes and time."""
        m, p = self.params.model, self.params
        view, x = self._view(), self._bounds()
        lo, hi = x[:-1], x[1:]
        attn = hi**2 - lo**2
        n = self.sched.slices
        tokens = m.seq_len * (hi - lo)
        red = bool(self.sched.redistribute and n > 1)
        self.exchange_bytes = 0.0
        if red and self.sched.bounds:
            raise ValueError("policies.schedule: workload redistribution needs uniform slices")
        self.f_flops = (view.linear_flops * (hi - lo) + view.causal_attn_flops * attn) * self.k
        if p.cost_model == "roofline":
            if p.attention_kernel != "fitted":
                raise ValueError("workload.attention_kernel: a kernel profile needs "
                                 "cost_model: kernel")  # fmt: skip
            if p.gpu_clocks != DEFAULT_GPU_CLOCKS:
                raise ValueError(f"workload.gpu_clocks: {p.gpu_clocks} needs cost_model: "
                                 "kernel (the roofline has no clock regime)")  # fmt: skip
            price = roofline_prices(self.dev.spec, view, self.f_flops, attn, self.k,
                                    m.params_per_layer, p.tp, p.dtype)  # fmt: skip
        else:
            price = kernel_prices(self.dev.spec, m, p.tp, p.dtype, x, self.k, False,
                                  p.attention_kernel, p.gpu_clocks)  # fmt: skip
        self.f_s, self.b_s = price.fwd_s.copy(), price.bwd_s.copy()
        #: FLOP/s of a compute-bound unit (energy): the clock regime of the kernel fits
        ratio = (
            price.cost.fit_ref.clock_ratio if price.cost is not None else cap_ratio(self.dev.spec)
        )
        self.roof_flops = compute_roof_flops(self.dev.spec, p.dtype, ratio)
        self.attn_flops = view.causal_attn_flops * attn * self.k  # per slice, forward
        self.moved: dict[int, float] = {}  # heavy slice -> share of its attention moved
        self.trust = fit_trust(price.cost)
        self.help: dict[int, dict[str, tuple[float, float, float, float]]] = {}
        if red:  # SlimPipe: heavy slices hand part of their attention to a partner device
            self._redistribute(price, tokens)
        if p.recompute == "full":
            self.b_s = self.b_s + self.f_s
        full = np.array([activation_bytes_per_layer(int(s), m.micro_batch, m.hidden, m.heads,
                         m.ffn, flash=True, tp=p.tp) for s in tokens])  # fmt: skip
        # full recompute keeps each layer's input; a sliced schedule also keeps the K and V
        # of every slice for the later slices' attention (recomputed forwards need them)
        kv = 4.0 if self.sched.slices > 1 else 0.0
        sbh = tokens * m.micro_batch * m.hidden / p.tp
        kept = (2 + kv) * sbh if p.recompute == "full" else full
        self.unit_act = (kept * self.k).astype(np.int64)
        self.work_bytes = (
            full.astype(np.int64) if p.recompute == "full" else np.zeros(len(full), np.int64)
        )
        self.p2p_bytes_unit = (2 * tokens * m.micro_batch * m.hidden / p.tp).astype(np.int64)
        self.p2p_s = np.array([self.link.transfer_time_s(int(b)) for b in self.p2p_bytes_unit])
        self.states = m.state_bytes(shards=p.stages * p.tp)

    def _redistribute(self, price: ChunkPrices, tokens: np.ndarray) -> None:
        """Per heavy slice: its own time less the moved share of its attention (plus its
        exchange under ``exchange_overlap: none``), and per layer what its partner runs,
        the transfers each way and the bytes the partner holds meanwhile
        (:mod:`~hetsim.workloads.training.slice_exchange`)."""
        m, p, k = self.params.model, self.params, self.k
        d, hq = m.hidden // m.heads, m.heads / p.tp
        ov = self.sched.exchange_overlap
        rec = p.recompute == "full"

        def link_s(nbytes: float) -> float:
            return self.link.transfer_time_s(int(nbytes)) if nbytes > 0 else 0.0

        for j, ex in enumerate(redistribution(self.sched.slices)):
            if not ex.heavy or ex.moved <= 0:
                continue
            fs, fr, bs, br = ex.directions(float(tokens[j]) * m.micro_batch, d, hq, hq, 2.0)
            self.exchange_bytes += k * (fs + fr + bs + br)
            wf, wb = ex.moved * price.fwd_attn_s[j] / k, ex.moved * price.bwd_attn_s[j] / k
            self.moved[j] = float(ex.moved)
            f = (wf, link_s(fs), link_s(fr), fs + fr)
            b = (wb, link_s(bs), link_s(br), bs + br)
            if rec:  # the backward reruns the forward first, with its own exchange
                b = (wb + wf, b[1] + f[1], b[2] + f[2], max(b[3], f[3]))
            self.help[j] = {"F": f, "B": b}
            self.f_s[j] += -k * wf + own_exchange_s(k, f[1], f[2], ov)
            self.b_s[j] += -k * wb + own_exchange_s(k, link_s(bs), link_s(br), ov)

    def _busy_s(self) -> list[float]:
        """Per stage: its units' own seconds plus the helpers it ran."""
        return [sum(self._time(d, u) for u in order)
                + sum(b - a for a, b, _ in (self.helpers_run[d] if self.helpers_run else ()))
                for d, order in enumerate(self.sched.order)]  # fmt: skip

    def _helper(self, d: int, u: Unit) -> Helper | None:
        """The partner's part of unit ``u`` of device ``d`` (None: not a heavy slice)."""
        spec = self.help.get(u.slice)
        if spec is None:
            return None
        q = partner(d, u.slice, self.sched.slices, self.params.stages)
        w, send, ret, buf = spec[u.kind]
        return helper(q, self.k, w, send, ret, buf, self.sched.exchange_overlap)

    def _time(self, d: int, u: Unit) -> float:
        return float(self.f_s[u.slice] if u.kind == "F" else self.b_s[u.slice])

    def start(self) -> None:
        """Run the schedule, then replay its memory on the stage pools."""
        self.helpers_run: list[list[HelperRun]] = []
        self.starts, self.ends = run_schedule(self.sched, self.params.stages, self._time,
                                              lambda u: float(self.p2p_s[u.slice]),
                                              self._helper, self.helpers_run,
                                              self.sched.partner_priority)  # fmt: skip
        for d, order in enumerate(self.sched.order):
            for u, a, b in zip(order, self.starts[d], self.ends[d], strict=True):
                self.rows.append(d, u.kind, u.micro, u.chunk, u.slice, a, b)
                self.sim.recorder.span(self.tracks[d], f"{u.kind}{u.micro}.{u.slice}", a, b, None)
        self.sim.env.process(self._replay())

    def _events(self) -> list[tuple[float, int, int, int]]:
        """(time, order, stage, +/- bytes): F allocates at start, B frees at end; a
        recompute backward holds one layer's working activations while it runs."""
        ev = []
        for d, order in enumerate(self.sched.order):
            for u, a, b in zip(order, self.starts[d], self.ends[d], strict=True):
                act, work = int(self.unit_act[u.slice]), int(self.work_bytes[u.slice])
                if u.kind == "F":
                    ev.append((a, 1, d, act))
                else:
                    ev += [(b, 0, d, -act)]
                    if work:
                        ev += [(a, 1, d, work), (b, 0, d, -work)]
        for d, ran in enumerate(self.helpers_run):  # a partner holds the exchanged context
            for a, b, nbytes in ran:
                if nbytes:
                    ev += [(a, 1, d, int(nbytes)), (b, 0, d, -int(nbytes))]
        return sorted(ev)

    def _replay(self) -> Any:
        try:
            for pool in self.pools:
                pool.allocate("states", self.states)
            for t, _, d, nbytes in self._events():
                if t > self.sim.now:
                    yield self.sim.env.timeout(t - self.sim.now)
                if nbytes > 0:
                    self.pools[d].allocate("activations", nbytes)
                else:
                    self.pools[d].free("activations", -nbytes)
        except OutOfMemory as e:
            self.oom = str(e)
        self.done.succeed()

    def _p2p_total_bytes(self) -> int:
        """Bytes every stage sends: a forward unit to the next virtual stage unless it
        is the last, a backward unit to the previous one unless it is the first
        (``2 m n (p v - 1)`` slice sends for ``v`` chunks and ``n`` slices)."""
        p, last = self.params.stages, self.params.stages * self.sched.chunks - 1
        total = 0
        for d, order in enumerate(self.sched.order):
            for u in order:
                k = u.chunk * p + d
                if (u.kind == "F" and k < last) or (u.kind == "B" and k > 0):
                    total += int(self.p2p_bytes_unit[u.slice])
        return total

    def _conservation(self, finished: bool) -> None:
        """Microbatches through the stages (:func:`unit_conservation`); the activation
        bytes each stage pool holds now are those of its units in flight (forward begun,
        backward not ended), unless an allocation failed (``oom``: the rest is dropped)."""
        p = self.params
        unit_conservation("training-pipeline", self.sched.order, self.starts, self.ends,
                          p.micro_batches, len(self.rows))  # fmt: skip
        if self.oom:
            return
        now, events = self.sim.now, self._events()
        held = [0] * p.stages
        for t, _, d, nbytes in events:
            if t < now or (finished and t <= now):
                held[d] += nbytes
        at_now = [(d, nbytes) for t, _, d, nbytes in events if t == now and not finished]
        for d, pool in enumerate(self.pools):
            want = {held[d]}
            level = held[d]
            for e, nbytes in at_now:  # events at now: some may have run, in order
                if e == d:
                    level += nbytes
                    want.add(level)
            got = pool.usage_by_tag().get("activations", 0)
            if got not in want:
                raise InvariantViolation(
                    f"training-pipeline: stage {d} holds {got} activation bytes, its "
                    f"microbatches in flight {held[d]}"
                )

    def check_partial(self) -> None:
        """At any moment: microbatches conserved and activation memory accounted."""
        self._conservation(finished=False)

    def check(self) -> None:
        """At the end: every microbatch's units ran; no activation left held."""
        self._conservation(finished=True)

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """See :attr:`metrics`."""
        makespan = max(max(e) for e in self.ends)
        peaks = [
            peak_in_flight(o, lambda u: float(self.unit_act[u.slice])) for o in self.sched.order
        ]
        useful = 3 * sum(float(self.f_flops[u.slice]) for u in self.sched.order[0] if u.kind == "F")
        p2p = self._p2p_total_bytes()
        energy = self._energy(makespan)
        return {
            "iteration_s": makespan,
            "bubble": float(bubble_fraction(self.starts, self.ends, self._busy_s()).mean()),
            "peak_act_bytes": max(peaks),
            "peak_act_stage0_bytes": peaks[0],
            "peak_bytes": max(p.peak_bytes for p in self.pools),
            "oom": int(bool(self.oom)),
            "mfu": useful / (makespan * self.dev.spec.peak(self.params.dtype)),
            "p2p_bytes": p2p,
            "exchange_bytes": self.exchange_bytes
            * self.params.micro_batches
            * self.params.stages
            * self.sched.chunks,
            **self.trust,
            **energy,
        }

    def _unit_flops(self, u: Unit) -> float:
        """FLOPs one TP rank runs for unit ``u`` (less the attention a heavy slice hands
        its partner): forward 1x, backward 2x, full recompute adds the forward."""
        f = float(self.f_flops[u.slice])
        a = moved_flops(self.moved.get(u.slice, 0.0), float(self.attn_flops[u.slice]))
        if u.kind == "F":
            return f - a
        times = 3.0 if self.params.recompute == "full" else 2.0
        return times * (f - a)

    def _energy(self, makespan: float) -> dict[str, float | int | str]:
        """The :data:`PIPELINE_ENERGY` columns (the tables are written once)."""
        if getattr(self, "_energy_out", None) is None:
            p = self.params
            moved = 0.0
            for order in self.sched.order:
                for u in order:
                    a = moved_flops(self.moved.get(u.slice, 0.0), float(self.attn_flops[u.slice]))
                    moved += a if u.kind == "F" else (3.0 if p.recompute == "full" else 2.0) * a
            meters = stage_meters(self.dev.energy.model, self.sim.recorder, self.sched.order,
                                  self.starts, self.ends, self._unit_flops,
                                  self.helpers_run, moved, self.roof_flops)  # fmt: skip
            tokens = float(p.micro_batches * p.model.micro_batch * p.model.seq_len)
            self._energy_out = pipeline_columns(
                self.cluster, self.dev.spec, meters, self.sim.recorder, makespan, p.tp, tokens
            )
        return dict(self._energy_out)
