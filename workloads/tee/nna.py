"""DNN training with private data in a CPU TEE and linear ops on untrusted NNAs (DAC'23).

The ``tee.execution`` policy places each op in the TEE, on an NNA or decomposed across
the NNAs, and picks the meta-key prefetch depth; the mechanism prices every op
(:mod:`workloads.tee.nna_costs`) and runs each step as a task graph with the ops' true
dependencies (:mod:`workloads.tee.nna_schedule`): within a micro-batch masking,
unmasking and nonlinear work stay on the critical path and only meta-key generation
runs ahead; with the batch split into micro-batches (the plan's ``micro_batches``, one
of ``micro_batch_options``) the TEE's conversion and interaction for one micro-batch
overlap the NNA's work on another (as SimPy processes on the TEE and on each NNA,
:mod:`workloads.tee.dag`). The policy's view carries the same graph as an estimator.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, PositiveInt

from hetsim.devices.cluster import Cluster
from hetsim.devices.cpu import cpu_kernels
from hetsim.devices.enclave import EnclaveSpec
from hetsim.devices.power import cap_ratio, compute_roof_flops
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, WorkloadParams, check_steps
from hetsim.workloads.metered import metered_columns, metered_metrics
from hetsim.workloads.tee.dag import makespan_s, run_repeated
from hetsim.workloads.tee.models import dnn_table
from hetsim.workloads.tee.nna_costs import (
    NnaCostConfig,
    masked_elements,
    nna_s,
    op_views,
    protect_parts,
    tee_only_s,
)
from hetsim.workloads.tee.nna_schedule import step_tasks
from hetsim.workloads.tee.secure import tee_preset
from hetsim.workloads.tee.view import DECOMPOSE, TEE, ExecutionPlan, ExecutionView, MicroTimes


class TeeNnaParams(WorkloadParams):
    """The ``workload:`` block of a TEE + NNA training scenario."""

    kind: Literal["tee-nna"] = Field(default="tee-nna", description="Workload kind (tee-nna).")
    model: Literal["vgg16", "bert-base"] = Field(
        default="vgg16", description="DNN trained: VGG-16 on 32x32 CIFAR-10 inputs, or BERT-base."
    )
    batch: PositiveInt = Field(default=64, description="Samples per training step.")
    steps: PositiveInt = Field(default=10, description="Training steps run.")
    nnas: list[str] | None = Field(
        default=None, description="NNA device names; default all gpu/npu"
    )
    enclave: str = Field(
        default="sgx-mee",
        description="CPU TEE preset (devices/enclave.py: sgx-mee, tdx, h100-cc, tensor).",
    )
    enclave_crypto_Bps: float | None = Field(
        default=None, gt=0, description="override of the enclave's crypto rate (EPC paging)"
    )
    tee_cores: PositiveInt | None = Field(default=4, description="enclave threads (reconstruction)")
    tee_dtype: str = Field(
        default="fp32", description="Number format of the enclave's work on the CPU roofline."
    )
    nna_dtype: str = Field(
        default="int8",
        description="Number format of the linear ops on the NNAs (an NNA needs a peak in it).",
    )
    epc_bytes: float = Field(default=93 * 2**20, gt=0, description="usable EPC (papers/tee.md 5)")
    masked_bytes_per_element: float = Field(default=4.0, gt=0, description="reconstruction")
    mask_bytes_per_element: float = Field(
        default=8.0, ge=0, description="read x, write x+r (reconstr.)"
    )
    unmask_bytes_per_element: float = Field(default=12.0, ge=0, description="read y, key, write")
    nonlinear_bytes_per_element: float = Field(default=8.0, ge=0, description="read, write")
    metakey_cycles_per_byte: float = Field(
        default=0.63,
        ge=0,
        description="keyed-primitive cost of meta-key material per enclave thread: "
        "AES-128-GCM on Skylake (OpenSSL aesni-gcm-x86_64.pl); range 0.16 (VAES) to 7.7 "
        "(SHA-256, OpenSSL sha256-586.pl)",
    )
    micro_batch_options: list[PositiveInt] = Field(
        default=[1, 2, 4, 8],
        min_length=1,
        description="micro-batch counts the policy may interleave (reconstruction: "
        "DAC'23's count is not public)",
    )
    core_bandwidth_Bps: float = Field(
        default=12e9,
        gt=0,
        description="memory bandwidth one enclave thread streams (reconstruction)",
    )


@workloads.register("tee-nna")
class TeeNnaWorkload(Workload):
    """Private DNN training: CPU TEE plus untrusted NNAs computing masked linear ops."""

    Params = TeeNnaParams
    domain = "tee"
    decision_points: ClassVar[dict[str, str]] = {"execution": "pipelined"}
    metrics: ClassVar[dict[str, str]] = {
        "steps": "training steps completed",
        "step_s": "seconds of one training step (makespan of the op chain)",
        "samples_per_s": "batch / step_s",
        "tee_only_step_s": "sum over ops of the op run inside the TEE",
        "speedup_vs_tee_only": "tee_only_step_s / step_s",
        "tee_work_s": "TEE-side busy seconds per step",
        "nna_work_s": "link + NNA busy seconds per step, all NNAs",
        "metakey_s": "meta-key generation seconds per step (the prefetchable TEE work)",
        "hidden_share": "1 - (step_s - step_s without meta-key work) / metakey_s: share of "
        "the meta-key work off the critical path (0 when there is none)",
        "overhead_s": "TEE seconds per step of protection overhead: masking, conversion, "
        "unmasking, meta-keys, ECALL/OCALLs, switch tolls (not nonlinear work)",
        "hidden_overhead_share": "1 - (step_s - step_s without that overhead) / overhead_s: "
        "share of the conversion and interaction overhead off the critical path (DAC'23's "
        "87.1%; 0 when there is none)",
        "micro_batches": "micro-batches interleaved per step (plan)",
        "offloaded_ops": "ops placed on an NNA (masked or decomposed)",
        "decomposed_ops": "ops decomposed across the NNAs",
        "depth": "meta-key prefetch depth of the plan",
        "makespan_s": "end time of the last step",
        # energy (workloads/metered.py): each step's TEE (CPU) and NNA busy time
        **metered_metrics(
            {"step": "training steps completed", "sample": "samples trained (steps x batch)"}
        ),
    }

    def __init__(
        self,
        sim: Simulation,
        cluster: Cluster,
        params: TeeNnaParams,
        policies: dict[str, Any],
        base_dir: Path,
    ) -> None:
        super().__init__(sim, cluster, params, policies, base_dir)
        self.table = dnn_table(params.model)
        self.nnas = params.nnas or cluster.usable(("gpu", "npu"), "the tee_nna workload")
        if not self.nnas:
            raise ValueError("the cluster has no gpu/npu device to act as an NNA")
        cpu = cluster.host_of(self.nnas[0])
        if cpu is None:
            raise ValueError(f"NNA {self.nnas[0]} has no CPU on its node for the TEE")
        self.cpu = cpu
        self.view = self._view(self._config())
        self.plan: ExecutionPlan = policies["execution"].plan(self.view)
        self._check_plan()
        pl, d, m = self.plan.placement, self.plan.depth, self.plan.micro_batches
        self.tasks = step_tasks(self.view, pl, d, m)
        self.step_s = makespan_s(self.tasks)
        self.exposed_metakey_s = self.step_s - makespan_s(
            step_tasks(self.view, pl, d, m, metakeys=False)
        )
        bare = step_tasks(self.view, pl, d, m, overhead=False)
        self.overhead_s = sum(
            a.duration_s - b.duration_s for a, b in zip(self.tasks, bare, strict=True)
        )
        self.exposed_overhead_s = self.step_s - makespan_s(bare)
        self._energy = self._step_work()
        self._done_steps = 0

    def _config(self) -> NnaCostConfig:
        p = self.params
        clock = _clock_hz(self.cluster.device(self.cpu).spec.name)
        return NnaCostConfig(
            p.batch, p.tee_cores, p.tee_dtype, p.nna_dtype, p.epc_bytes,
            p.masked_bytes_per_element, p.mask_bytes_per_element, p.unmask_bytes_per_element,
            p.nonlinear_bytes_per_element, p.metakey_cycles_per_byte, p.core_bandwidth_Bps,
            self._enclave(), clock,
        )  # fmt: skip

    def _enclave(self) -> EnclaveSpec:
        spec = tee_preset(self.params.enclave)
        rate = self.params.enclave_crypto_Bps
        return spec if rate is None else dataclasses.replace(spec, crypto_throughput_Bps=rate)

    def _view(self, cfg: NnaCostConfig) -> ExecutionView:
        t, cpu = self.table, self.cluster.device(self.cpu).spec
        cpu.peak(cfg.tee_dtype)  # KeyError naming the CPU's dtypes
        sent, received = masked_elements(t, cfg.batch)
        nna, xfer = [], []
        for name in self.nnas:
            nna.append(nna_s(t, self.cluster.device(name).spec, cfg))
            xfer.append(self._xfer_s(name, sent, received, cfg.masked_bytes_per_element))
        if all(np.isinf(a).all() for a in nna):
            raise ValueError(f"no NNA of {self.nnas} has a {cfg.nna_dtype} peak (nna_dtype)")
        ops = op_views(t, tee_only_s(t, cpu, cfg), protect_parts(t, cpu, cfg), nna, xfer)
        options = tuple(sorted(set(self.params.micro_batch_options)))
        if options[-1] > cfg.batch:
            raise ValueError(f"micro_batch_options: {options[-1]} exceeds the batch {cfg.batch}")
        micro = {m: self._micro(t, cfg, m, sent, received) for m in options if m > 1}
        view = ExecutionView(tuple(self.nnas), ops, cfg.enclave.setup_latency_s)
        view = view._replace(micro_batch_options=options, micro=micro)
        return view._replace(estimate_s=lambda pl, d, m=1: makespan_s(step_tasks(view, pl, d, m)))

    def _micro(
        self, t: Any, cfg: NnaCostConfig, m: int, sent: np.ndarray, received: np.ndarray
    ) -> tuple[MicroTimes, ...]:
        """Per op, link and NNA seconds of one of ``m`` micro-batches on each NNA: the
        NNA's roofline at batch / m, one copy each way of 1/m of the step's elements."""
        small = dataclasses.replace(cfg, batch=cfg.batch / m)  # type: ignore[arg-type]
        nna = [nna_s(t, self.cluster.device(n).spec, small) for n in self.nnas]
        bpe = cfg.masked_bytes_per_element
        xfer = [self._xfer_s(n, sent / m, received / m, bpe) for n in self.nnas]
        return tuple(
            MicroTimes(tuple(float(a[i]) for a in nna), tuple(float(a[i]) for a in xfer))
            for i in range(len(t))
        )

    def _xfer_s(self, nna: str, sent: np.ndarray, recv: np.ndarray, bpe: float) -> np.ndarray:
        c = self.cluster
        return np.array(
            [c.copy_time_s(self.cpu, nna, int(s * bpe)) + c.copy_time_s(nna, self.cpu, int(r * bpe))
             for s, r in zip(sent, recv, strict=True)]
        )  # fmt: skip

    def _check_plan(self) -> None:
        ops, plan = self.view.ops, self.plan
        if len(plan.placement) != len(ops) or plan.depth < 0:
            raise InvariantViolation(f"execution plan {plan} does not fit {len(ops)} ops")
        if plan.micro_batches not in self.view.micro_batch_options:
            raise InvariantViolation(
                f"plan interleaves {plan.micro_batches} micro-batches; the workload offers "
                f"{self.view.micro_batch_options} (micro_batch_options)"
            )
        for op, k in zip(ops, plan.placement, strict=True):
            if k == TEE:
                continue
            devs = range(len(self.nnas)) if k == DECOMPOSE else (k,)
            ok = op.offloadable and all(0 <= d < len(self.nnas) for d in devs)
            if k == DECOMPOSE and len(self.nnas) < 2:
                ok = False  # one NNA would see every share
            if not ok or any(math.isinf(op.nna_s[d]) for d in devs):
                raise InvariantViolation(f"op {op.name} cannot run on NNA {k}")

    def _busy_s(self) -> tuple[float, float, float]:
        """(TEE, NNA, meta-key) busy seconds of one step."""
        tee = sum(t.duration_s for t in self.tasks if t.resource == "tee")
        nna = sum(t.duration_s for t in self.tasks if t.resource.startswith("nna"))
        keys = sum(t.duration_s for t in self.tasks if t.name.endswith(" metakey"))
        return tee, nna, keys

    def _step_work(self) -> list[tuple[Any, float, float]]:
        """(meter, busy seconds, compute-roof seconds) of one step per device: the CPU
        runs every TEE task (the FLOPs of the ops kept in the TEE at its compute roof;
        a busy CPU draws its power limit whatever its utilisation, devices/power.py);
        each NNA computes its ops (masked or a decomposed share: the op's FLOPs at its
        compute roof in ``nna_dtype``), the link time of its tasks drawing nothing above
        idle (the power model has no term for copies)."""
        t, p, plan = self.table, self.params, self.plan
        m = plan.micro_batches
        op_flops = 3.0 * t.fwd_flops * p.batch  # forward and both backward GEMMs
        tee, _, _ = self._busy_s()
        busy = [0.0] * len(self.nnas)
        flops = [0.0] * len(self.nnas)
        tee_flops = 0.0
        for i, (op, k) in enumerate(zip(self.view.ops, plan.placement, strict=True)):
            if k == TEE:
                tee_flops += float(op_flops[i])
                continue
            micro = self.view.micro or {}
            nna = op.nna_s if m == 1 else tuple(m * x for x in micro[m][i].nna_s)
            for d in range(len(self.nnas)) if k == DECOMPOSE else (k,):
                busy[d] += nna[d]
                flops[d] += float(op_flops[i])
        cpu = self.cluster.device(self.cpu)
        cpu_roof = compute_roof_flops(cpu.spec, p.tee_dtype)
        out = [(cpu.energy, tee, tee_flops / cpu_roof if cpu_roof > 0 else 0.0)]
        for d, name in enumerate(self.nnas):
            dev = self.cluster.device(name)
            roof = compute_roof_flops(dev.spec, p.nna_dtype, cap_ratio(dev.spec))
            out.append((dev.energy, busy[d], flops[d] / roof if roof > 0 else 0.0))
        return out

    def start(self) -> None:
        """Start the step process."""
        self.sim.env.process(self._run())

    def _run(self) -> Any:
        """Each step's task graph as SimPy processes; spans for the first step."""

        def step_end(_i: int, start: float, end: float) -> None:
            self._done_steps += 1
            for meter, busy, compute in self._energy:
                meter.window(start, end, busy, compute)

        yield from run_repeated(self.sim, self.tasks, self.step_s, self.params.steps, 1, step_end)
        self.done.succeed()

    def check_partial(self) -> None:
        """At any moment: the steps done, each ``step_s`` long back to back from t=0,
        end no later than now, and the one in flight no later than a step after."""
        k, step, slack = self._done_steps, self.step_s, 1 + 1e-8  # each step within 1e-9
        ends = [step * (i + 1) for i in range(min(k, self.params.steps + 1))]
        check_steps("tee-nna steps", self.params.steps, k, ends, self.sim.now * slack)
        if k < self.params.steps and self.sim.now > (k + 1) * step * slack:
            raise InvariantViolation(f"tee-nna: {k} steps done at t={self.sim.now} s, "
                                     f"steps of {step} s")  # fmt: skip

    def check(self) -> None:
        """Every step ran; the makespan lies between the busiest resource and the sum."""
        if self._done_steps != self.params.steps:
            raise InvariantViolation(f"{self._done_steps} of {self.params.steps} steps ran")
        tee, nna, _ = self._busy_s()
        if not tee - 1e-12 <= self.step_s <= tee + nna + 1e-12:
            raise InvariantViolation(f"step {self.step_s} outside [{tee}, {tee + nna}]")

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """Per-step figures (see :attr:`metrics`)."""
        tee_only = sum(op.tee_s for op in self.view.ops)
        tee, nna, keys = self._busy_s()
        return {
            "steps": self._done_steps,
            "step_s": self.step_s,
            "samples_per_s": self.params.batch / self.step_s,
            "tee_only_step_s": tee_only,
            "speedup_vs_tee_only": tee_only / self.step_s,
            "tee_work_s": tee,
            "nna_work_s": nna,
            "metakey_s": keys,
            "hidden_share": 1.0 - self.exposed_metakey_s / keys if keys > 0 else 0.0,
            "overhead_s": self.overhead_s,
            "hidden_overhead_share": 1.0 - self.exposed_overhead_s / self.overhead_s
            if self.overhead_s > 0
            else 0.0,
            "micro_batches": self.plan.micro_batches,
            "offloaded_ops": sum(1 for k in self.plan.placement if k != TEE),
            "decomposed_ops": sum(1 for k in self.plan.placement if k == DECOMPOSE),
            "depth": self.plan.depth,
            "makespan_s": end_s,
            **metered_columns(
                self,
                end_s,
                (self.cpu, *self.nnas),
                {"step": self._done_steps, "sample": self._done_steps * self.params.batch},
            ),
        }


def _clock_hz(cpu_type: str) -> float:
    """The CPU's clock from ``devices/cpu_kernels.yaml`` (2 GHz for a CPU without
    kernel constants: the catalogue's Xeon base clock)."""
    try:
        return cpu_kernels(cpu_type).clock_hz
    except ValueError:
        return 2.0e9
