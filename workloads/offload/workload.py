"""Dense LLM inference with weights, KV cache and compute across GPU, CPU and SSD.

One batch of ``batch`` sequences: a prefill step over ``prompt_tokens`` tokens each,
then ``output_tokens`` decode steps. The ``placement`` policy returns an
:class:`OffloadPlan` once; the mechanism checks it fits in GPU and host memory and runs
it layer by layer with the zig-zag block schedule (:mod:`workloads.offload.schedule`):
GPU layers stream the non-resident part of their weights over PCIe (from host memory or
SSD), CPU layers (``cpu_layers``) run on the CPU model from host memory. One SimPy
timeout per layer-step. TEE: ``tee: h100-cc`` sends every host<->GPU copy through the
encrypted bounce buffer. ``disk`` names a drive of ``devices/storage.yaml``: the disk
tier then holds the plan's disk share of the weights and KV (``kv_disk``), read and
written through host memory on the drive's own FIFO resource. ``tee: tdx`` (TDX trust
domain) and ``tee: sgx-mee`` (SGX enclave) make every CPU memory read carry the metadata traffic of
:func:`devices.enclave.protected_bytes` (28-bit MAC per line for TDX; counter + MAC per
line for SGX; EPC paging of models larger than the EPC is not modelled).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from hetsim.devices.cluster import Cluster
from hetsim.devices.cpu import CpuModel, LaunchMode, NumaMode, cpu_kernels
from hetsim.devices.enclave import enclave_preset, protected_bytes
from hetsim.devices.first_touch import PARALLEL_FAULTERS, THREAD_FIRST_TOUCH_BPS, FirstTouch
from hetsim.devices.host_copy import pageable_ratios
from hetsim.devices.memory import OutOfMemory
from hetsim.devices.power import cap_ratio, compute_roof_flops
from hetsim.devices.secure_copy import SecureCopy
from hetsim.devices.storage import storage_spec
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, WorkloadParams, check_steps
from hetsim.workloads.metered import metered_columns, metered_metrics
from hetsim.workloads.models.dense import model_spec
from hetsim.workloads.models.moe import moe_models
from hetsim.workloads.offload.costs import CopyPaths, DenseCosts, DiskPath
from hetsim.workloads.offload.schedule import Clocks, LayerWork, run_layer
from hetsim.workloads.offload.view import OffloadPlan, OffloadView

METRICS: dict[str, str] = {
    "plan": "the placement: weights gpu/cpu/ssd %, cpu layers, kv on gpu %, attention, overlap, "
    "micro-batches, pinned",
    "ttft_s": "end of the prefill step (0 without a prompt)",
    "tbt_mean_s": "mean duration of a decode step",
    "decode_tokens_per_s": "batch x output tokens / decode time",
    "prefill_tokens_per_s": "batch x prompt tokens / prefill time",
    "throughput_tokens_per_s": "batch x output tokens / (prefill + decode time) (FlexGen's and "
    "ZeRO-Inference's generation throughput)",
    "h2d_bytes": "bytes copied host (or SSD) to GPU: streamed weights and host KV",
    "disk_read_bytes": "bytes read from the disk tier (weights and KV; only with workload.disk)",
    "disk_write_bytes": "bytes written to the disk tier (new KV; only with workload.disk)",
    "disk_busy_frac": "disk busy seconds / end time (only with workload.disk)",
    "gpu_busy_frac": "GPU busy seconds / end time",
    "cpu_busy_frac": "CPU busy seconds / end time",
    "h2d_busy_frac": "host-to-device copy engine busy seconds / end time",
    "cpu_bandwidth_GBps": "modelled CPU DRAM bandwidth at the configured threads/sockets",
    # energy (workloads/metered.py): each layer-step's busy time on the GPU and the CPU
    **metered_metrics(
        {"output_token": "tokens generated (batch x decode steps; the prefill's energy included)"},
        "output_token",
    ),
}


class OffloadParams(WorkloadParams):
    """The ``workload:`` block of a dense offloading scenario."""

    kind: Literal["offload"] = Field(default="offload", description="Workload kind (offload).")
    model: str = Field(
        default="llama-2-7b",
        description="Dense model, by catalogue name (mixture-of-experts models use kind moe).",
    )
    batch: PositiveInt = Field(default=1, description="Sequences decoded together.")
    prompt_tokens: NonNegativeInt = Field(
        default=512, description="Prompt length of each sequence, in tokens."
    )
    output_tokens: NonNegativeInt = Field(
        default=32, description="Tokens generated per sequence (decode steps)."
    )
    weight_bits: float = Field(
        16.0,
        gt=0,
        le=32,
        description="Bits per weight as stored and copied (sets the "
        "bytes of every weight copy and GEMM).",
    )
    kv_bits: float = Field(
        16.0,
        gt=0,
        le=32,
        description="Bits per KV-cache value on the GPU (and in host "
        "memory unless host_kv_bits is set).",
    )
    gpu_dtype: str = Field(default="fp16", description="Compute format of the GPU roofline.")
    cpu_format: str = Field("f16", description="CPU kernel format (devices/cpu_kernels.yaml)")
    gpu: str | None = Field(
        default=None,
        description="Cluster device that runs the GPU side (null: the first GPU or NPU).",
    )
    cpu: str | None = Field(
        default=None,
        description="Host CPU device holding offloaded weights and KV (null: the GPU's host).",
    )
    cpu_threads: PositiveInt | None = Field(
        default=None,
        description="Threads of the CPU kernel model (null: every core of every socket).",
    )
    cpu_sockets: Literal[1, 2] = Field(
        default=1, description="CPU sockets the kernel model streams from."
    )
    cpu_numa: NumaMode = Field(
        default="interleave",
        description="Two sockets: weights interleaved across both memories, "
        "or replicated per socket (local reads only).",
    )
    cpu_memory_bandwidth_Bps: PositiveFloat | None = Field(None, description="per socket")
    cpu_kernels: dict[str, Any] = Field(
        default_factory=dict,
        description="Overrides of the CPU type's kernel constants in devices/cpu_kernels.yaml.",
    )
    cpu_calls_per_layer: PositiveInt = Field(
        16, description="kernel calls per layer on the CPU (matmuls, norms, rope, softmax...)"
    )
    cpu_attention_calls: PositiveInt = Field(
        6,
        description="kernel calls of a CPU attention split (reconstruction of ggml's "
        "graph: K and V cache copies, KQ mat-mul, softmax, KQV mat-mul, merge copy)",
    )
    cpu_graph_launch: LaunchMode = Field(
        "pool",
        description="how each CPU split between GPU splits starts its threads: wake a "
        "resident pool (one barrier) or create/join threads-1 threads (ggml before 2024-08)",
    )
    host_kv_bits: float | None = Field(
        None,
        gt=0,
        le=32,
        description="bits per KV value as held in host memory (default kv_bits); "
        "ZeRO-Inference's OPT path allocates its host KV buffer in fp32 (32)",
    )
    cpu_kv_upcast_bits: float | None = Field(
        None,
        gt=0,
        le=32,
        description="CPU attention first converts the host KV into a new tensor of this "
        "width every layer-step (ZeRO-Inference's BLOOM path: .float(), 32); default none",
    )
    cpu_attention_in_prefill: bool = Field(
        True,
        description="with attention_on_cpu, the prefill's attention also runs on the CPU "
        "(llama.cpp -nkvo); false: the prefill attends on the GPU over the fresh KV and "
        "only decode steps attend on the CPU (ZeRO-Inference's kv_offload path)",
    )
    embeddings_streamed: bool = Field(
        False,
        description="the token embedding and the LM head stay in host memory and are "
        "copied to the GPU every step, one vocab x hidden copy at weight_bits each "
        "(ZeRO-3 offloads every parameter above its persistence threshold; ZeRO-Inference "
        "quantises nn.Embedding too); default: resident on the GPU",
    )
    copies_share_cpu_thread: bool = Field(
        False,
        description="pageable copies are issued by the thread that runs the CPU kernels "
        "(PyTorch eager: ZeRO-Inference), so they serialise with CPU attention",
    )
    host_first_touch: bool = Field(
        False,
        description="price the first touch of freshly mapped host memory "
        "(devices/first_touch.py): the host KV buffer allocated at the prompt step and "
        "written once per position, the staging tensors of PyTorch's copies into its "
        "non-contiguous slices, and the new tensors of cpu_kv_upcast_bits (ZeRO-Inference's "
        "kv_offload path); default off",
    )
    first_touch_thread_Bps: PositiveFloat = Field(
        THREAD_FIRST_TOUCH_BPS,
        description="one thread's first-touch rate on 4 KiB pages (dask-cuda PR #98: 1 GiB "
        "in 0.3266 s); about 11.8e9 with 2 MiB transparent huge pages",
    )
    first_touch_parallel_faulters: float = Field(
        PARALLEL_FAULTERS,
        ge=1,
        description="threads faulting one address space at the full per-thread rate "
        "together: default 6.60 = mmtests pft-threads faults/s at 24 threads (between 21 "
        "and 30) over 1 thread, 2 x Xeon 8336C, Linux 6.2 (devices/first_touch.py); "
        "swept 1-24",
    )
    ssd_bandwidth_Bps: PositiveFloat = Field(
        3.5e9, description="flat SSD read rate of disk-resident weights when no disk is named"
    )
    disk: dict[str, Any] | None = Field(
        None,
        description="the disk tier: {type: <devices/storage.yaml drive>} with optional "
        "read/write {peak_Bps, latency_s} and capacity_bytes overrides; none: no disk tier",
    )
    disk_io: Literal["page_cache", "o_direct"] = Field(
        "page_cache",
        description="disk reads/writes through the kernel page cache (one more CPU memcpy, "
        "pipelined) or O_DIRECT into the user buffer",
    )
    disk_staging_pinned: bool = Field(
        True,
        description="the host buffer that stages disk -> GPU copies is pinned (DMA at the "
        "link rate; FlexGen's copy threads relay through a pinned 1 GB buffer each) or "
        "pageable (CUDA's bounce buffer)",
    )
    disk_request_bytes: PositiveFloat = Field(
        1048576.0,
        description="bytes per disk request (reconstruction: 1 MiB, the request size of the "
        "drives' sequential fio figures)",
    )
    disk_queue_depth: PositiveInt = Field(
        4,
        description="disk requests in flight (reconstruction: one per I/O thread; FlexGen's "
        "TorchDisk runs 4 copy threads)",
    )
    d2h_bandwidth_ratio: PositiveFloat = Field(0.854, description="H02: 46.8 / 54.8 GB/s")
    gpu_dequant_s_per_gb: NonNegativeFloat = Field(
        default=0.0,
        description="GPU seconds per GB of weights to dequantise weights "
        "held below 16 bits (0: fused into the GEMM).",
    )
    tee: Literal["none", "h100-cc", "tdx", "tdx+h100-cc", "sgx-mee"] = Field(
        default="none",
        description="Trusted execution: h100-cc encrypts host<->GPU copies; tdx and sgx-mee add "
        "metadata traffic to every CPU memory read; tdx+h100-cc both.",
    )
    cc_crypto_throughput_Bps: PositiveFloat | None = Field(
        default=None,
        description="CPU AES-GCM rate of the h100-cc bounce buffer, "
        "in bytes/s (null: the preset's).",
    )


@workloads.register("offload")
class OffloadWorkload(Workload):
    """Dense inference with offloaded weights/KV (llama.cpp, accelerate, ZeRO-Inf., FlexGen)."""

    Params = OffloadParams
    domain = "offload"
    decision_points: ClassVar[dict[str, str]] = {"placement": "fixed"}
    metrics: ClassVar[dict[str, str]] = METRICS

    def __init__(
        self, sim: Simulation, cluster: Cluster, params: OffloadParams,
        policies: dict[str, Any], base_dir: Path,
    ) -> None:  # fmt: skip
        super().__init__(sim, cluster, params, policies, base_dir)
        p = params
        if p.model in moe_models():
            raise ValueError(
                f"model: {p.model} is a mixture-of-experts model; the offload workload prices "
                "dense models only (use workload.kind: moe, workloads/moe)"
            )
        self.model = model_spec(p.model)
        self.gpu_name = cluster.accelerator(p.gpu, "gpu")
        cpu = p.cpu or cluster.host_of(self.gpu_name)
        if cpu is None or cluster.device(cpu).spec.kind != "cpu":
            raise ValueError(f"cpu: no host CPU for {self.gpu_name}")
        self.cpu_name = cpu
        cspec = cluster.device(cpu).spec
        kern = cpu_kernels(cspec.name, p.cpu_kernels)  # errors name cpu_kernels.<field>
        try:
            kern.dequant_rate(p.cpu_format)
        except ValueError as e:
            raise ValueError(f"cpu_format: {e}") from None
        ratio = 1.0
        if p.tee in ("tdx", "tdx+h100-cc", "sgx-mee"):  # metadata traffic of every read
            n = 1 << 20
            ratio = protected_bytes(enclave_preset(p.tee.removesuffix("+h100-cc")), n) / n
        self.cpu = CpuModel(cspec, kern, threads=p.cpu_threads, sockets=p.cpu_sockets,
                            numa=p.cpu_numa, socket_bandwidth_Bps=p.cpu_memory_bandwidth_Bps,
                            traffic_ratio=ratio)  # fmt: skip
        gspec = cluster.device(self.gpu_name).spec
        self.costs = DenseCosts(
            self.model, gspec, self.cpu, weight_bits=p.weight_bits, kv_bits=p.kv_bits,
            gpu_dtype=p.gpu_dtype, cpu_format=p.cpu_format,
            gpu_dequant_s_per_gb=p.gpu_dequant_s_per_gb,
            cpu_calls_per_layer=p.cpu_calls_per_layer, host_kv_bits=p.host_kv_bits,
            cpu_kv_upcast_bits=p.cpu_kv_upcast_bits,
            first_touch=FirstTouch(p.first_touch_thread_Bps, p.first_touch_parallel_faulters)
            if p.host_first_touch else None,
        )  # fmt: skip
        pageable = pageable_ratios()
        self.copies = CopyPaths(
            link=self._link(cluster, cpu),
            pageable_Bps=kern.core_bandwidth_Bps / 2.0,
            pageable_h2d_ratio=pageable.pageable_h2d_ratio,
            pageable_d2h_ratio=pageable.pageable_d2h_ratio,
            d2h_bandwidth_ratio=p.d2h_bandwidth_ratio,
            ssd_bandwidth_Bps=p.ssd_bandwidth_Bps,
            secure=SecureCopy.preset("h100-cc", p.cc_crypto_throughput_Bps)
            if p.tee.endswith("h100-cc") else None,
        )  # fmt: skip
        self.disk: DiskPath | None = None
        if p.disk is not None:
            over = dict(p.disk)
            if "type" not in over:
                raise ValueError("disk.type: missing required field (a devices/storage.yaml drive)")
            name = str(over.pop("type"))
            self.disk = DiskPath(
                spec=storage_spec(name, over), request_bytes=p.disk_request_bytes,
                queue_depth=p.disk_queue_depth, io=p.disk_io,
                memcpy_Bps=kern.core_bandwidth_Bps / 2.0,
                staging_pinned=p.disk_staging_pinned,
            )  # fmt: skip
        self.disk_read_bytes = 0.0
        self.disk_write_bytes = 0.0
        self.plan = policies["placement"].place(self._view())
        self._check_plan(self.plan)
        self._allocate(self.plan)
        self.steps_tbl = sim.recorder.table("steps", ("step", "phase", "start_s", "end_s"))
        self.phase_s = {"prefill": 0.0, "decode": 0.0}
        self.decode_steps: list[float] = []
        self.clocks = Clocks()
        self.h2d_bytes = 0.0
        # energy (devices/energy.py): seconds per FLOP at each device's compute roof
        gspec = cluster.device(self.gpu_name).spec
        roof = compute_roof_flops(gspec, p.gpu_dtype, cap_ratio(gspec))
        self._gpu_s_per_flop = 1.0 / roof if roof > 0 else 0.0
        cpu_roof = compute_roof_flops(cspec, "fp32")
        self._cpu_s_per_flop = 1.0 / cpu_roof if cpu_roof > 0 else 0.0
        self._work_s: list[tuple[float, float, float, float]] = []  # the step's (_step)

    # ---- set-up -------------------------------------------------------------------
    def _link(self, cluster: Cluster, cpu: str) -> Any:
        hops = cluster.topology.path(cpu, self.gpu_name)
        if not hops:
            raise ValueError(f"cluster: no link between {cpu} and {self.gpu_name}")
        return min((h.spec for h in hops), key=lambda s: s.bandwidth_Bps)

    def _micro(self, plan: OffloadPlan) -> int:
        return math.ceil(self.params.batch / plan.gpu_batches)

    def _view(self) -> OffloadView:
        p, c = self.params, self.costs
        return OffloadView(
            layers=self.model.layers,
            layer_weight_bytes=c.layer_weight_bytes,
            kv_bytes_per_token_layer=c.kv_bytes_per_token_layer,
            batch=p.batch,
            prompt_tokens=p.prompt_tokens,
            output_tokens=p.output_tokens,
            gpu_free_bytes=self.cluster.memory(self.gpu_name).free_bytes,
            cpu_free_bytes=self.cluster.memory(self.cpu_name).free_bytes,
            estimate_s=self.estimate_s,
            fits=lambda plan: all(v <= 0 for v in self._shortfall(plan).values()),
            disk_free_bytes=int(self.disk.spec.capacity_bytes) if self.disk else 0,
        )

    def _check_plan(self, plan: OffloadPlan) -> None:
        ok = (
            0 <= plan.weights_gpu <= 1 and 0 <= plan.weights_cpu <= 1
            and plan.weights_gpu + plan.weights_cpu <= 1 + 1e-9
            and 0 <= plan.kv_gpu <= 1 and 0 <= plan.cpu_layers <= self.model.layers
            and 1 <= plan.gpu_batches <= self.params.batch
            and 0 <= plan.kv_disk <= 1 and plan.kv_gpu + plan.kv_disk <= 1 + 1e-9
        )  # fmt: skip
        if not ok:
            raise InvariantViolation(f"offload placement returned an invalid plan {plan}")
        if plan.kv_disk > 0 and self.disk is None:
            raise ValueError("policies.placement: kv_disk > 0 needs a disk tier (workload.disk)")

    def _needs(self, plan: OffloadPlan) -> dict[str, float]:
        p, c, m = self.params, self.costs, self.model
        gpu_layers = m.layers - plan.cpu_layers
        lw = c.layer_weight_bytes
        tokens = p.batch * (p.prompt_tokens + p.output_tokens)
        kv_total = tokens * c.kv_bytes_per_token_layer
        kv_host = tokens * c.host_kv_bytes_per_token_layer
        streamed = plan.weights_gpu < 1
        gpu = gpu_layers * lw * plan.weights_gpu + (
            2 * lw * (1 - plan.weights_gpu) if streamed else 0
        )
        gpu += gpu_layers * kv_total * plan.kv_gpu
        # embedding + LM head resident in fp16, or one fetched copy at a time
        gpu += self._lm_bytes() if p.embeddings_streamed else 2 * c.lm_params * 2
        host = gpu_layers * lw * plan.weights_cpu + plan.cpu_layers * lw
        host += gpu_layers * kv_host * (1 - plan.kv_gpu - plan.kv_disk) + plan.cpu_layers * kv_host
        need = {"gpu": gpu, "host": host}
        if self.disk is not None:
            wd = max(0.0, 1 - plan.weights_gpu - plan.weights_cpu)
            need["disk"] = gpu_layers * (lw * wd + kv_host * plan.kv_disk)
            # host staging of the disk tier (FlexGen's cpu_w_g): one layer's disk weights and
            # one micro-batch's disk KV of one layer, read in and written out
            micro_kv = self._micro(plan) * (p.prompt_tokens + p.output_tokens)
            need["host"] += lw * wd + 2 * micro_kv * c.host_kv_bytes_per_token_layer * plan.kv_disk
        return need

    def _shortfall(self, plan: OffloadPlan) -> dict[str, float]:
        need = self._needs(plan)
        out = {
            "gpu": need["gpu"] - self.cluster.memory(self.gpu_name).free_bytes,
            "host": need["host"] - self.cluster.memory(self.cpu_name).free_bytes,
        }
        if self.disk is not None:
            out["disk"] = need["disk"] - self.disk.spec.capacity_bytes
        return out

    def _allocate(self, plan: OffloadPlan) -> None:
        need = self._needs(plan)
        for tag, dev in (("gpu", self.gpu_name), ("host", self.cpu_name)):
            pool = self.cluster.memory(dev)
            try:
                pool.allocate(f"offload.{tag}", int(need[tag]))
            except OutOfMemory as e:
                raise ValueError(
                    f"policies.placement: the plan needs {int(need[tag])} bytes on {dev}, "
                    f"{e.free_bytes} free"
                ) from None
        if self.disk is not None and need["disk"] > self.disk.spec.capacity_bytes:
            raise ValueError(
                f"policies.placement: the plan needs {int(need['disk'])} bytes on the disk "
                f"{self.disk.spec.name}, {int(self.disk.spec.capacity_bytes)} there"
            )

    # ---- costs of one layer-step ----------------------------------------------------
    def _work(self, plan: OffloadPlan, seqs: int, new: int, ctx: int) -> LayerWork:
        c = self.costs
        wcopy, wdisk = self._weights_copy(plan)
        lin = c.gpu_linear_s(seqs * new)
        kv_host = 1.0 - plan.kv_gpu
        # disk-resident KV of this micro-batch read into host memory before its attention
        kv_disk_b = seqs * ctx * c.host_kv_bytes_per_token_layer * plan.kv_disk
        kv_rd = self.disk.read_s(kv_disk_b) if self.disk is not None else 0.0
        gpu_att = c.gpu_attention_s(seqs, new, ctx)
        prefill = ctx == 0 and self.params.prompt_tokens > 0
        on_cpu = plan.attention_on_cpu and (self.params.cpu_attention_in_prefill or not prefill)
        if on_cpu and kv_host > 0:
            share = min(1.0, self._attention_share())
            cpu_att = c.cpu_attention_s(seqs, new, ctx) * kv_host
            # the split's start (pool wake-up or thread creation) and its other calls
            cpu_att += self.cpu.launch_s(self.params.cpu_graph_launch)
            cpu_att += (self.params.cpu_attention_calls - 1) * self.cpu.call_overhead_s
            # q, k, v to the host and the attention output back, each a small copy
            act = 2.0 * self.model.hidden * seqs * new
            cpu_att += self.copies.h2d_s(3 * act, plan.pinned) + self.copies.d2h_s(act)
            att_flops = c.attention_flops(seqs, new, ctx)
            return LayerWork(wcopy, 0.0, lin * share + gpu_att * plan.kv_gpu, cpu_att,
                             lin * (1 - share), wdisk, kv_rd,
                             c.linear_flops(seqs * new) + att_flops * plan.kv_gpu,
                             att_flops * kv_host)  # fmt: skip
        kv_bytes = seqs * ctx * c.host_kv_bytes_per_token_layer * (kv_host - plan.kv_disk)
        kv_copy = self.copies.h2d_s(kv_bytes, plan.pinned) if kv_bytes > 0 else 0.0
        if kv_disk_b > 0 and self.disk is not None:  # on through the staging buffer
            kv_copy += self.copies.h2d_s(kv_disk_b, self.disk.staging_pinned)
        return LayerWork(
            wcopy,
            kv_copy,
            lin + gpu_att,
            0.0,
            0.0,
            wdisk,
            kv_rd,
            c.linear_flops(seqs * new) + c.attention_flops(seqs, new, ctx),
        )

    def _weights_copy(self, plan: OffloadPlan) -> tuple[float, float]:
        """One layer's streamed weights to the GPU: (copy time, disk time of its disk share).
        Without a disk tier the disk share reads at ``ssd_bandwidth_Bps`` inside the copy."""
        lw = self.costs.layer_weight_bytes
        host_b = lw * plan.weights_cpu
        disk_b = lw * max(0.0, 1 - plan.weights_gpu - plan.weights_cpu)
        if self.disk is None:
            return self.copies.h2d_s(host_b, plan.pinned, disk_b), 0.0
        if disk_b <= 0:
            return self.copies.h2d_s(host_b, plan.pinned), 0.0
        disk_t = self.disk.read_s(disk_b)
        pcie_t = self.copies.h2d_s(host_b, plan.pinned) + self.copies.h2d_s(
            disk_b, self.disk.staging_pinned
        )
        return max(pcie_t, disk_t), disk_t

    def _attention_share(self) -> float:
        m = self.model
        att = 2 * m.hidden * m.hidden + 2 * m.hidden * m.kv_heads * m.head_dim
        return att / self.costs.layer_params

    def _cpu_layer_s(self, plan: OffloadPlan, seqs: int, new: int, ctx: int) -> float:
        return self.costs.cpu_linear_s(seqs * new) + self.costs.cpu_attention_s(seqs, new, ctx)

    def _step(self, plan: OffloadPlan, c: Clocks, start: float, new: int, ctx: int,
              lm_tokens: int) -> tuple[list[float], float]:  # fmt: skip
        """Layer ends of one step from ``start`` (advancing ``c``) and the LM head time;
        each layer's and the LM head's energy work in :attr:`_work_s` (:meth:`_meter`)."""
        m, p = self.model, self.params
        micro, batches = self._micro(plan), plan.gpu_batches
        gpu_layers = m.layers - plan.cpu_layers
        shared = p.copies_share_cpu_thread and not plan.pinned
        ends = []
        # per layer, then the LM head: (GPU busy, GPU compute, CPU busy, CPU compute) s
        work: list[tuple[float, float, float, float]] = []
        self._work_s = work
        t = start
        for layer in range(m.layers):
            if layer < gpu_layers:
                w = self._work(plan, micro, new, ctx)
                if layer == gpu_layers - 1 and plan.cpu_layers:
                    w = replace(w, next_weights_copy_s=0.0, weights_disk_s=0.0)
                if self.disk is not None:
                    self.disk_read_bytes += self._disk_reads(plan, w, micro, ctx)
                t = run_layer(c, layer, batches, w, t, plan.overlap, host_shared=shared)
                work.append((batches * (w.gpu_pre_s + w.gpu_post_s),
                             batches * w.gpu_flops * self._gpu_s_per_flop,
                             batches * w.cpu_attention_s,
                             batches * w.cpu_flops * self._cpu_s_per_flop))  # fmt: skip
                # new KV to host memory: its own D2H engine, off the critical path, unless
                # a pageable copy holds the host thread that issues the next weights
                kv_w = batches * self.copies.d2h_s(
                    micro * new * self.costs.host_kv_bytes_per_token_layer * (1 - plan.kv_gpu),
                    plan.pinned,
                )
                # fresh buffer pages (and staging tensors) faulted in
                kv_w += batches * self.costs.host_kv_first_touch_s(
                    micro * new, staged=True, share=1 - plan.kv_gpu
                )
                if shared:
                    c.h2d_s = max(c.h2d_s, t) + kv_w
                    c.h2d_busy_s += kv_w
                    landed = c.h2d_s
                else:
                    c.d2h_s = max(c.d2h_s, t) + kv_w
                    landed = c.d2h_s
                if self.disk is not None and plan.kv_disk > 0:  # on from host memory to disk
                    nb = micro * new * self.costs.host_kv_bytes_per_token_layer * plan.kv_disk
                    dw = batches * self.disk.write_s(nb)
                    c.disk_s = max(c.disk_s, landed) + dw
                    c.disk_busy_s += dw
                    self.disk_write_bytes += batches * nb
            else:
                dt = self._cpu_layer_s(plan, p.batch, new, ctx)
                if layer == gpu_layers:  # the CPU layers run as one graph per step
                    dt += self.cpu.launch_s(p.cpu_graph_launch)
                c.cpu_busy_s += dt
                t = max(t, c.cpu_s) + dt
                c.cpu_s = t
                flops = self.costs.linear_flops(p.batch * new)
                flops += self.costs.attention_flops(p.batch, new, ctx)
                work.append((0.0, 0.0, dt, flops * self._cpu_s_per_flop))
            ends.append(t)
        lm_flops = 2.0 * self.costs.lm_params * lm_tokens
        if plan.cpu_layers == m.layers:
            lm = self.costs.lm_head_cpu_s(lm_tokens)
            c.cpu_busy_s += lm
            work.append((0.0, 0.0, lm, lm_flops * self._cpu_s_per_flop))
        else:
            lm = self.costs.lm_head_gpu_s(lm_tokens)
            c.gpu_busy_s += lm
            work.append((lm, lm_flops * self._gpu_s_per_flop, 0.0, 0.0))
            if p.embeddings_streamed:
                # the LM head's and the next embedding's fetches come before the next step's
                # first layer in trace order: they take the copy engine at the step's end and
                # push a first-layer prefetch still in flight back by their duration
                fetch = 2 * self.copies.h2d_s(self._lm_bytes(), plan.pinned)
                last = ends[-1] if ends else start
                if c.h2d_s > last:
                    c.weights_ready_s += fetch
                c.h2d_s = max(c.h2d_s, last) + fetch
                c.h2d_busy_s += fetch
                lm += fetch
        return ends, lm

    def _disk_reads(self, plan: OffloadPlan, w: LayerWork, micro: int, ctx: int) -> float:
        """Bytes one layer-step reads from disk: the next layer's disk weights (when it
        copies them) and every micro-batch's disk KV."""
        lw = self.costs.layer_weight_bytes
        nbytes = lw * max(0.0, 1 - plan.weights_gpu - plan.weights_cpu) if w.weights_disk_s else 0.0
        kv = micro * ctx * self.costs.host_kv_bytes_per_token_layer * plan.kv_disk
        return nbytes + plan.gpu_batches * kv

    def _lm_bytes(self) -> float:
        """Bytes of one vocab x hidden matrix (embedding or LM head) at the weight bits."""
        return self.costs.lm_params * self.params.weight_bits / 8

    def _phases(self) -> list[tuple[str, int, int]]:
        p = self.params
        out = [("prefill", p.prompt_tokens, 0)] if p.prompt_tokens else []
        out += [("decode", 1, p.prompt_tokens + i) for i in range(p.output_tokens)]
        return out

    def _first_copy_s(self, plan: OffloadPlan) -> float:
        if plan.weights_gpu >= 1 or plan.cpu_layers == self.model.layers:
            return 0.0
        return self._weights_copy(plan)[0]

    def estimate_s(self, plan: OffloadPlan) -> float:
        """The ``flexgen-analytic`` estimator a placement policy sees: per layer the
        slowest of weight copy, GPU compute and CPU attention over the block (FlexGen's
        own cost-model form, no pipeline fill), summed over layers and steps."""
        micro, b = math.ceil(self.params.batch / plan.gpu_batches), plan.gpu_batches
        total = 0.0
        gpu_layers = self.model.layers - plan.cpu_layers
        for _, new, ctx in self._phases():
            w = self._work(plan, micro, new, ctx)
            gpu = b * (w.gpu_pre_s + w.gpu_post_s)
            per = max(w.next_weights_copy_s + b * w.kv_copy_s, gpu, b * w.cpu_attention_s)
            if self.disk is not None:  # the drive: disk weights, KV reads and new-KV writes
                nb = micro * new * self.costs.host_kv_bytes_per_token_layer * plan.kv_disk
                disk = w.weights_disk_s + b * (w.kv_disk_read_s + self.disk.write_s(nb))
                per = max(per, disk)
            if not plan.overlap:
                per = w.next_weights_copy_s + gpu + b * (w.kv_copy_s + w.cpu_attention_s)
                per += b * w.kv_disk_read_s
            total += gpu_layers * per
            total += plan.cpu_layers * self._cpu_layer_s(plan, self.params.batch, new, ctx)
        return total

    # ---- the run ------------------------------------------------------------------
    def start(self) -> None:
        """Start the process that walks the steps layer by layer."""
        self.sim.env.process(self._run())

    def _run(self) -> Any:
        env, plan, c = self.sim.env, self.plan, self.clocks
        first = self._first_copy_s(plan)
        c.h2d_s = c.weights_ready_s = first
        c.h2d_busy_s += first
        if self.disk is not None and first > 0:
            _, c.disk_s = self._weights_copy(plan)
            c.disk_busy_s += c.disk_s
            lw = self.costs.layer_weight_bytes
            self.disk_read_bytes += lw * max(0.0, 1 - plan.weights_gpu - plan.weights_cpu)
        for index, (phase, new, ctx) in enumerate(self._phases()):
            start = env.now
            ends, lm = self._step(plan, c, start, new, ctx, self.params.batch)
            work = self._work_s
            for end, w in zip(ends, work, strict=False):
                t0 = env.now
                yield env.timeout(max(end - env.now, 0.0))
                self._meter(t0, env.now, w)
            t0 = env.now
            yield env.timeout(lm)
            self._meter(t0, env.now, work[-1])
            if c.d2h_s > env.now:  # the step's KV writes finish before the next step
                yield env.timeout(c.d2h_s - env.now)
            if c.disk_s > env.now:  # and those to disk
                yield env.timeout(c.disk_s - env.now)
            c.gpu_s = max(c.gpu_s, env.now)
            c.cpu_s = max(c.cpu_s, env.now)
            self.phase_s[phase] += env.now - start
            if phase == "decode":
                self.decode_steps.append(env.now - start)
            self.steps_tbl.append(index, phase, start, env.now)
        self.h2d_bytes = self._h2d_bytes()
        self.done.succeed()

    def _meter(self, start_s: float, end_s: float, w: tuple[float, float, float, float]) -> None:
        """A layer's (or the LM head's) GPU and CPU work on the devices' meters, over
        the window [start_s, end_s] it ran in (:meth:`EnergyMeter.window`)."""
        self.cluster.device(self.gpu_name).energy.window(start_s, end_s, w[0], w[1])
        self.cluster.device(self.cpu_name).energy.window(start_s, end_s, w[2], w[3])

    def _h2d_bytes(self) -> float:
        plan, c, p = self.plan, self.costs, self.params
        gpu_layers = self.model.layers - plan.cpu_layers
        per_step = gpu_layers * c.layer_weight_bytes * (1 - plan.weights_gpu)
        if p.embeddings_streamed and plan.cpu_layers < self.model.layers:
            per_step += 2 * self._lm_bytes()
        total = per_step * len(self._phases())
        if not plan.attention_on_cpu:
            for _, _, ctx in self._phases():
                total += (
                    gpu_layers * p.batch * ctx * c.host_kv_bytes_per_token_layer
                    * (1 - plan.kv_gpu)
                )  # fmt: skip
        return total

    def check_partial(self) -> None:
        """At any moment: steps recorded in order, none after now, one in flight at most;
        decode steps timed once each."""
        tbl = self.steps_tbl
        done = len(tbl)
        check_steps("offload steps", len(self._phases()), done,
                    tbl.column("end_s") if done else [], self.sim.now)  # fmt: skip
        decodes = int((tbl.column("phase") == "decode").sum()) if done else 0
        if decodes != len(self.decode_steps):
            raise InvariantViolation(f"offload: {decodes} decode steps recorded, "
                                     f"{len(self.decode_steps)} timed")  # fmt: skip

    def check(self) -> None:
        """Every step ran; time moved forward."""
        if len(self.steps_tbl) != len(self._phases()):
            raise InvariantViolation("offload: not every step ran")

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """Run metrics (:data:`METRICS`)."""
        p, pl = self.params, self.plan
        dec, pre = self.phase_s["decode"], self.phase_s["prefill"]
        ssd = max(0.0, 1 - pl.weights_gpu - pl.weights_cpu)
        c = self.clocks
        span = max(end_s, 1e-12)
        kv = f"kv_gpu {pl.kv_gpu:.0%} "
        if self.disk is not None:  # FlexGen's cg/cc/cd
            kv = f"kv {pl.kv_gpu:.0%}/{1 - pl.kv_gpu - pl.kv_disk:.0%}/{pl.kv_disk:.0%} "
        out: dict[str, float | int | str] = {
            "plan": (
                f"w {pl.weights_gpu:.0%}/{pl.weights_cpu:.0%}/{ssd:.0%} cpu_layers "
                f"{pl.cpu_layers} {kv}"
                f"att {'cpu' if pl.attention_on_cpu else 'gpu'}"
                f" overlap {int(pl.overlap)} mb {pl.gpu_batches} pinned {int(pl.pinned)}"
            ),
            "ttft_s": pre,
            "tbt_mean_s": dec / len(self.decode_steps) if self.decode_steps else 0.0,
            "decode_tokens_per_s": p.batch * p.output_tokens / dec if dec > 0 else 0.0,
            "prefill_tokens_per_s": p.batch * p.prompt_tokens / pre if pre > 0 else 0.0,
            "throughput_tokens_per_s": p.batch * p.output_tokens / (pre + dec)
            if pre + dec > 0 else 0.0,
            "h2d_bytes": self.h2d_bytes,
            "gpu_busy_frac": c.gpu_busy_s / span,
            "cpu_busy_frac": c.cpu_busy_s / span,
            "h2d_busy_frac": c.h2d_busy_s / span,
            "cpu_bandwidth_GBps": self.cpu.bandwidth_Bps / 1e9,
        }  # fmt: skip
        if self.disk is not None:
            out["disk_read_bytes"] = self.disk_read_bytes
            out["disk_write_bytes"] = self.disk_write_bytes
            out["disk_busy_frac"] = c.disk_busy_s / span
        tokens = p.batch * len(self.decode_steps)
        # a plan with every layer on the CPU computes nothing on the GPU
        used = (
            (self.cpu_name,)
            if pl.cpu_layers == self.model.layers
            else (self.gpu_name, self.cpu_name)
        )
        out.update(metered_columns(self, end_s, used, {"output_token": tokens},
                                   "output_token"))  # fmt: skip
        return out
