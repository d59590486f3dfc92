"""DNN training with private data in a CPU TEE and linear ops on untrusted NNAs (DAC'23).

The ``tee.execution`` policy places each op in the TEE or on an NNA and picks the
meta-key prefetch depth; the mechanism prices every op (:mod:`workloads.tee_nna_costs`)
and schedules the step as a producer/consumer chain: the TEE side (masking, meta-keys,
unmasking, type conversion, nonlinear ops, ops kept inside) feeds the link and NNA side
through a buffer of ``depth`` layers (:func:`workloads.tee_pipeline.buffered_pipeline`;
depth 0 is the unpipelined chain). Reconstructed: the pipeline overlaps layers as if
consecutive layers' TEE and NNA work were independent (the DAC'23 pipeline interleaves
micro-batches or iterations; its exact schedule is not in the abstract). Steps are
identical and replayed by one SimPy process.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, PositiveInt

from hetsim.devices.cluster import Cluster
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, WorkloadParams
from hetsim.workloads.tee.models import dnn_table
from hetsim.workloads.tee.nna_costs import (
    NnaCostConfig,
    masked_elements,
    nna_s,
    op_views,
    protect_s,
    tee_only_s,
)
from hetsim.workloads.tee.pipeline import Schedule, buffered_pipeline
from hetsim.workloads.tee.secure import tee_preset
from hetsim.workloads.tee.view import TEE, ExecutionPlan, ExecutionView


class TeeNnaParams(WorkloadParams):
    """The ``workload:`` block of a TEE + NNA training scenario."""

    kind: Literal["tee-nna"] = "tee-nna"
    model: Literal["vgg16", "bert-base"] = "vgg16"
    batch: PositiveInt = 64
    steps: PositiveInt = 10
    nnas: list[str] | None = Field(
        default=None, description="NNA device names; default all gpu/npu"
    )
    enclave: str = "sgx-mee"
    tee_cores: PositiveInt | None = Field(default=4, description="enclave threads (reconstruction)")
    tee_dtype: str = "fp32"
    nna_dtype: str = "int8"
    epc_bytes: float = Field(default=93 * 2**20, gt=0, description="usable EPC (papers/tee.md 5)")
    masked_bytes_per_element: float = Field(default=4.0, gt=0, description="reconstruction")
    mask_bytes_per_element: float = Field(
        default=8.0, ge=0, description="read x, write x+r (reconstr.)"
    )
    unmask_bytes_per_element: float = Field(default=12.0, ge=0, description="read y, key, write")
    nonlinear_bytes_per_element: float = Field(default=8.0, ge=0, description="read, write")
    metakey_flops_per_element: float = Field(default=4.0, ge=0, description="reconstruction")
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
        "tee_work_s": "TEE-side busy seconds per step (producer work)",
        "nna_work_s": "link + NNA busy seconds per step (consumer work)",
        "hidden_share": "(tee_work_s + nna_work_s - step_s) / tee_work_s: TEE work overlapped",
        "offloaded_ops": "ops placed on an NNA",
        "depth": "meta-key prefetch depth of the plan",
        "makespan_s": "end time of the last step",
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
        self.nnas = params.nnas or cluster.device_names(kinds=("gpu", "npu"))
        if not self.nnas:
            raise ValueError("the cluster has no gpu/npu device to act as an NNA")
        cpu = cluster.host_of(self.nnas[0])
        if cpu is None:
            raise ValueError(f"NNA {self.nnas[0]} has no CPU on its node for the TEE")
        self.cpu = cpu
        self.view = self._view(self._config())
        self.plan: ExecutionPlan = policies["execution"].plan(self.view)
        self._check_plan()
        self.producer_s, self.consumer_s = self._stage_times()
        self.schedule: Schedule = buffered_pipeline(
            self.producer_s, self.consumer_s, self.plan.depth
        )
        self.step_s = self.schedule.makespan_s
        self._done_steps = 0

    def _config(self) -> NnaCostConfig:
        p = self.params
        return NnaCostConfig(
            p.batch, p.tee_cores, p.tee_dtype, p.nna_dtype, p.epc_bytes,
            p.masked_bytes_per_element, p.mask_bytes_per_element, p.unmask_bytes_per_element,
            p.nonlinear_bytes_per_element, p.metakey_flops_per_element, p.core_bandwidth_Bps,
            tee_preset(p.enclave),
        )  # fmt: skip

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
        ops = op_views(t, tee_only_s(t, cpu, cfg), protect_s(t, cpu, cfg), nna, xfer)
        return ExecutionView(tuple(self.nnas), ops, cfg.enclave.setup_latency_s)

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
        for op, k in zip(ops, plan.placement, strict=True):
            if k == TEE:
                continue
            if not (0 <= k < len(self.nnas)) or not op.offloadable or math.isinf(op.nna_s[k]):
                raise InvariantViolation(f"op {op.name} cannot run on NNA {k}")

    def _stage_times(self) -> tuple[np.ndarray, np.ndarray]:
        """Producer (TEE) and consumer (link + NNA) seconds per op, with switch tolls."""
        prod, cons, prev = [], [], TEE
        for op, k in zip(self.view.ops, self.plan.placement, strict=True):
            toll = self.view.switch_s if k != prev else 0.0
            if k == TEE:
                prod.append(op.tee_s + toll)
                cons.append(0.0)
            else:
                prod.append(op.protect_s + toll)
                cons.append(op.xfer_s[k] + op.nna_s[k])
            prev = k
        return np.asarray(prod), np.asarray(cons)

    def start(self) -> None:
        """Start the step process."""
        self.sim.env.process(self._run())

    def _run(self) -> Any:
        rec = self.sim.recorder
        tracks = (rec.track("tee.enclave", "tee", "stage"), rec.track("tee.nna", "tee", "stage"))
        for i in range(self.params.steps):
            if i == 0:
                self._trace(tracks)
            yield self.sim.env.timeout(self.step_s)
            self._done_steps += 1
        self.done.succeed()

    def _trace(self, tracks: tuple[str, str]) -> None:
        s, rec = self.schedule, self.sim.recorder
        for row, track in enumerate(tracks):
            for j, op in enumerate(self.view.ops):
                if s.end_s[row, j] > s.start_s[row, j]:
                    rec.span(track, op.name, float(s.start_s[row, j]), float(s.end_s[row, j]))

    def check(self) -> None:
        """Every step ran; the makespan lies between the busiest side and the sum."""
        if self._done_steps != self.params.steps:
            raise InvariantViolation(f"{self._done_steps} of {self.params.steps} steps ran")
        p, c = self.producer_s.sum(), self.consumer_s.sum()
        if not max(p, c) - 1e-12 <= self.step_s <= p + c + 1e-12:
            raise InvariantViolation(f"step {self.step_s} outside [{max(p, c)}, {p + c}]")

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """Per-step figures (see :attr:`metrics`)."""
        tee_only = sum(op.tee_s for op in self.view.ops)
        p, c = float(self.producer_s.sum()), float(self.consumer_s.sum())
        return {
            "steps": self._done_steps,
            "step_s": self.step_s,
            "samples_per_s": self.params.batch / self.step_s,
            "tee_only_step_s": tee_only,
            "speedup_vs_tee_only": tee_only / self.step_s,
            "tee_work_s": p,
            "nna_work_s": c,
            "hidden_share": (p + c - self.step_s) / p if p > 0 else 0.0,
            "offloaded_ops": sum(1 for k in self.plan.placement if k != TEE),
            "depth": self.plan.depth,
            "makespan_s": end_s,
        }
