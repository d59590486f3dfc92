"""Training memory on one accelerator: swap, recompute, or neither (decision ``training.swap``).

Each iteration is an operator sequence (:mod:`workloads.training_ops`) executed with one
compute stream and two PCIe copy streams (:mod:`workloads.training_exec`). Before every
iteration the swap policy sees the previous iteration's report (op count, step time,
forced swaps, and a profile when it asked for one) and returns a plan. Eager-mode
variability changes the sequence every ``every_iters`` iterations (sequence length, an
optional branch, MoE routing ops). An allocation that does not fit and is not handled by
the plan (or by the runtime's fallback, ``oom_fallback``, where the plan allows forced
swaps) ends the run with ``oom = 1`` (the summary names the allocation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)

from hetsim.devices.carbon import carbon_columns
from hetsim.devices.cluster import Cluster
from hetsim.devices.kernels import kernel_fits
from hetsim.devices.memory import OutOfMemory
from hetsim.devices.power import cap_ratio, compute_roof_flops, power_model
from hetsim.devices.sustained import DEFAULT_GPU_CLOCKS, GPU_CLOCKS_DESCRIPTION, GpuClocks
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.limits import Seconds
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, WorkloadParams, conserve
from hetsim.workloads.training.exec import Executor, IterationStats
from hetsim.workloads.training.metrics import METRICS, fit_check, layers_for_size, summarise
from hetsim.workloads.training.model import STATE_BYTES_PER_PARAM, TransformerSpec
from hetsim.workloads.training.offload import (
    DEVICE_STATE_BYTES_PER_PARAM,
    CpuAdamCost,
    OffloadStep,
    cpu_adam_s,
    offload_step,
    place_states,
)
from hetsim.workloads.training.oom_fallback import OomFallback
from hetsim.workloads.training.op_cost import kernel_op_times_s, op_trust
from hetsim.workloads.training.ops import OPT, Lifetimes, Variant, build_sequence
from hetsim.workloads.training.view import ProfileView, StepReport

ITER_COLUMNS = ("iteration", "op_count", "seq_len", "profiled", "step_s", "stall_s",
                "recompute_s", "profile_s", "d2h_bytes", "h2d_bytes", "forced_swaps",
                "peak_bytes", "cpu_adam_s", "offload_tail_s", "plan_misses",
                "ffn_tokens")  # fmt: skip
OP_COLUMNS = ("iteration", "op", "name", "phase", "layer", "start_s", "end_s", "used_bytes")


class Variability(BaseModel):
    """Eager-mode sequence changes, drawn every ``every_iters`` iterations (0: never)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    every_iters: NonNegativeInt = Field(
        default=0,
        description="Iterations between draws of a new op sequence "
        "(0: the sequence never changes).",
    )
    seq_lens: list[PositiveInt] = Field(default_factory=list, description="drawn uniformly")
    branch_ops: NonNegativeInt = Field(default=0, description="ops per layer of an optional branch")
    branch_prob: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Chance that a drawn sequence includes the optional branch's ops.",
    )
    moe_ops_max: NonNegativeInt = Field(default=0, description="routing ops per layer, 0..max")
    ffn_tokens: list[PositiveFloat] = Field(
        default_factory=list,
        description="share of tokens the FFN processes, drawn uniformly (MoE routing: sizes "
        "the FFN activations); empty: always 1",
    )


class TrainingParams(WorkloadParams):
    """The ``workload:`` block of a single-accelerator training-memory scenario."""

    kind: Literal["training"] = Field(default="training", description="Workload kind (training).")
    model: TransformerSpec = Field(
        default_factory=lambda: TransformerSpec(),
        description="The dense transformer trained and its per-iteration shape.",
    )
    size_x_hbm: float | None = Field(None, gt=0, description="set layers to this footprint/HBM")
    iterations: PositiveInt = Field(default=20, description="Training iterations run.")
    dtype: Literal["bf16", "fp16"] = Field(
        default="bf16", description="Number format of parameters, activations and compute."
    )
    device: str | None = Field(
        default=None, description="Cluster device the model trains on (null: the first GPU or NPU)."
    )
    cost_model: Literal["kernel", "roofline"] = Field(
        "kernel",
        description="kernel: each op priced by its kernel class (GEMM shape, flash attention, "
        "elementwise; workloads/training/op_cost.py); roofline: every op at the device's "
        "large-GEMM efficiency (the older, coarser pricing, kept for comparisons)",
    )
    attention_peak_fraction: float | None = Field(
        None,
        gt=0,
        le=1,
        description="flash attention's forward share of the dense peak (null: the device's "
        "fitted attention_prefill class, fitted on serving chunks <= 4K tokens and "
        "extrapolated; FlashAttention-2 measured 0.50-0.73 on A100, 0.35 on H100)",
    )
    gpu_clocks: GpuClocks = Field(default=DEFAULT_GPU_CLOCKS, description=GPU_CLOCKS_DESCRIPTION)
    variability: Variability = Field(
        default_factory=lambda: Variability(),
        description="Eager-mode op-sequence changes drawn during the run (default: none).",
    )
    profiler_op_overhead_s: Seconds = Field(
        20e-6, description="profiler hook cost per ATen dispatch (reconstruction)"
    )
    dispatch_scale: NonNegativeFloat = Field(
        1.0, description="scales the ATen dispatches per op (ops.DISPATCHES, reconstruction)"
    )
    timeline_iterations: list[NonNegativeInt] = Field(
        default_factory=list,
        description="Iterations whose every op is written to the op timeline table.",
    )
    oom_fallback: OomFallback = Field(
        default_factory=lambda: OomFallback(),
        description="the runtime's forced swap when an allocation does not fit and the plan "
        "allows it: victims without future knowledge, synchronisation and fragmentation "
        "costs (workloads/training/oom_fallback.py)",
    )
    cpu_adam: CpuAdamCost = Field(
        default_factory=lambda: CpuAdamCost(), description="CPU-Adam work when offloaded"
    )


@workloads.register("training")
class TrainingWorkload(Workload):
    """Transformer training iterations on one device with swap/recompute policies."""

    Params = TrainingParams
    domain = "training"
    decision_points: ClassVar[dict[str, str]] = {"swap": "chameleon"}
    metrics: ClassVar[dict[str, str]] = METRICS

    def __init__(self, sim: Simulation, cluster: Cluster, params: TrainingParams,
                 policies: dict[str, Any], base_dir: Path) -> None:  # fmt: skip
        super().__init__(sim, cluster, params, policies, base_dir)
        if params.cost_model == "roofline" and params.gpu_clocks != DEFAULT_GPU_CLOCKS:
            raise ValueError(f"workload.gpu_clocks: {params.gpu_clocks} needs cost_model: "
                             "kernel (the roofline has no clock regime)")  # fmt: skip
        name = cluster.accelerator(params.device, "device")
        self.dev = cluster.device(name)
        host = cluster.host_of(name)
        if host is None:
            raise ValueError(f"device: {name} has no host cpu on its node to swap to")
        self.pool = cluster.memory(name)
        model = params.model
        if params.size_x_hbm is not None:
            layers = layers_for_size(model, params.size_x_hbm, self.pool.capacity_bytes)
            model = model.model_copy(update={"layers": layers})
        self.model = model
        self.variants = self._draw_variants()
        self._seqs: dict[Variant, tuple[Lifetimes, np.ndarray]] = {}
        self._profiles: dict[Variant, dict[str, Any]] = {}
        self._offload_steps: dict[Variant, OffloadStep] = {}
        self.swap = policies["swap"]
        # a policy that declares ``offloads_optimizer`` keeps only 4 B/param on the device
        per_param = (
            DEVICE_STATE_BYTES_PER_PARAM
            if getattr(self.swap, "offloads_optimizer", False)
            else STATE_BYTES_PER_PARAM
        )
        seqs = [self._sequence(v)[0] for v in set(self.variants)]
        fit_check(self.model, seqs, self.pool, per_param)
        self.exec = Executor(cluster, name, host, params.profiler_op_overhead_s,
                             params.dispatch_scale, params.oom_fallback)  # fmt: skip
        self.cpu_adam_s = cpu_adam_s(cluster, host, self.model.params, params.cpu_adam)
        self.rows = sim.recorder.table("iterations", ITER_COLUMNS)
        self.op_rows = sim.recorder.table("ops", OP_COLUMNS)
        self.stats: list[IterationStats] = []
        self.failure = ""

    def _draw_variants(self) -> list[Variant]:
        p, var = self.params, self.params.variability
        rng = self.sim.rng("training.variability")
        current = Variant(self.model.seq_len)
        out = []
        for k in range(p.iterations):
            if var.every_iters and k and k % var.every_iters == 0:
                seq = int(rng.choice(var.seq_lens)) if var.seq_lens else self.model.seq_len
                branch = var.branch_ops if rng.random() < var.branch_prob else 0
                moe = int(rng.integers(0, var.moe_ops_max + 1))
                ffn = float(rng.choice(var.ffn_tokens)) if var.ffn_tokens else 1.0
                current = Variant(seq, branch, moe, ffn)
            out.append(current)
        return out

    def _sequence(self, v: Variant) -> tuple[Lifetimes, np.ndarray]:
        if v not in self._seqs:
            lt = build_sequence(self.model, v)
            if self.params.cost_model == "kernel":
                op_s = kernel_op_times_s(
                    self.dev.spec, lt, self.model, v, self.params.dtype,
                    self.params.attention_peak_fraction, self.params.gpu_clocks,
                )  # fmt: skip
            else:
                op_s = self.dev.op_times_s(lt.flops, lt.nbytes, self.params.dtype)
            self._seqs[v] = (lt, op_s)
        return self._seqs[v]

    def start(self) -> None:
        """Start the iteration loop (model states are placed before each iteration: all
        on the device, or the optimizer states on the host when the plan offloads them)."""
        self.sim.env.process(self._loop())

    def _loop(self) -> Any:
        report: StepReport | None = None
        for k, v in enumerate(self.variants):
            decision = self.swap.decide(report)
            lt, op_s = self._sequence(v)
            try:
                offload = self._offload(decision.plan.offload is not None, v)
                st = yield from self.exec.run(lt, op_s, decision.plan, decision.profile, offload)
            except OutOfMemory as e:
                self.failure = f"iteration {k}: {e}"
                break
            self.stats.append(st)
            self._record(k, v, lt, st, decision.profile)
            profile = self._profile(v, st) if decision.profile else None
            report = StepReport(k, lt.seq.n_ops, st.step_s, st.forced_swaps, profile,
                                st.plan_misses)  # fmt: skip
        self.done.succeed()

    def _offload(self, offloaded: bool, v: Variant) -> OffloadStep | None:
        """Place the optimizer states for this iteration; the host step when offloaded
        (priced once per variant)."""
        place_states(self.pool, self.exec.host_pool, self.model.params, offloaded)
        if not offloaded:
            return None
        if v not in self._offload_steps:
            lt = self._sequence(v)[0]
            self._offload_steps[v] = offload_step(self.model, lt, self.cpu_adam_s)
        return self._offload_steps[v]

    def _record(self, k: int, v: Variant, lt: Lifetimes, st: IterationStats, prof: bool) -> None:
        self.rows.append(k, lt.seq.n_ops, v.seq_len, int(prof), st.step_s, st.stall_s,
                         st.recompute_s, st.profile_s, st.d2h_bytes, st.h2d_bytes,
                         st.forced_swaps, st.peak_bytes, st.cpu_adam_s,
                         st.offload_tail_s, st.plan_misses, v.ffn_tokens)  # fmt: skip
        if k in self.params.timeline_iterations:
            seq = lt.seq
            for i in range(seq.n_ops):
                row = (seq.op_name[i], int(lt.phase[i]), int(lt.layer[i]), st.op_start_s[i])
                self.op_rows.append(k, i, *row, st.op_end_s[i], st.op_used_bytes[i])

    def _profile(self, v: Variant, st: IterationStats) -> ProfileView:
        """What the profiler hands the policy (read-only arrays)."""
        start, end = np.asarray(st.op_start_s), np.asarray(st.op_end_s)
        start.flags.writeable = end.flags.writeable = False
        return ProfileView(**self._profile_static(v), op_start_s=start, op_end_s=end,
                           capacity_bytes=self.pool.capacity_bytes, step_s=st.step_s)  # fmt: skip

    def _profile_static(self, v: Variant) -> dict[str, Any]:
        """The parts of a profile fixed by the sequence, built once per variant: its trace,
        no-swap memory timeline and the mechanism's recompute and copy-time estimates."""
        if v not in self._profiles:
            lt, op_s = self._sequence(v)
            one_gb = 1 << 30
            d2h = one_gb / self.cluster.copy_time_s(self.exec.device, self.exec.host, one_gb)
            h2d = one_gb / self.cluster.copy_time_s(self.exec.host, self.exec.device, one_gb)
            ro = {
                "phase": lt.phase, "layer": lt.layer, "stage": lt.stage,
                "memory_bytes": lt.memory_timeline() + self.model.state_bytes(),
                "size_bytes": lt.size, "last_fwd_use": lt.last_fwd_use,
                "first_bwd_use": lt.first_bwd_use,
                "recompute_s": op_s[np.maximum(lt.producer, 0)],
                "swap_out_s": lt.size / d2h, "swap_in_s": lt.size / h2d,
            }  # fmt: skip
            for a in ro.values():
                a.flags.writeable = False
            self._profiles[v] = {"n_ops": lt.seq.n_ops, "keys": tuple(lt.seq.t_key), **ro,
                                 "signatures": tuple(lt.signatures()),
                                 "op_keys": tuple(lt.op_keys())}  # fmt: skip
        return self._profiles[v]

    def _iterations(self, finished: bool) -> None:
        """Conservation of iterations: each completed (one stats entry and one row, in
        order of their step times), in flight (one at most, until the run ends), or
        dropped after the allocation that failed (named in ``failure``)."""
        total, done = len(self.variants), len(self.stats)
        if len(self.rows) != done:
            raise InvariantViolation(f"training: {done} iterations ran, {len(self.rows)} recorded")
        failed = bool(self.failure)
        dropped = total - done if failed else 0
        in_flight = 0 if finished or failed else min(1, total - done)
        conserve("training iterations", total, done, in_flight, total - done - in_flight - dropped,
                 dropped)  # fmt: skip
        if finished and not failed and done != total:
            raise InvariantViolation(f"training: {done} of {total} iterations ran, no failure")
        steps = np.cumsum(self.rows.column("step_s")) if done else np.zeros(0)
        if done and (np.any(~np.isfinite(steps)) or steps[-1] > self.sim.now * (1 + 1e-9)):
            raise InvariantViolation(
                f"training: {done} iterations take {steps[-1]} s, more than the "
                f"{self.sim.now} s run"
            )

    def check_partial(self) -> None:
        """At any moment: iterations completed, in flight, to run, or dropped after an
        out-of-memory failure add up (:meth:`_iterations`)."""
        self._iterations(finished=False)

    def check(self) -> None:
        """At the end: every iteration completed, or dropped after the failure named."""
        self._iterations(finished=True)

    def model_flops(self, lt: Lifetimes) -> float:
        """Useful FLOPs of one iteration: forward and backward ops (no recompute, no Adam)."""
        return float(lt.flops[lt.phase != OPT].sum())

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """See :data:`workloads.training_metrics.METRICS`."""
        lt0 = self._sequence(self.variants[0])[0]
        fwd_peak = int(lt0.memory_timeline().max())
        peak_flops = self.dev.spec.peak(self.params.dtype)
        flops = [self.model_flops(self._sequence(v)[0]) for v in self.variants[: len(self.stats)]]
        out = summarise(self, fwd_peak, flops, peak_flops)
        if self.params.cost_model == "kernel":
            out.update(op_trust(
                self.dev.spec, lt0, self._sequence(self.variants[0])[1],
                max(v.seq_len for v in self.variants), self.params.attention_peak_fraction is None,
                self.params.gpu_clocks,
            ))  # fmt: skip
        else:
            out.update(model_fits="roofline", kernel_classes="", borrowed_fits="",
                       fit_extrapolated="")  # fmt: skip
        out.update(self._energy(sum(flops)))
        return out

    def _energy(self, model_flops: float) -> dict[str, Any]:
        """Energy of the completed iterations (:data:`SINGLE_GPU_ENERGY_METRICS`): the GPU
        idles while it stalls on swaps and is busy the rest of each step, its kernels at
        the compute utilisation of the model FLOPs at the clock model's compute roof."""
        st = self.stats
        total = float(sum(s.step_s for s in st))
        stall = float(sum(s.stall_s for s in st))
        spec, p = self.dev.spec, self.params
        pm = power_model(spec)
        clock = (kernel_fits(spec, p.gpu_clocks).clock_ratio if p.cost_model == "kernel"
                 else cap_ratio(spec))  # fmt: skip
        roof = compute_roof_flops(spec, p.dtype, clock)
        busy = max(total - stall, 0.0)
        compute = model_flops / roof if roof > 0 else 0.0
        energy = pm.idle_W * total + pm.interval_J(busy, compute)
        steps = len(st)
        if pm.tdp_W <= 0:  # no board power in the catalogue (Ascend 910B): not computable
            nan = float("nan")
            return {"energy_per_step_J": nan, "avg_power_W": nan, "peak_power_W": nan,
                    "power_limit_W": nan, "carbon_operational_g": nan,
                    "carbon_per_step_g": nan}  # fmt: skip
        carbon = carbon_columns(energy, total, {spec.name: total}, self.cluster.config.carbon,
                                self.cluster.load_grid())  # fmt: skip
        return {
            "energy_per_step_J": energy / steps if steps else float("nan"),
            "avg_power_W": energy / total if total > 0 else float("nan"),
            "peak_power_W": pm.busy_W(compute / busy) if busy > 0 else pm.idle_W,
            "power_limit_W": pm.limit_W,
            **carbon,
            "carbon_per_step_g": carbon["carbon_g"] / steps if steps else float("nan"),
        }
