"""Verifiable DNN inference: a CPU enclave outsources linear layers to an untrusted GPU and
checks them with Freivalds' algorithm (Slalom, Tramer & Boneh, ICLR'19).

Each batch runs layer by layer as a task chain (:mod:`workloads.tee.dag`): the layer on
the GPU, its inputs and outputs over PCIe, the enclave's check and nonlinearity (costs:
:mod:`workloads.tee.verify_costs`). The baseline, the whole forward pass inside the
enclave, is priced on the same CPU model; the summary reports both throughputs and their
ratio. No policy decides anything: the placement (every linear layer on the GPU) is
Slalom's. Defaults follow the public run script (ftramer/slalom ``run_all.sh``: VGG16 with
its top layers on ImageNet inputs, in-enclave forward at batch 1, verification with
preprocessed secrets at batch 16, 4 batches); the enclave's threads, per-thread
bandwidth, EPC and crypto rate are reconstructions, swept in
``scenarios/tee_verify-robustness.yaml``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from hetsim.devices.cluster import Cluster
from hetsim.devices.enclave import EnclaveSpec
from hetsim.devices.power import cap_ratio, compute_roof_flops
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, WorkloadParams, check_steps
from hetsim.workloads.metered import metered_columns, metered_metrics
from hetsim.workloads.tee.dag import Task, makespan_s, run_repeated
from hetsim.workloads.tee.models import dnn_table
from hetsim.workloads.tee.secure import tee_preset
from hetsim.workloads.tee.verify_costs import (
    VerifyCostConfig,
    VerifyMode,
    copy_bytes,
    enclave_forward_s,
    gpu_linear_s,
    verify_tee_s,
)


class TeeVerifyParams(WorkloadParams):
    """The ``workload:`` block of a verifiable-inference (Slalom) scenario."""

    kind: Literal["tee-verify"] = Field(
        default="tee-verify", description="Workload kind (tee-verify)."
    )
    model: Literal["vgg16-imagenet", "vgg16"] = Field(
        default="vgg16-imagenet",
        description="DNN verified: VGG-16 on 224x224 ImageNet inputs "
        "(Slalom's) or on 32x32 CIFAR-10 inputs.",
    )
    batch: PositiveInt = Field(16, description="verified batch (run_all.sh: 16)")
    baseline_batch: PositiveInt = Field(1, description="in-enclave batch (run_all.sh: 1)")
    batches: PositiveInt = Field(4, description="batches run (run_all.sh: 4)")
    verify: VerifyMode = Field(
        "preproc", description="r^T W precomputed offline (preproc) or per batch (online)"
    )
    gpu: str | None = Field(
        default=None,
        description="Cluster device running the outsourced linear "
        "layers (null: the first GPU or NPU).",
    )
    enclave: str = Field(
        default="sgx-mee",
        description="CPU enclave preset (devices/enclave.py: sgx-mee, tdx, h100-cc, tensor).",
    )
    enclave_crypto_Bps: PositiveFloat | None = Field(
        default=None, description="override of the enclave's crypto rate (EPC paging)"
    )
    tee_cores: PositiveInt | None = Field(
        1, description="enclave threads (reconstruction: Slalom's enclave runs one)"
    )
    core_bandwidth_Bps: PositiveFloat = Field(
        12e9, description="memory bandwidth one enclave thread streams (reconstruction)"
    )
    epc_bytes: PositiveFloat = Field(93 * 2**20, description="usable EPC (papers/tee.md 5)")
    element_bytes: PositiveFloat = Field(
        4.0, description="bytes per field element (p = 2^24 - 3 held as float32)"
    )
    freivalds_flops_per_element: NonNegativeFloat = Field(
        2.0, description="check FLOPs per input and output element (one multiply-add)"
    )
    nonlinear_bytes_per_element: NonNegativeFloat = Field(
        8.0, description="nonlinear pass: read the output, write the next input"
    )
    tee_dtype: str = Field(
        default="fp32",
        description="Number format of the enclave's checks, nonlinearities "
        "and baseline forward on the CPU roofline.",
    )
    gpu_dtype: str = Field(
        default="fp32", description="Number format of the linear layers on the GPU roofline."
    )


@workloads.register("tee-verify")
class TeeVerifyWorkload(Workload):
    """Slalom verifiable inference: GPU linear layers checked in a CPU enclave."""

    Params = TeeVerifyParams
    domain = "tee"
    metrics: ClassVar[dict[str, str]] = {
        "batches": "verified batches completed",
        "batch_s": "seconds of one verified batch (makespan of its layer chain)",
        "images_per_s": "verified throughput: batch / batch_s",
        "enclave_images_per_s": "baseline throughput: the whole forward pass in the enclave",
        "speedup_vs_enclave": "images_per_s / enclave_images_per_s",
        "gpu_s": "GPU seconds per verified batch",
        "copy_s": "PCIe seconds per verified batch (inputs to the GPU, outputs back)",
        "tee_s": "enclave seconds per verified batch (checks, nonlinearity, paging, crossings)",
        "enclave_batch_s": "seconds of one baseline batch in the enclave",
        "makespan_s": "end time of the last batch",
        # energy (workloads/metered.py): each batch's GPU and enclave (CPU) busy time
        **metered_metrics(
            {"batch": "verified batches completed", "image": "images verified (batches x batch)"}
        ),
    }

    def __init__(
        self,
        sim: Simulation,
        cluster: Cluster,
        params: TeeVerifyParams,
        policies: dict[str, Any],
        base_dir: Path,
    ) -> None:
        super().__init__(sim, cluster, params, policies, base_dir)
        p = params
        self.table = dnn_table(p.model)
        self.gpu = cluster.accelerator(p.gpu, "gpu")
        cpu = cluster.host_of(self.gpu)
        if cpu is None:
            raise ValueError(f"gpu: {self.gpu} has no CPU on its node for the enclave")
        self.cpu = cpu
        cspec, gspec = cluster.device(cpu).spec, cluster.device(self.gpu).spec
        cspec.peak(p.tee_dtype)  # KeyError naming the CPU's dtypes
        gspec.peak(p.gpu_dtype)
        cfg = VerifyCostConfig(
            p.batch, p.baseline_batch, p.verify, p.tee_cores, p.core_bandwidth_Bps,
            p.epc_bytes, p.element_bytes, p.freivalds_flops_per_element,
            p.nonlinear_bytes_per_element, p.tee_dtype, p.gpu_dtype, self._enclave(),
        )  # fmt: skip
        t = self.table
        self.gpu_s = gpu_linear_s(t, gspec, cfg)
        to_gpu, to_host = copy_bytes(t, cfg)
        self.copy_s = np.array(
            [cluster.copy_time_s(cpu, self.gpu, int(a)) + cluster.copy_time_s(self.gpu, cpu, int(b))
             for a, b in zip(to_gpu, to_host, strict=True)]
        )  # fmt: skip
        self.tee_s = verify_tee_s(t, cspec, cfg)
        self.enclave_batch_s = float(enclave_forward_s(t, cspec, cfg).sum())
        self.tasks = self._tasks()
        self.batch_s = makespan_s(self.tasks)
        self._energy = self._batch_work(cfg)
        self._done = 0
        self._ends: list[float] = []

    def _enclave(self) -> EnclaveSpec:
        spec = tee_preset(self.params.enclave)
        rate = self.params.enclave_crypto_Bps
        return spec if rate is None else dataclasses.replace(spec, crypto_throughput_Bps=rate)

    def _tasks(self) -> list[Task]:
        """One batch: per layer GPU, then copies, then the enclave's check, in order."""
        tasks: list[Task] = []
        for i, name in enumerate(self.table.names):
            for res, dur in (("gpu", self.gpu_s[i]), ("link", self.copy_s[i]),
                             ("tee", self.tee_s[i])):  # fmt: skip
                deps = (len(tasks) - 1,) if tasks else ()
                tasks.append(Task(f"{name} {res}", res, float(dur), deps))
        return tasks

    def _batch_work(self, cfg: VerifyCostConfig) -> list[tuple[Any, float, float]]:
        """(meter, busy seconds, compute-roof seconds) of one verified batch per device:
        the GPU's linear layers (their FLOPs at its compute roof in ``gpu_dtype``) and
        the enclave's checks, nonlinearity, paging and crossings on the CPU (a busy CPU
        draws its power limit whatever its utilisation, devices/power.py: booked
        memory-bound); the copies draw nothing above idle (no term for them)."""
        t, p = self.table, self.params
        gpu = self.cluster.device(self.gpu)
        roof = compute_roof_flops(gpu.spec, p.gpu_dtype, cap_ratio(gpu.spec))
        flops = float(t.fwd_flops.sum()) * p.batch
        return [
            (gpu.energy, float(self.gpu_s.sum()), flops / roof if roof > 0 else 0.0),
            (self.cluster.device(self.cpu).energy, float(self.tee_s.sum()), 0.0),
        ]

    def start(self) -> None:
        """Start the batch process."""
        self.sim.env.process(self._run())

    def _run(self) -> Any:
        def batch_end(_i: int, start: float, end: float) -> None:
            self._done += 1
            self._ends.append(end)
            for meter, busy, compute in self._energy:
                meter.window(start, end, busy, compute)

        yield from run_repeated(
            self.sim, self.tasks, self.batch_s, self.params.batches, 1, batch_end
        )
        self.done.succeed()

    def check_partial(self) -> None:
        """At any moment: the batches done, each recorded once and in order, none after
        now; at most one in flight."""
        check_steps("tee-verify batches", self.params.batches, self._done, self._ends,
                    self.sim.now * (1 + 1e-12))  # fmt: skip

    def check(self) -> None:
        """Every batch ran; a batch is the sum of its serial stages."""
        if self._done != self.params.batches:
            raise InvariantViolation(f"{self._done} of {self.params.batches} batches ran")
        total = float(self.gpu_s.sum() + self.copy_s.sum() + self.tee_s.sum())
        if abs(self.batch_s - total) > 1e-9 * max(1.0, total):
            raise InvariantViolation(f"batch {self.batch_s} s != its stages {total} s")

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """Per-batch figures (see :attr:`metrics`)."""
        p = self.params
        verified = p.batch / self.batch_s
        enclave = p.baseline_batch / self.enclave_batch_s
        return {
            "batches": self._done,
            "batch_s": self.batch_s,
            "images_per_s": verified,
            "enclave_images_per_s": enclave,
            "speedup_vs_enclave": verified / enclave,
            "gpu_s": float(self.gpu_s.sum()),
            "copy_s": float(self.copy_s.sum()),
            "tee_s": float(self.tee_s.sum()),
            "enclave_batch_s": self.enclave_batch_s,
            "makespan_s": end_s,
            **metered_columns(
                self,
                end_s,
                (self.gpu, self.cpu),
                {"batch": self._done, "image": self._done * p.batch},
            ),
        }
