"""A training step as Megatron-LM and torchtitan run it (workload kind ``training-parallel``).

One pipeline replica is simulated in detail; its data-parallel peers are identical and
appear only as the members of its collectives (scale by symmetry), so a 16,384-GPU step
costs what its ``pp`` stages cost. Per stage:

1. **Pipeline schedule** (decision ``training.schedule``: 1F1B, interleaved, GPipe, or
   SlimPipe's sliced 1F1B with ``cp = 1``, each slice priced on its own tokens and the
   causal context before it): forward/backward units of ``m`` micro-batches (or of their
   slices), list-scheduled with activation sends
   between stages (:mod:`hetsim.workloads.training.pipeline_sim`). A unit's time is its
   layers' kernels (:mod:`hetsim.workloads.training.step_cost`: GEMMs, attention,
   elementwise, exposed TP and CP communication, recomputation), plus the embedding on
   the first virtual stage and the LM head and loss on the last.
   MoE layers add the expert-parallel all-to-alls and the local experts' GEMMs
   (:mod:`~hetsim.workloads.training.step_cost`); a stage's leading ``dense_layers`` keep
   the dense MLP.
2. **ZeRO-3 / FSDP** (``zero: 3``): inside every unit a compute stream and a
   communication stream: each layer's parameters are all-gathered before its forward and
   again before its backward (``fsdp_prefetch`` layers ahead), its gradients
   reduce-scattered after its backward, in issue order on one stream; the unit ends when
   both streams are done. Exposed communication is what that simulation leaves, not an
   assumed fraction.
3. **Data-parallel gradient reduction** (``zero`` 0, 1, 2) over the ranks holding the same
   weights (DP x CP: context-parallel ranks saw different tokens): after the last micro-batch's
   backward of each model chunk, gradients become ready layer by layer; they are packed
   into buckets of ``bucket_params`` parameters in the order they become ready and each
   bucket is all-reduced (ZeRO 0) or reduce-scattered (ZeRO 1/2) on the communication
   stream as soon as it is full and the stream is free (``overlap_grad_reduce``), or all
   after the backward (without). The exposed part is the tail past the stage's last unit.
4. **Optimizer**: AdamW over the local shard, memory-bound: per parameter it reads the
   gradient, fp32 master weight, momentum and variance and writes the last three and the
   16-bit weight (:data:`ADAM_BYTES_PER_PARAM` plus the gradient's bytes), at the
   elementwise kernel class's ``add`` efficiency. ZeRO 1/2 then all-gather the updated
   16-bit parameters over the DP group; with ``overlap_param_gather`` only the part longer
   than the next step's first forward unit is exposed.

**Stragglers** (``slow_ranks``: global rank -> factor on its units' time; Megatron's rank
order, TP fastest, then CP, DP, PP; **reconstruction**). Ranks that differ are simulated
apart: a stage's TP x CP ranks run in lockstep (per-layer collectives), so a replica's
stage runs at its slowest rank's factor, its whole unit time scaled (compute and the
exposed communication inside it); with ZeRO 3 the per-layer FSDP collectives lock every
DP replica to the slowest; otherwise every distinct DP replica's pipeline is simulated
and each gradient bucket is reduced once every replica has it (the latest ready time).
The units table and breakdown are the slowest replica's; ``replicas_simulated`` counts
the distinct replicas (1 without stragglers: scale by symmetry).

Iteration time = the slowest stage's (schedule end + exposed DP tail) + optimizer + exposed
parameter gather + ``step_overhead_s``. Model FLOPs follow Megatron-LM's formula
(:func:`~hetsim.workloads.training.step_cost.megatron_flops_per_token`); MFU divides them by
the peak of the GEMMs' math format; HFU adds the recomputed forward (4/3 of the model FLOPs
under full recomputation, Megatron's convention).

Memory per rank, by category: 16-bit parameters (2 B), gradients (``grad_bytes_per_param``),
optimizer states (12 B: fp32 master, momentum, variance), each divided by DP x CP as
ZeRO stage 1 (optimizer), 2 (+ gradients) and 3 (+ parameters) shard them (a rank holds
``E / ep`` routed experts per MoE layer, whose states shard over the ``tp cp dp / ep``
ranks holding the same experts, and reduce their gradients over them); activations of
the micro-batches in flight (from the schedule's order); buffers (fp32 logits and their
gradient on the last stage, gathered FSDP layers, DP buckets). A stage whose total exceeds
the device's memory makes ``oom = 1`` and ``oom_detail`` names the stage and its largest
categories.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from hetsim.devices.carbon import STEP_CARBON_METRICS, carbon_columns
from hetsim.devices.catalogue import fabric_spec
from hetsim.devices.cluster import Cluster
from hetsim.devices.energy import ENERGY_COLUMNS, POWER_COLUMNS, STEP_ENERGY_METRICS
from hetsim.devices.kernels import elementwise_time_s, kernel_fits
from hetsim.devices.power import compute_roof_flops, power_model
from hetsim.devices.precision import Precision
from hetsim.devices.sustained import DEFAULT_GPU_CLOCKS, GPU_CLOCKS_DESCRIPTION, GpuClocks
from hetsim.simulator.budget import WorkEstimate
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.limits import Seconds
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, WorkloadParams
from hetsim.workloads.models.dense import ModelSpec
from hetsim.workloads.training.parallel_comm import Fabrics, Layout
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
from hetsim.workloads.training.step_cost import (
    DenseModel,
    MicroBatchCost,
    StepKnobs,
    fit_trust,
    megatron_flops_per_token,
)
from hetsim.workloads.training.view import PipelineView, Schedule, Unit

#: AdamW bytes per parameter besides the gradient: read fp32 master, momentum, variance
#: (12), write them (12) and the 16-bit weight (2).
ADAM_BYTES_PER_PARAM = 26.0
#: fp32 master weight, momentum and variance per parameter.
OPTIMIZER_STATE_BYTES = 12
#: 16-bit parameter bytes.
PARAM_BYTES = 2

UNIT_COLUMNS = ("stage", "kind", "micro", "chunk", "start_s", "end_s")
STAGE_MEMORY_COLUMNS = ("stage", "params_bytes", "grads_bytes", "optimizer_bytes",
                        "activations_bytes", "buffers_bytes", "capacity_bytes")  # fmt: skip
"""Table ``stage_memory``: one rank of each pipeline stage, its peak bytes by category
(:class:`StageMemory`) and the device's memory."""


class ModelParams(BaseModel):
    """An inline dense transformer (``model:`` may also name a catalogue model)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(default="custom", description="Name of the inline model in tables.")
    layers: PositiveInt = Field(description="Transformer layers.")
    hidden: PositiveInt = Field(description="Hidden size (a multiple of heads).")
    heads: PositiveInt = Field(description="Attention (query) heads.")
    kv_heads: PositiveInt | None = Field(
        default=None,
        description="Key/value heads for grouped-query attention (null: heads, plain multi-head).",
    )
    ffn: PositiveInt = Field(description="FFN inner size of a dense layer.")
    vocab: PositiveInt = Field(description="Vocabulary size.")
    gated_mlp: bool = Field(
        default=True,
        description="Gated MLP (gate, up and down projections, as "
        "Llama's SwiGLU); false: two projections.",
    )
    tied_embeddings: bool = Field(
        default=False, description="The output head shares the input embedding's weights."
    )
    experts: NonNegativeInt = Field(0, description="routed experts per MoE layer (0: dense)")
    top_k: NonNegativeInt = Field(0, description="experts each token is routed to")
    expert_ffn: NonNegativeInt = Field(0, description="FFN width of one routed expert")
    shared_ffn: NonNegativeInt = Field(0, description="FFN width of the shared experts together")
    dense_layers: NonNegativeInt = Field(0, description="leading layers with the dense ffn")

    @model_validator(mode="after")
    def _shape(self) -> ModelParams:
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")
        kvh = self.kv_heads or self.heads
        if self.heads % kvh:
            raise ValueError(f"heads {self.heads} is not a multiple of kv_heads {kvh}")
        if self.experts and not (0 < self.top_k <= self.experts and self.expert_ffn):
            raise ValueError(f"experts {self.experts}: needs 0 < top_k <= experts and expert_ffn")
        if self.experts and self.dense_layers >= self.layers:
            raise ValueError(f"dense_layers {self.dense_layers}: must be < layers {self.layers}")
        return self


class ParallelTrainingParams(WorkloadParams):
    """The ``workload:`` block of a ``training-parallel`` scenario."""

    kind: Literal["training-parallel"] = Field(
        default="training-parallel", description="Workload kind (training-parallel)."
    )
    model: str | ModelParams = Field(
        "llama-3-8b", description="catalogue model name, or an inline model"
    )
    device: str | None = Field(
        default=None,
        description="Cluster device that prices each rank's kernels (null: the first GPU or NPU).",
    )
    tp: PositiveInt = Field(default=1, description="Tensor-parallel degree.")
    cp: PositiveInt = Field(
        default=1, description="Context-parallel degree (each rank keeps seq_len / cp tokens)."
    )
    cp_comm: Literal["ring", "ulysses"] = Field(
        "ring",
        description="context-parallel exchange: ring attention's K/V, or Ulysses' "
        "all-to-all of heads",
    )
    pp: PositiveInt = Field(default=1, description="Pipeline-parallel degree (stages).")
    dp: PositiveInt = Field(1, description="data-parallel degree (FSDP shards included)")
    ep: PositiveInt = Field(1, description="expert-parallel degree, out of the tp x cp x dp ranks")
    moe_capacity_factor: PositiveFloat | None = Field(
        None, description="expert capacity over the balanced share (None: dropless)"
    )
    moe_load_imbalance: float = Field(
        1.0, ge=1.0, description="busiest EP rank's routed tokens over the balanced share"
    )
    moe_pad_to_capacity: bool = Field(
        default=False,
        description="MoE: every EP rank computes its full capacity (padded "
        "tokens), not the busiest rank's routed load.",
    )
    gpus_per_node: PositiveInt = Field(
        default=8,
        description="GPUs per node: consecutive ranks share a node's scale-up fabric and its NIC.",
    )
    micro_batch: PositiveInt = Field(default=1, description="Sequences per micro-batch.")
    seq_len: PositiveInt = Field(default=2048, description="Tokens per sequence.")
    global_batch: PositiveInt = Field(8, description="sequences per optimizer step")
    precision: Literal["bf16", "fp16", "fp8"] = Field(
        "bf16", description="GEMM format (fp8: FP8 linears, attention stays bf16)"
    )
    sequence_parallel: bool = Field(
        default=True,
        description="Megatron sequence parallelism: TP all-reduces become "
        "reduce-scatter + all-gather and norms run on T / tp tokens.",
    )
    recompute: Literal["none", "selective", "op", "full"] = Field(
        "none",
        description="activation recomputation: Megatron's selective (attention core), "
        "torchtitan's op-level selective (op), or full",
    )
    tp_comm_overlap: bool = Field(
        default=False,
        description="Hide TP collectives behind the adjacent GEMM in tp_overlap_chunks "
        "pieces (Megatron's userbuffer overlap; reconstruction).",
    )
    tp_overlap_chunks: PositiveInt = Field(
        default=4,
        description="Pieces a TP collective is split into under "
        "tp_comm_overlap: exposed max(comm - gemm, comm / "
        "chunks).",
    )
    zero: Literal[0, 1, 2, 3] = Field(0, description="ZeRO stage; 3 is FSDP FULL_SHARD")
    overlap_grad_reduce: bool = Field(
        default=True,
        description="Reduce each gradient bucket as soon as it is full, "
        "overlapping the backward (false: all after the backward).",
    )
    overlap_param_gather: bool = Field(
        default=True,
        description="ZeRO 1/2: overlap the all-gather of updated parameters "
        "with the next step's first forward unit.",
    )
    bucket_params: PositiveInt = Field(40_000_000, description="Megatron-LM's DDP default")
    fsdp_prefetch: PositiveInt = Field(
        default=1,
        description="ZeRO 3: layers whose parameters are all-gathered ahead of the one computing.",
    )
    grad_bytes_per_param: Literal[2, 4] = Field(
        default=2,
        description="Bytes per gradient value held and "
        "reduce-scattered (4 where FSDP reduces in "
        "fp32).",
    )
    intra_fabric: str = Field(
        default="h100-nvswitch",
        description="Catalogue collective fabric inside a node (scale-up, e.g. NVSwitch).",
    )
    inter_fabric: str = Field(
        default="h100-ib-ndr-multinode",
        description="Catalogue collective fabric across nodes (scale-out NICs).",
    )
    node_nic_Bps: float | None = Field(
        None, gt=0, description="NIC bandwidth per node (default: the inter fabric's)"
    )
    fp8_scaling: Literal["delayed", "dynamic"] = Field(
        "delayed",
        description="FP8 scaling: delayed (amax fused into the cast, Transformer Engine's "
        "DelayedScaling) or dynamic (an amax pass over each activation and output gradient "
        "before its cast: torchao tensor-wise dynamic, TE current scaling); reconstruction",
    )
    attention_kernel: Literal["fitted", "fa2", "fa3", "cudnn", "eager"] = Field(
        "fitted",
        description="attention kernel the framework runs: fitted (the attention_prefill "
        "class fit) or a published kernel profile (devices/attention_kernels.yaml)",
    )
    gpu_clocks: GpuClocks = Field(default=DEFAULT_GPU_CLOCKS, description=GPU_CLOCKS_DESCRIPTION)
    sustained_matmul_ratio: float | None = Field(
        None,
        gt=0,
        le=1.0,
        description="sustained tensor-core throughput over the kernel fits' short-run "
        "(boost-clock) throughput: scales the compute roof of BF16/FP16 GEMMs and "
        "attention when gpu_clocks is sustained (None: the device's measured value in "
        "devices/kernels.yaml sustained_matmul_ratio, 1.0 where none; step_cost module doc)",
    )
    elementwise_impl: Literal["fused", "torchtitan-eager"] = Field(
        "fused",
        description="norms, rotary and SwiGLU: fused kernels (the kernel classes' fits; "
        "torch.compile, Transformer Engine) or torchtitan's eager modules kernel by kernel "
        "(fp32 RMSNorm and rotary, unfused SwiGLU, repeat_kv copies; reconstruction, "
        "workloads/training/eager_ops.py)",
    )
    attn_bwd_flops_ratio: float = Field(2.5, gt=0, description="reconstruction, step_cost")
    attn_bwd_relative_efficiency: float = Field(
        0.86, gt=0, le=1.5, description="reconstruction, step_cost"
    )
    dropout: bool = Field(False, description="dropout masks stored (GPT-style training)")
    slow_ranks: dict[NonNegativeInt, PositiveFloat] = Field(
        default_factory=dict,
        description="straggler ranks: global rank (TP fastest, then CP, DP, PP) -> factor on "
        "its units' time; ranks that differ are simulated apart (reconstruction)",
    )
    step_overhead_s: Seconds = Field(
        0.0, description="per-step host work (data loading, logging); named, default none"
    )

    @model_validator(mode="after")
    def _batch(self) -> ParallelTrainingParams:
        per = self.dp * self.micro_batch
        if self.global_batch % per:
            raise ValueError(
                f"global_batch {self.global_batch} is not a multiple of dp x micro_batch = {per}"
            )
        if self.seq_len % self.cp:
            raise ValueError(f"seq_len {self.seq_len} is not a multiple of cp {self.cp}")
        if (self.tp * self.cp * self.dp) % self.ep:
            raise ValueError(f"ep {self.ep} does not divide tp x cp x dp = "
                             f"{self.tp * self.cp * self.dp}")  # fmt: skip
        return self


def dense_model(model: str | ModelParams) -> DenseModel:
    """The :class:`DenseModel` of a catalogue name or an inline model."""
    if isinstance(model, ModelParams):
        return DenseModel(model.name, model.layers, model.hidden, model.heads,
                          model.kv_heads or model.heads, model.ffn, model.vocab,
                          model.gated_mlp, model.tied_embeddings, model.experts,
                          model.top_k, model.expert_ffn, model.shared_ffn,
                          model.dense_layers)  # fmt: skip
    from hetsim.simulator import registry

    if model not in registry.models:
        raise ValueError(f"model: unknown {model!r}; valid: {', '.join(registry.models.names())}")
    spec: ModelSpec = registry.models.get(model)
    gated = bool(getattr(spec, "gated_mlp", True))
    return DenseModel(spec.name, spec.layers, spec.hidden, spec.heads, spec.kv_heads,
                      spec.ffn, spec.vocab, gated)  # fmt: skip


@dataclass(frozen=True)
class StageMemory:
    """Peak bytes of one stage's rank, by category."""

    params: float
    grads: float
    optimizer: float
    activations: float
    buffers: float

    @property
    def total(self) -> float:
        """All categories together."""
        return self.params + self.grads + self.optimizer + self.activations + self.buffers


def layer_split(layers: int, stages: int) -> list[int]:
    """Layers of each of ``stages`` virtual pipeline stages: ``layers // stages`` each and
    the remainder one apiece on the middle stages (first and last hold the embedding and
    the LM head and loss, as Megatron-LM's ``account_for_embedding/loss_in_pipeline_split``
    and Megatron-DeepSpeed's BLOOM split place them); an even split when it divides."""
    base, rem = divmod(layers, stages)
    if layers < stages:
        raise ValueError(f"model layers {layers} fewer than {stages} pipeline stages x chunks")
    counts = [base] * stages
    order = [*range(1, stages - 1), 0, stages - 1] if stages > 2 else list(range(stages))
    for i in order[:rem]:
        counts[i] += 1
    return counts


def fsdp_pass(
    layers: int, compute_s: float | Sequence[float], gather_s: float | Sequence[float],
    reduce_s: float | Sequence[float], prefetch: int, extra_gather_s: float = 0.0,
) -> tuple[float, float]:  # fmt: skip
    """(duration, exposed communication) of ``layers`` layers under FSDP: a compute
    stream and one communication stream in issue order. Layer ``j``'s all-gather is issued
    when layer ``j - prefetch`` starts (the first ``prefetch`` at once); its compute waits
    for it; its reduce-scatter (``reduce_s > 0``, backward) is issued when its compute ends.
    ``extra_gather_s`` is added to the first gather (embedding or head parameters). Each
    of the three times is one value for every layer or one per layer (MoE and dense
    layers differ)."""
    if layers <= 0:
        return 0.0, 0.0
    comp, gath, red = (
        [float(x)] * layers if isinstance(x, (int, float)) else [float(v) for v in x]
        for x in (compute_s, gather_s, reduce_s)
    )
    comm_free = 0.0
    gathered = [0.0] * layers

    def issue(j: int, t: float) -> None:
        nonlocal comm_free
        begin = max(comm_free, t)
        comm_free = begin + gath[j] + (extra_gather_s if j == 0 else 0.0)
        gathered[j] = comm_free

    for j in range(min(prefetch, layers)):
        issue(j, 0.0)
    free = 0.0
    for j in range(layers):
        begin = max(free, gathered[j])
        if j + prefetch < layers:
            issue(j + prefetch, begin)
        free = begin + comp[j]
        if red[j] > 0:
            comm_free = max(comm_free, free) + red[j]
    end = max(free, comm_free)
    return end, end - sum(comp)


def bucket_tail(
    ready_s: list[float], grads: list[float], bucket: float, comm_s: Any, start_s: float | None,
    groups: list[str] | None = None,
) -> float:  # fmt: skip
    """End of the last bucket's reduction: gradients of ``grads[i]`` parameters become
    ready at ``ready_s[i]`` (ascending); buckets close when they hold ``bucket``
    parameters (or at the last gradient) and are reduced in order on one stream,
    ``comm_s(params)`` each, starting no earlier than ``start_s`` when given (no
    overlap) or their ready time. With ``groups`` (a label per gradient: MoE experts
    reduce over other ranks than the dense weights) each group fills its own buckets and
    ``comm_s(params, group)`` prices them; they share the one stream."""
    free, t_end = 0.0, 0.0
    labels = groups or [""] * len(grads)
    held: dict[str, float] = {}
    last = {g: i for i, g in enumerate(labels)}
    for i, g in enumerate(labels):
        held[g] = held.get(g, 0.0) + grads[i]
        if held[g] >= bucket or i == last[g]:
            ready = ready_s[i] if start_s is None else start_s
            free = max(free, ready) + (comm_s(held[g], g) if groups else comm_s(held[g]))
            held[g] = 0.0
            t_end = free
    return t_end


@workloads.register("training-parallel")
class ParallelTrainingWorkload(Workload):
    """One optimizer step of TP x CP x PP x DP (ZeRO/FSDP) training (module doc)."""

    Params = ParallelTrainingParams
    domain = "training"
    decision_points: ClassVar[dict[str, str]] = {"schedule": "1f1b"}
    metrics: ClassVar[dict[str, str]] = {
        "iteration_s": "seconds of one optimizer step (slowest stage + DP tail + optimizer)",
        "tokens_per_s_per_gpu": "global batch tokens / iteration_s / world size",
        "model_tflops_per_gpu": "Megatron-formula model FLOPs / iteration_s / GPUs / 1e12",
        "mfu": "model FLOPs per GPU per second / peak of the GEMM format",
        "hfu": "as mfu with the recomputed forward counted (4/3 under full recompute; the "
        "recomputed matmuls' share under op-level)",
        "compute_s": "critical stage: kernel time of its units (fwd + bwd, no recompute)",
        "recompute_s": "critical stage: recomputed forward time",
        "tp_exposed_s": "critical stage: exposed tensor-parallel communication",
        "cp_exposed_s": "critical stage: exposed ring KV exchange",
        "fsdp_exposed_s": "critical stage: exposed FSDP all-gather/reduce-scatter",
        "ep_exposed_s": "critical stage: expert-parallel all-to-all (dispatch and combine)",
        "exchange_exposed_s": "critical stage: SlimPipe's attention-context exchange on the "
        "critical path (reconstruction)",
        "pp_bubble_s": "critical stage: idle time in the schedule (bubble and p2p waits)",
        "dp_exposed_s": "critical stage: gradient reduction past its last unit",
        "optimizer_s": "AdamW over the local shard",
        "param_gather_exposed_s": "ZeRO 1/2 parameter all-gather not hidden by the next step",
        "bubble": "mean over stages of 1 - busy / schedule makespan (busy: its units' own "
        "work and the moved attention it ran for other stages)",
        "p2p_bytes": "activation and gradient bytes sent between stages per step, all stages "
        "of one pipeline replica (per TP rank): 2 m (p v - 1) sends",
        "tp_bytes_per_layer": "TP collective buffer bytes per layer per micro-batch (fwd+bwd)",
        "ep_bytes_per_layer": "EP all-to-all buffer bytes per rank per MoE layer per "
        "micro-batch: dispatch + combine, forward + backward",
        "exchange_bytes_per_layer": "SlimPipe attention-context exchange bytes per rank per "
        "layer per micro-batch, all slices, forward + backward (reconstruction)",
        "micro_batches": "micro-batches per step per pipeline",
        "world": "GPUs: tp x cp x pp x dp",
        "peak_bytes": "largest, over stages, of the rank's peak memory",
        "params_bytes": "that stage's 16-bit parameters",
        "grads_bytes": "that stage's gradients",
        "optimizer_bytes": "that stage's optimizer states",
        "activations_bytes": "that stage's activations of micro-batches in flight",
        "buffers_bytes": "that stage's logits, gathered FSDP layers and DP buckets",
        "oom": "1 if some stage's peak exceeds the device memory",
        "oom_detail": "the stage over memory and its largest categories ('' when none)",
        "replicas_simulated": "distinct data-parallel replicas simulated (1: all identical)",
        "sustained_matmul_ratio": "sustained tensor-core throughput over the kernel fits' "
        "short-run rates, as priced (GEMMs and attention; devices/kernels.yaml)",
        "model_fits": "least trusted kernel fit used: calibrated, borrowed or uncalibrated",
        "kernel_classes": "kernel classes (and collective) the step was priced with",
        "borrowed_fits": "GPU.class<-device for every kernel class priced with another "
        "device's fit; GPU.sustained<-device and GPU.gemm.<format>_scale<-device for a "
        "clock ratio or GEMM format scale measured on another device",
        **STEP_ENERGY_METRICS,
        **STEP_CARBON_METRICS,
    }

    def __init__(self, sim: Simulation, cluster: Cluster, params: ParallelTrainingParams,
                 policies: dict[str, Any], base_dir: Path) -> None:  # fmt: skip
        super().__init__(sim, cluster, params, policies, base_dir)
        p = params
        name = cluster.accelerator(p.device, "device")
        self.spec = cluster.device(name).spec
        self.capacity = float(cluster.memory(name).capacity_bytes)
        self.model = dense_model(p.model)
        if self.model.heads % p.tp:
            raise ValueError(f"tp: {p.tp} does not divide the model's {self.model.heads} heads")
        md = self.model
        if md.moe and md.experts % p.ep:
            raise ValueError(f"ep: {p.ep} does not divide the model's {md.experts} experts")
        if p.ep > 1 and not md.moe:
            raise ValueError(f"ep: {p.ep} needs a model with routed experts")
        if p.cp_comm == "ulysses" and (md.heads // p.tp) % p.cp:
            raise ValueError(f"cp: Ulysses needs the {md.heads // p.tp} heads per TP rank to "
                             f"be a multiple of cp {p.cp}")  # fmt: skip
        if md.moe and p.tp > 1 and not p.sequence_parallel:
            raise ValueError("sequence_parallel: MoE layers with tp > 1 need it (Megatron-core)")
        self.layout = Layout(p.tp, p.cp, p.dp, p.pp, p.gpus_per_node, p.ep)
        inter = fabric_spec(p.inter_fabric)
        self.fabrics = Fabrics(fabric_spec(p.intra_fabric), inter,
                               p.node_nic_Bps or inter.bandwidth_Bps, p.gpus_per_node)  # fmt: skip
        fmt = p.precision
        self.precision = Precision(fmt, fmt, "bf16" if fmt == "fp8" else fmt)
        self.precision.check(self.spec)
        knobs = StepKnobs(p.micro_batch, p.seq_len, p.sequence_parallel, p.recompute,
                          p.tp_comm_overlap, p.tp_overlap_chunks, p.attn_bwd_flops_ratio,
                          p.attn_bwd_relative_efficiency, p.dropout, p.moe_capacity_factor,
                          p.moe_load_imbalance, p.moe_pad_to_capacity, p.cp_comm,
                          fp8_scaling=p.fp8_scaling,
                          attention_kernel=p.attention_kernel,
                          gpu_clocks=p.gpu_clocks,
                          sustained_matmul_ratio=p.sustained_matmul_ratio,
                          elementwise_impl=p.elementwise_impl)  # fmt: skip
        self.cost = MicroBatchCost(self.spec, self.model, self.layout, self.fabrics, knobs,
                                   self.precision)  # fmt: skip
        #: the factor priced on compute roofs (the scenario's ratio, the device's measured
        #: one, or 1.0 at boost clocks; devices/sustained.py)
        self.sustained_ratio = self.cost.fit_ref.clock_ratio
        _ = self.cost.attention_profile  # no profile for this device: one clear error now
        self.m = p.global_batch // (p.dp * p.micro_batch)
        gemm_flops, attn_flops = self.cost.layer_flops()[0], 0.0
        if p.cp == 1:  # the policy's estimate: linear work and causal attention apart
            t, md = self.cost.tokens, self.model
            gemm_flops = 2.0 * t * md.active_params(md.moe) / p.tp
            attn_flops = 2.0 * p.micro_batch * p.seq_len**2 * md.heads * md.head_dim / p.tp
        view = PipelineView(p.pp, self.m, gemm_flops, attn_flops)
        self.sched: Schedule = policies["schedule"].schedule(view)
        if self.sched.slices > 1 and p.cp > 1:
            raise ValueError("policies.schedule: sliced schedules run with cp = 1")
        if self.sched.split_backward and (p.zero == 3 or self.sched.slices > 1):
            raise ValueError("policies.schedule: split backward (B and W units) is modelled "
                             "without FSDP (zero 3) and without slices")  # fmt: skip
        self.costs = [
            MicroBatchCost(self.spec, self.model, self.layout, self.fabrics, knobs,
                           self.precision, float(lo), float(hi))
            for lo, hi in zip(self._bounds()[:-1], self._bounds()[1:], strict=True)
        ] if self.sched.slices > 1 else [self.cost]  # fmt: skip
        self.moe_costs = [dataclasses.replace(c, moe_layer=True) for c in self.costs
                          ] if md.moe else []  # fmt: skip
        self.layers_of = layer_split(self.model.layers, p.pp * self.sched.chunks)
        first = [sum(self.layers_of[:k]) for k in range(len(self.layers_of))]
        #: MoE layers of each virtual stage (the leading ``dense_layers`` are dense)
        self.moe_of = [max(0, min(n, f + n - md.dense_layers)) if md.moe else 0
                       for f, n in zip(first, self.layers_of, strict=True)]  # fmt: skip
        self.rows = sim.recorder.table("units", UNIT_COLUMNS)
        self._price_units()

    # ---- unit times ---------------------------------------------------------------------
    def _layer_shards(self, moe: bool) -> list[tuple[float, str]]:
        """(parameters one rank holds, group that holds the same ones) of one layer: the
        TP-sharded dense part over DP x CP; a MoE layer's ``E / ep`` local experts over the
        expert-data-parallel group."""
        md, lay = self.model, self.layout
        if not moe:
            return [(md.params_per_layer / lay.tp, "dpcp")]
        return [(md.moe_dense_params / lay.tp, "dpcp"),
                (md.experts / lay.ep * md.expert_params, "edp")]  # fmt: skip

    def _layer_param_bytes(self) -> float:
        """16-bit bytes of the largest layer one rank holds."""
        kinds = [False, True] if self.model.moe else [False]
        return max(sum(n for n, _ in self._layer_shards(m)) for m in kinds) * PARAM_BYTES

    def _gather_s(self, nbytes: float, group: str = "dpcp") -> float:
        return self.fabrics.time_s("all_gather", self.layout, group, nbytes)

    def _layer_fsdp_s(self, moe: bool, op: str) -> float:
        """One layer's FSDP all-gather (16-bit parameters) or reduce-scatter (gradients,
        ``grad_bytes_per_param``: 4 where FSDP reduces in fp32) over its parts' groups."""
        width = self.params.grad_bytes_per_param if op == "reduce_scatter" else PARAM_BYTES
        return sum(self.fabrics.time_s(op, self.layout, g, n * width)
                   for n, g in self._layer_shards(moe))  # fmt: skip

    def _kinds(self, k: int) -> list[tuple[bool, int]]:
        """(MoE, count) of the layers of virtual stage ``k``, in model order."""
        moe = self.moe_of[k]
        return [(f, n) for f, n in ((False, self.layers_of[k] - moe), (True, moe)) if n]

    def _slice_cost(self, j: int, moe: bool) -> MicroBatchCost:
        return self.moe_costs[j] if moe else self.costs[j]

    def _bounds(self) -> list[float]:
        """Slice boundaries as fractions of the sequence (uniform unless the policy
        gives them)."""
        n, b = self.sched.slices, self.sched.bounds
        if not b:
            return [i / n for i in range(n + 1)]
        x = [float(v) for v in b]
        if (
            len(x) != n + 1
            or x[0] != 0.0
            or x[-1] != 1.0
            or any(x[i + 1] <= x[i] for i in range(n))
        ):
            raise ValueError(f"schedule bounds must be {n + 1} increasing fractions from 0 to 1")
        return x

    def _price_units(self) -> None:
        """Per (kind, virtual stage, slice): seconds and exposed FSDP time."""
        self.parts_f: list[dict[bool, dict[str, float]]] = []
        self.parts_b: list[dict[bool, dict[str, float]]] = []
        self.unit: dict[tuple[str, int, int], tuple[float, float]] = {}
        self.p2p_bytes_slice: list[float] = []
        self.p2p_s_slice: list[float] = []
        self.adj = self._redistribution()
        for j, c in enumerate(self.costs):
            self._price_slice(j, c)

    def _redistribution(self) -> list[dict[str, float]]:
        """Per slice, what SlimPipe's workload redistribution changes in one layer
        (:mod:`~hetsim.workloads.training.slice_exchange`, reconstruction): attention
        seconds a heavy slice hands its partner device (``attn_f``, ``attn_b``, negative:
        what it no longer runs itself) and its own exchange time under ``exchange_overlap:
        none`` (``xf``, ``xb``). ``self.help`` keeps, per heavy slice and unit kind, one
        layer's partner work, transfers each way and the bytes the partner holds."""
        n = len(self.costs)
        self.exchange_bytes_slice = [0.0] * n
        self.help: dict[int, dict[str, tuple[float, float, float, float]]] = {}
        zero = [dict.fromkeys(("attn_f", "attn_b", "xf", "xb"), 0.0) for _ in range(n)]
        if not self.sched.redistribute or n <= 1:
            return zero
        if self.sched.bounds:
            raise ValueError("policies.schedule: workload redistribution needs uniform slices")
        md, lay = self.model, self.layout
        hq, kvh = md.heads / lay.tp, max(md.kv_heads / lay.tp, 1.0)
        a = self.cost.attention_bytes
        ov = self.sched.exchange_overlap
        rec = self.params.recompute == "full"

        def link_s(nbytes: float) -> float:
            return self.fabrics.p2p_s(lay, nbytes) if nbytes > 0 else 0.0

        out = zero
        for j, (c, ex) in enumerate(zip(self.costs, redistribution(n), strict=True)):
            if not ex.heavy or ex.moved <= 0:
                continue
            fs, fr, bs, br = ex.directions(c.tokens, md.head_dim, hq, kvh, a)
            self.exchange_bytes_slice[j] = fs + fr + bs + br
            wf = ex.moved * c.layer["fwd_attention"]
            wb = ex.moved * c.layer["bwd_attention"]
            f = (wf, link_s(fs), link_s(fr), fs + fr)
            b = (wb, link_s(bs), link_s(br), bs + br)
            if rec:  # the backward reruns the forward first, with its own exchange
                b = (wb + wf, b[1] + f[1], b[2] + f[2], max(b[3], f[3]))
            self.help[j] = {"F": f, "B": b}
            out[j] = {"attn_f": -wf, "attn_b": -wb,
                      "xf": own_exchange_s(1, f[1], f[2], ov),
                      "xb": own_exchange_s(1, link_s(bs), link_s(br), ov)}  # fmt: skip
        return out

    def _helper(self, d: int, u: Unit) -> Helper | None:
        """The partner's part of unit ``u`` of device ``d`` (None: not a heavy slice)."""
        spec = self.help.get(u.slice) if u.kind != "W" else None
        if spec is None:
            return None
        layers = sum(n for _, n in self._kinds(self._virtual(d, u)))
        q = partner(d, u.slice, self.sched.slices, self.params.pp)
        w, send, ret, buf = spec[u.kind]
        return helper(q, layers, w, send, ret, buf, self.sched.exchange_overlap)

    def _price_slice(self, j: int, c: MicroBatchCost) -> None:
        p = self.params
        kinds = [False, True] if self.model.moe else [False]
        f_parts, b_parts, per_f, per_b = {}, {}, {}, {}
        per_w: dict[bool, float] = {}
        adj = self.adj[j]
        moved_f = adj["attn_f"] + adj["xf"]  # redistribution's change to a forward
        again = moved_f if p.recompute == "full" else 0.0  # ... and to its recomputation
        for moe in kinds:
            lc = self._slice_cost(j, moe)
            lay = lc.layer
            f_comp = lay["fwd_gemm"] + lay["fwd_attention"] + lay["fwd_elementwise"]
            b_comp = lay["bwd_gemm"] + lay["bwd_attention"] + lay["bwd_elementwise"]
            f_parts[moe] = {
                "compute": f_comp + adj["attn_f"],
                "tp": lay["fwd_tp"],
                "cp": lay["fwd_cp"],
                "ep": lay["fwd_ep"],
                "exchange": adj["xf"],
            }
            b_parts[moe] = {"compute": b_comp + adj["attn_b"], "tp": lay["bwd_tp"],
                            "cp": lay["bwd_cp"], "ep": lay["bwd_ep"], "exchange": adj["xb"],
                            "recompute": lc.layer_recompute_s() + again}  # fmt: skip
            per_f[moe] = lc.layer_fwd_s() + moved_f
            per_b[moe] = lc.layer_bwd_s() + adj["attn_b"] + adj["xb"] + again
            per_w[moe] = lc.layer_wgrad_s() if self.sched.split_backward else 0.0
        self.parts_f.append(f_parts)
        self.parts_b.append(b_parts)
        last = self.sched.chunks * p.pp - 1
        vh = self.model.vocab * self.model.hidden / self.layout.tp * PARAM_BYTES
        fsdp = p.zero == 3 and self._shard() > 1
        ag = {m: self._layer_fsdp_s(m, "all_gather") for m in kinds} if fsdp else {}
        rs = {m: self._layer_fsdp_s(m, "reduce_scatter") for m in kinds} if fsdp else {}
        for k in range(last + 1):
            edge_f = (c.embedding[0] if k == 0 else 0.0) + (c.head[0] if k == last else 0.0)
            edge_b = (c.embedding[1] if k == 0 else 0.0) + (c.head[1] if k == last else 0.0)
            extra = (vh if k == 0 else 0.0) + (vh if k == last else 0.0)
            seq = [m for m, n in self._kinds(k) for _ in range(n)]
            for kind, per, edge in (("F", per_f, edge_f), ("B", per_b, edge_b)):
                if fsdp:
                    order = seq if kind == "F" else seq[::-1]
                    dur, exposed = fsdp_pass(
                        len(order), [per[m] for m in order], [ag[m] for m in order],
                        [rs[m] if kind == "B" else 0.0 for m in order], p.fsdp_prefetch,
                        self._gather_s(extra) if extra else 0.0,
                    )  # fmt: skip
                    self.unit[(kind, k, j)] = (dur + edge, exposed)
                else:
                    self.unit[(kind, k, j)] = (sum(per[m] * n for m, n in self._kinds(k)) + edge,
                                               0.0)  # fmt: skip
            if self.sched.split_backward:  # W: the layers' weight gradients, out of B
                w = sum(per_w[m] * n for m, n in self._kinds(k))
                self.unit[("W", k, j)] = (w, 0.0)
                self.unit[("B", k, j)] = (self.unit[("B", k, j)][0] - w, 0.0)
        sp = self.layout.tp if p.sequence_parallel else 1
        nbytes = c.tokens * self.model.hidden * self.precision.activation_bytes / sp
        self.p2p_bytes_slice.append(nbytes)
        self.p2p_s_slice.append(self.fabrics.p2p_s(self.layout, nbytes))

    def _virtual(self, d: int, u: Unit) -> int:
        return u.chunk * self.params.pp + d

    def _time(self, d: int, u: Unit) -> float:
        return self.unit[(u.kind, self._virtual(d, u), u.slice)][0]

    def _scaled_time(self, factor: Sequence[float]) -> Callable[[int, Unit], float]:
        """Unit times of a replica whose stage ``d`` runs at ``factor[d]`` (stragglers)."""
        return lambda d, u: self._time(d, u) * factor[d]

    def _scaled_helper(self, factor: Sequence[float]) -> Callable[[int, Unit], Helper | None]:
        """Helpers of that replica: the moved work runs at its partner's ``factor``."""

        def scaled(d: int, u: Unit) -> Helper | None:
            h = self._helper(d, u)
            return h if h is None else replace(h, work_s=h.work_s * factor[h.device])

        return scaled

    # ---- the step -----------------------------------------------------------------------
    def start(self) -> None:
        """Run the schedule, the DP tails and the optimizer; finish at the step's end."""
        p = self.params
        self.replicas = self._replica_factors()
        helped: list[list[list[HelperRun]]] = [[] for _ in self.replicas]
        self.runs = [
            run_schedule(self.sched, p.pp, self._scaled_time(f),
                         lambda u: self.p2p_s_slice[u.slice], self._scaled_helper(f),
                         helped[i], self.sched.partner_priority)
            for i, f in enumerate(self.replicas)
        ]  # fmt: skip
        slowest = max(range(len(self.runs)), key=lambda i: max(max(e) for e in self.runs[i][1]))
        self.factor = self.replicas[slowest]
        #: per stage of the slowest replica: seconds it ran other stages' moved attention,
        #: and the most exchange bytes it held for them at once
        self.helped_s = [sum(b - a for a, b, _ in r) for r in helped[slowest]] or [0.0] * p.pp
        self.helper_bytes = [max((x for _, _, x in r), default=0.0) for r in helped[slowest]]
        self.helper_bytes = self.helper_bytes or [0.0] * p.pp
        self.starts, self.ends = self.runs[slowest]
        for d, order in enumerate(self.sched.order):
            for u, a, b in zip(order, self.starts[d], self.ends[d], strict=True):
                self.rows.append(d, u.kind, u.micro, u.chunk, a, b)
        self.stage_end = [max(max(e[d]) for _, e in self.runs) for d in range(p.pp)]
        self.dp_end = [self._dp_tail(d) for d in range(p.pp)]
        self.opt_s = max(self._optimizer_s(d) for d in range(p.pp))
        self.gather_exposed = max(self._param_gather_exposed(d) for d in range(p.pp))
        self.iteration_s = (max(self.dp_end) + self.opt_s + self.gather_exposed
                            + p.step_overhead_s)  # fmt: skip
        self.memory = [self._memory(d) for d in range(p.pp)]
        mem = self.sim.recorder.table("stage_memory", STAGE_MEMORY_COLUMNS)
        for d, m in enumerate(self.memory):  # one rank of each stage, peak by category
            mem.append(d, m.params, m.grads, m.optimizer, m.activations, m.buffers,
                       self.capacity)  # fmt: skip
        self.sim.env.process(self._finish())

    def _finish(self) -> Any:
        yield self.sim.env.timeout(self.iteration_s)
        self.done.succeed()

    def stage_param_groups(self, d: int) -> dict[str, float]:
        """Parameters one rank of stage ``d`` holds, by the group that holds the same ones:
        ``dpcp`` (its dense layers' parts, embedding, head) and ``edp`` (routed experts)."""
        md, lay = self.model, self.layout
        out = {"dpcp": 0.0, "edp": 0.0}
        for c in range(self.sched.chunks):
            for moe, count in self._kinds(c * lay.pp + d):
                for n, g in self._layer_shards(moe):
                    out[g] += count * n
        vh = md.vocab * md.hidden / lay.tp
        if d == 0:
            out["dpcp"] += vh
        if d == lay.pp - 1 and not md.tied_embeddings:
            out["dpcp"] += vh
        return out

    def stage_params(self, d: int) -> float:
        """Parameters one rank of stage ``d`` holds (its layers, embedding, head)."""
        return sum(self.stage_param_groups(d).values())

    def _dp_comm_s(self, params: float, group: str = "dpcp") -> float:
        nbytes = params * self.params.grad_bytes_per_param
        op = "all_reduce" if self.params.zero == 0 else "reduce_scatter"
        return self.fabrics.time_s(op, self.layout, group, nbytes)

    def _replica_factors(self) -> list[list[float]]:
        """Per distinct DP replica: each stage's factor on its units' time (module doc,
        stragglers); one replica of ones without stragglers."""
        lay, slow = self.layout, self.params.slow_ranks
        f = [[1.0] * lay.pp for _ in range(lay.dp)]
        group = lay.tp * lay.cp
        for rank, x in slow.items():
            if rank >= lay.world:
                raise ValueError(f"slow_ranks: rank {rank} is outside 0..{lay.world - 1}")
            r, d = (rank // group) % lay.dp, rank // (group * lay.dp)
            f[r][d] = max(f[r][d], float(x))
        if self.params.zero == 3:  # FSDP's per-layer collectives lock the replicas
            f = [[max(row[d] for row in f) for d in range(lay.pp)]]
        return [list(t) for t in dict.fromkeys(tuple(row) for row in f)]

    def _dp_tail(self, d: int) -> float:
        """When stage ``d``'s gradients are reduced over DP (module doc, item 3): each
        bucket once every simulated replica has it."""
        p = self.params
        end = self.stage_end[d]
        if self.layout.size("dpcp") <= 1 or p.zero == 3:
            return end
        lists = [self._dp_ready(d, st[d], en[d], max(en[d])) for st, en in self.runs]
        ready = [(max(x[i][0] for x in lists), n, g) for i, (_, n, g) in enumerate(lists[0])]
        ready = [r for r in ready if self.layout.size(r[2]) > 1]
        if not ready:
            return end
        ready.sort()
        times, grads = [r[0] for r in ready], [r[1] for r in ready]
        bucket = float(p.bucket_params) / self.layout.tp
        start = None if p.overlap_grad_reduce else end
        groups = [r[2] for r in ready]
        return max(end, bucket_tail(times, grads, bucket, self._dp_comm_s, start, groups))

    def _dp_ready(self, d: int, starts: Sequence[float], ends: Sequence[float],
                  stage_end: float) -> list[tuple[float, float, str]]:  # fmt: skip
        """(time, parameters, group) of stage ``d``'s gradients as they become ready in
        one replica's timeline, in a fixed order (the same for every replica)."""
        p = self.params
        order = self.sched.order[d]
        last_b: dict[int, tuple[float, float]] = {}
        last_micro = max(u.micro for u in order)
        grad_kind = "W" if self.sched.split_backward else "B"  # the unit making gradients
        for u, a, b in zip(order, starts, ends, strict=True):
            if u.kind == grad_kind and u.micro == last_micro:  # all its slices: one span
                a0 = last_b.get(u.chunk, (a, b))[0]
                last_b[u.chunk] = (min(a0, a), b)
        ready: list[tuple[float, float, str]] = []
        for chunk, (a, b) in last_b.items():
            k = chunk * p.pp + d
            seq = [m for m, n in self._kinds(k) for _ in range(n)][::-1]  # backward order
            step = (b - a) / len(seq)
            for i, moe in enumerate(seq):
                ready += [(a + (i + 1) * step, n, g) for n, g in self._layer_shards(moe)]
        rest = self.stage_param_groups(d)["dpcp"] - sum(n for _, n, g in ready if g == "dpcp")
        if rest > 0:  # embedding / head gradients, ready with the stage's last unit
            ready.append((stage_end, rest, "dpcp"))
        return ready

    def _shard(self, group: str = "dpcp") -> int:
        """Ranks the optimizer states are sharded over: those holding the same weights
        (DP x CP, as Megatron-LM's distributed optimizer and FSDP over CP shard them;
        the expert-data-parallel ranks for routed experts)."""
        return self.layout.size(group) if self.params.zero >= 1 else 1

    def _optimizer_s(self, d: int) -> float:
        """AdamW over the local shard, memory-bound (module doc, item 4)."""
        n = sum(v / self._shard(g) for g, v in self.stage_param_groups(d).items())
        nbytes = n * (ADAM_BYTES_PER_PARAM + self.params.grad_bytes_per_param)
        fit = kernel_fits(self.spec).fits.elementwise
        return float(elementwise_time_s(self.spec, fit, nbytes, "add"))

    def _param_gather_exposed(self, d: int) -> float:
        p = self.params
        if p.zero not in (1, 2) or self.layout.size("dpcp") <= 1:
            return 0.0
        ag = sum(self._gather_s(v * PARAM_BYTES, g) for g, v in self.stage_param_groups(d).items())
        if not p.overlap_param_gather:
            return ag
        first = sum(self.unit[("F", d, j)][0] for j in range(self.sched.slices))
        return max(0.0, ag - first)

    # ---- memory -------------------------------------------------------------------------
    def _memory(self, d: int) -> StageMemory:
        p = self.params
        params = grads = opt = 0.0
        for g, n in self.stage_param_groups(d).items():
            shard = self.layout.size(g)
            params += n * PARAM_BYTES / (shard if p.zero == 3 else 1)
            grads += n * p.grad_bytes_per_param / (shard if p.zero >= 2 else 1)
            opt += n * OPTIMIZER_STATE_BYTES / (shard if p.zero >= 1 else 1)
        kinds = [False, True] if self.model.moe else [False]
        per_layer = [{m: self._slice_cost(j, m).layer_activation_bytes() for m in kinds}
                     for j in range(len(self.costs))]  # fmt: skip

        def unit_bytes(u: Unit) -> float:
            k = self._virtual(d, u)
            return sum(n * per_layer[u.slice][m] for m, n in self._kinds(k))

        acts = peak_in_flight(self.sched.order[d], unit_bytes)
        acts += max(self._slice_cost(j, m).layer_working_bytes()
                    for j in range(len(self.costs)) for m in kinds)  # fmt: skip
        buffers = self.helper_bytes[d]  # a partner holds the exchanged attention context
        dp = self.layout.size("dpcp")
        if d == p.pp - 1:
            buffers += max(c.logits_bytes() for c in self.costs)
        if p.zero == 3 and dp > 1:
            buffers += (p.fsdp_prefetch + 1) * self._layer_param_bytes() * 2
        elif dp > 1:
            buffers += 2 * float(p.bucket_params) / self.layout.tp * p.grad_bytes_per_param
        return StageMemory(params, grads, opt, acts, buffers)

    # ---- outputs ------------------------------------------------------------------------
    def _critical(self) -> int:
        return max(range(self.params.pp), key=lambda d: self.dp_end[d])

    def breakdown(self) -> dict[str, float]:
        """Seconds of the critical stage's step by category; they sum to iteration_s."""
        d = self._critical()
        parts = dict.fromkeys(("compute", "recompute", "tp", "cp", "ep", "exchange", "fsdp"), 0.0)
        busy = 0.0
        f = self.factor[d]  # the slowest replica's straggler factor on this stage
        for u in self.sched.order[d]:
            dur, exposed = self.unit[(u.kind, self._virtual(d, u), u.slice)]
            parts["compute"] += (f - 1.0) * dur  # a straggler's extra time: its compute
            busy += f * dur
            if u.kind == "W":  # weight-gradient GEMMs: compute (B's parts exclude them)
                parts["compute"] += dur
                continue
            per = (self.parts_f if u.kind == "F" else self.parts_b)[u.slice]
            counted = 0.0
            for moe, k in self._kinds(self._virtual(d, u)):
                for key, val in per[moe].items():
                    parts[key] += k * val
                    counted += k * val
            parts["fsdp"] += exposed
            parts["compute"] += dur - exposed - counted
        parts["compute"] += self.helped_s[d]  # other stages' moved attention, run here
        busy += self.helped_s[d]
        parts["pp_bubble"] = self.stage_end[d] - busy
        parts["dp"] = self.dp_end[d] - self.stage_end[d]
        parts["optimizer"] = self.opt_s
        parts["param_gather"] = self.gather_exposed
        parts["overhead"] = self.params.step_overhead_s
        parts["sync_wait"] = self.iteration_s - sum(parts.values())
        return parts

    @classmethod
    def estimate_work(cls, params: ParallelTrainingParams) -> WorkEstimate:
        """Ranks (tp x cp x dp x pp) x microbatches per pipeline."""
        p = params
        ranks = p.tp * p.cp * p.dp * p.pp
        micro = max(p.global_batch // (p.dp * p.micro_batch), 1)
        return WorkEstimate(float(ranks * micro), None, f"{ranks} ranks x {micro} microbatches")

    def _conservation(self, finished: bool) -> None:
        """Microbatches through the stages (:func:`unit_conservation`); every stage's
        units and DP tail end within the step, which ends at ``iteration_s``."""
        unit_conservation("training-parallel", self.sched.order, self.starts, self.ends,
                          self.m, len(self.rows))  # fmt: skip
        late = [d for d in range(self.params.pp)
                if not self.stage_end[d] <= self.dp_end[d] <= self.iteration_s]  # fmt: skip
        if late:
            raise InvariantViolation(f"training-parallel: stage {late[0]} ends after the step")
        if finished and self.sim.now < self.iteration_s * (1 - 1e-9):
            raise InvariantViolation(f"training-parallel: the step ended at {self.sim.now} s, "
                                     f"before its {self.iteration_s} s")  # fmt: skip

    def check_partial(self) -> None:
        """At any moment (the schedule is priced at the start): microbatches conserved."""
        self._conservation(finished=False)

    def check(self) -> None:
        """At the end: microbatches conserved and the step ended at ``iteration_s``."""
        self._conservation(finished=True)

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """See :attr:`metrics`."""
        p, lay = self.params, self.layout
        it = self.iteration_s
        tokens = p.global_batch * p.seq_len
        world = lay.world
        flops = megatron_flops_per_token(self.model, p.seq_len) * tokens
        peak = self.spec.peak(self.precision.math_dtype())
        mfu = flops / world / it / peak
        hfu = mfu * (1.0 + self.cost.recompute_flops_ratio() / 3.0)
        parts = self.breakdown()
        worst = max(range(p.pp), key=lambda d: self.memory[d].total)
        mem = self.memory[worst]
        oom_detail = ""
        over = [d for d in range(p.pp) if self.memory[d].total > self.capacity]
        if over:
            d = over[0]
            m = self.memory[d]
            cats = sorted(((v, k) for k, v in vars(m).items()), reverse=True)
            top = ", ".join(f"{k} {v / 2**30:.1f} GiB" for v, k in cats[:3])
            oom_detail = (f"stage {d} needs {m.total / 2**30:.1f} GiB of "
                          f"{self.capacity / 2**30:.1f} GiB ({top})")  # fmt: skip
        virtual = p.pp * self.sched.chunks
        sends = 2 * self.m * (virtual - 1) if p.pp > 1 else 0
        p2p = sends * sum(self.p2p_bytes_slice)
        return {
            "iteration_s": it,
            "tokens_per_s_per_gpu": tokens / it / world,
            "model_tflops_per_gpu": flops / world / it / 1e12,
            "mfu": mfu,
            "hfu": hfu,
            "compute_s": parts["compute"],
            "recompute_s": parts["recompute"],
            "tp_exposed_s": parts["tp"],
            "cp_exposed_s": parts["cp"],
            "ep_exposed_s": parts["ep"],
            "exchange_exposed_s": parts["exchange"],
            "fsdp_exposed_s": parts["fsdp"],
            "pp_bubble_s": parts["pp_bubble"],
            "dp_exposed_s": parts["dp"],
            "optimizer_s": parts["optimizer"],
            "param_gather_exposed_s": parts["param_gather"],
            "bubble": float(bubble_fraction(self.starts, self.ends, [
                sum(self._time(d, u) * self.factor[d] for u in o) + self.helped_s[d]
                for d, o in enumerate(self.sched.order)]).mean()),
            "p2p_bytes": p2p,
            "tp_bytes_per_layer": 4 * self.cost.tokens * self.model.hidden
            * self.precision.activation_bytes if lay.tp > 1 else 0.0,
            "ep_bytes_per_layer": 4 * self.moe_costs[0].ep_bytes() if lay.ep > 1 else 0.0,
            "exchange_bytes_per_layer": sum(self.exchange_bytes_slice),
            "micro_batches": self.m,
            "world": world,
            "peak_bytes": mem.total,
            "params_bytes": mem.params,
            "grads_bytes": mem.grads,
            "optimizer_bytes": mem.optimizer,
            "activations_bytes": mem.activations,
            "buffers_bytes": mem.buffers,
            "oom": int(bool(over)),
            "oom_detail": oom_detail,
            "replicas_simulated": len(self.replicas),
            "sustained_matmul_ratio": self.sustained_ratio,
            **self._trust(),
            **self._energy(hfu * peak * it, tokens, parts["compute"] + parts["recompute"]),
        }  # fmt: skip

    def _energy(self, flops_per_gpu: float, tokens: int, kernel_s: float) -> dict[str, Any]:
        """Energy of one step (:data:`TRAINING_ENERGY_METRICS`): every GPU of the world
        idles through its stage's bubbles and is busy the rest of the step, its kernels
        at the compute utilisation of the step's hardware FLOPs (recompute included) at
        the clock model's compute roof (devices/power.py)."""
        it, world = self.iteration_s, self.layout.world
        pm = power_model(self.spec)
        roof = compute_roof_flops(self.spec, self.precision.math_dtype(), self.sustained_ratio)
        busy = it * (1.0 - float(self.summary_bubble()))
        compute = flops_per_gpu / roof if roof > 0 else 0.0
        per_gpu = pm.idle_W * it + pm.interval_J(busy, compute)
        peak_W = pm.busy_W(compute / kernel_s) if kernel_s > 0 else pm.memory_W
        step_J = world * per_gpu
        self._power_tables(pm, per_gpu, busy, peak_W)
        carbon = carbon_columns(step_J, it, {self.spec.name: world * it},
                                self.cluster.config.carbon, self.cluster.load_grid())  # fmt: skip
        carbon.pop("carbon_g")
        step_g = carbon["carbon_operational_g"] + carbon["carbon_embodied_g"]
        return {
            "energy_per_step_J": step_J,
            "energy_per_token_J": step_J / tokens,
            "tokens_per_J": tokens / step_J if step_J > 0 else float("nan"),
            "avg_power_W": per_gpu / it if it > 0 else float("nan"),
            "peak_power_W": peak_W,
            "avg_power_W_by_type": f"{self.spec.name}:{per_gpu / it:.6g}" if it > 0 else "",
            "peak_power_W_by_type": f"{self.spec.name}:{peak_W:.6g}",
            "power_limit_W": pm.limit_W,
            **carbon,
            "carbon_per_step_g": step_g,
            "carbon_per_token_g": step_g / tokens,
        }

    def _power_tables(self, pm: Any, per_gpu_J: float, busy_s: float, kernel_W: float) -> None:
        """The ``energy`` table (one row: a GPU of the world over the step) and the
        ``power`` table: per pipeline stage, the kernel draw over each scheduled unit
        (forward, backward...) of the slowest replica, idle between units, and
        ``memory_W`` from the stage's last unit to the step's end (DP tail, optimizer)."""
        rec, it = self.sim.recorder, self.iteration_s
        rec.table("energy", ENERGY_COLUMNS).append(
            "each GPU", self.spec.name, self.spec.kind, per_gpu_J, busy_s,
            per_gpu_J / it if it > 0 else 0.0, kernel_W,
        )  # fmt: skip
        table = rec.table("power", POWER_COLUMNS)
        for d, (starts, ends) in enumerate(zip(self.starts, self.ends, strict=True)):
            name = f"stage{d}"
            for a, b in sorted(zip(starts, ends, strict=True)):
                table.append(name, a, kernel_W)
                table.append(name, b, pm.idle_W)
            last = max(ends, default=0.0)
            if last < it:
                table.append(name, last, pm.memory_W)
            table.append(name, it, pm.idle_W)

    def summary_bubble(self) -> float:
        """Mean over stages of the pipeline bubble's share of the step (``bubble``)."""
        return float(bubble_fraction(self.starts, self.ends, [
            sum(self._time(d, u) * self.factor[d] for u in o) + self.helped_s[d]
            for d, o in enumerate(self.sched.order)]).mean())  # fmt: skip

    def _trust(self) -> dict[str, str]:
        """Which kernel fits priced the step (``docs/fidelity`` copies these columns)."""
        return fit_trust(self.cost, ("collective",) if self.layout.world > 1 else ())

    def horizon_s(self) -> float | None:
        """The step's length once priced."""
        return getattr(self, "iteration_s", None)
