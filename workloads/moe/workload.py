"""MoE inference with offloaded experts: prefill and decode, layer by layer, on GPU+CPU+PCIe.

One request: a prefill step over ``prompt_tokens`` tokens, then ``output_tokens``
decode steps of one token. Each step walks the model's layers; dense layers run on the
GPU; each MoE layer asks the ``gating``, ``placement``, ``cache`` and ``prefetch``
policies (schedulers/moe/) and runs as :mod:`workloads.moe_layer` describes, with one
SimPy timeout per layer-step. Expert weights live in host memory (a ``moe.experts``
allocation) and in a per-layer GPU slot cache (``moe.cache``) sized by
``cache_fraction`` of all routed experts; attention, shared experts and the KV cache
stay on the GPU. Before the run a warm-up window of the routing trace profiles each
layer (top-1 share under the gating policy, gate-reuse prediction accuracy, activation
frequency) for the cache policy's slot allocation and the warm start of the cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import (
    BaseModel,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
)

from hetsim.devices.cluster import Cluster
from hetsim.devices.cpu import CpuModel, cpu_kernels
from hetsim.devices.lowbit_kernels import lowbit_kernel, peak_flops
from hetsim.devices.memory import OutOfMemory
from hetsim.devices.power import compute_roof_flops
from hetsim.devices.roofline import op_time_s
from hetsim.devices.secure_copy import SecureCopy
from hetsim.devices.sustained import DEFAULT_GPU_CLOCKS, GPU_CLOCKS_DESCRIPTION, GpuClocks
from hetsim.simulator.budget import WorkEstimate
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.limits import Seconds
from hetsim.simulator.registry import policies as policy_registry
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, WorkloadParams
from hetsim.workloads.metered import metered_columns
from hetsim.workloads.models.moe import ModelRef, MoEModel, resolve_model
from hetsim.workloads.moe.costs import (
    MoECosts,
    StepCosts,
    StepFlops,
    cpu_override,
    read_only,
    unit_loads,
)
from hetsim.workloads.moe.engines import expert_table_s, load_engine
from hetsim.workloads.moe.layer import (
    check_placement,
    placement_view,
    route,
    route_token,
    timeline,
)
from hetsim.workloads.moe.layer_load import (
    HOST_OPS_PER_EXPERT,
    PERMUTE_SCALES_PER_EXPERT,
    PERMUTE_SCALES_S,
    REPACK_KERNELS,
    REPACK_TRAFFIC_FACTOR,
    LayerLoadStages,
)
from hetsim.workloads.moe.metrics import METRICS, Counters, summarise
from hetsim.workloads.moe.prefetch import BLOCK_TOKENS, issue_prefetches
from hetsim.workloads.moe.residency import Residency
from hetsim.workloads.moe.routing import Routing, SyntheticRouting, build_trace
from hetsim.workloads.moe.trust import moe_trust
from hetsim.workloads.moe.view import AllocationView, GatingView, Phase, TokenGatingView

# ggml's backend scheduler (llama.cpp, ik_llama.cpp with -ot exps=CPU) cuts a layer whose
# routed experts run on the CPU into a GPU split, a CPU split and a GPU split again: two
# GPU<->CPU boundaries per such layer, each paying sched_split_s on the host.
SPLITS_PER_CPU_LAYER = 2
# sched_split_s measured (ikawrakow/ik_llama.cpp PR #232, ikawrakow's comments 2025-02-25:
# DeepSeek-Lite IQ4_NL, Ryzen 9 7950X + GPU, fused MoE, experts on the CPU, 5 x tg128):
# 640 tokens in 11.53 s, of which 8.42 s CPU experts and 1.23 s GPU, 1.88 s (16.3%)
# neither; of that ~13 points in ggml_backend_sched_compute_splits before each
# graph_compute_async, ~2 of them the copies and their syncs (cpu_handoff prices those),
# ~2.3 starting the CPU threads (cpu_layer_overhead_s), ~1 building the graph. The
# scheduler's other ~11% over 640 tokens x 25 expert layers x 2 splits:
SCHED_SPLIT_S = 0.11 * 11.53 / (640 * 25 * SPLITS_PER_CPU_LAYER)  # 39.6 us
# the whole unexplained 1.88 s charged to the splits: the sweep's upper end
SCHED_SPLIT_HIGH_S = 1.88 / (640 * 25 * SPLITS_PER_CPU_LAYER)  # 58.8 us

LAYER_COLUMNS = (
    "step", "phase", "layer", "start_s", "router_s", "end_s", "experts", "hits",
    "gpu_experts", "copied", "cpu_experts", "gpu_busy_s", "cpu_busy_s", "stall_s",
)  # fmt: skip
STEP_COLUMNS = ("step", "phase", "tokens", "start_s", "end_s", "experts_per_token")
D2H_RATIO = 0.854
"""GPU->host over host->GPU copy rate: H02 (46.8 / 54.8 GB/s pinned, H100 node)."""


class MoEParams(WorkloadParams):
    """The ``workload:`` block of an MoE offloading scenario."""

    kind: Literal["moe"] = Field(default="moe", description="Workload kind (moe).")
    model: str | ModelRef | MoEModel = Field(
        "mixtral-8x7b", description="catalogue name, inline spec, or {name, hf_config_path}"
    )
    phase: Literal["both", "prefill", "decode"] = Field(
        default="both",
        description="Steps run: prefill then decode (both), prefill only, or decode only.",
    )
    prompt_tokens: PositiveInt = Field(
        default=128, description="Prompt length of the prefill step, in tokens."
    )
    output_tokens: NonNegativeInt = Field(
        default=32, description="Decode steps (tokens generated per sequence)."
    )
    routing: Routing = Field(
        default=SyntheticRouting.model_validate({}),
        description="Expert routing per token and layer: synthetic (drawn "
        "from distributions) or replayed from a trace.",
    )
    cache_fraction: float = Field(
        0.25,
        ge=0.0,
        le=1.0,
        description="Share of all routed experts that fit in the GPU's expert-slot cache.",
    )
    expert_bits: float = Field(4.5, gt=0, le=32, description="bits per routed-expert weight")
    dense_bits: float = Field(4.5, gt=0, le=32, description="bits per attention/shared weight")
    gpu_dtype: str = Field(
        default="fp16",
        description="Compute format of the GPU's roofline (expert, dense and repack costs).",
    )
    gpu_clocks: GpuClocks = Field(default=DEFAULT_GPU_CLOCKS, description=GPU_CLOCKS_DESCRIPTION)
    cpu_dtype: str = Field(
        default="fp32",
        description="Compute format of the CPU roofline for CPU experts (cpu_model roofline).",
    )
    gpu: str | None = Field(None, description="GPU device name; default: the first GPU")
    cpu: str | None = Field(None, description="host CPU name; default: the GPU's host")
    cpu_cores: PositiveInt | None = Field(
        default=None,
        description="Limit the host CPU to this many cores, its peaks scaled by "
        "cores / catalogue cores (null: the catalogue CPU).",
    )
    cpu_memory_bandwidth_Bps: PositiveFloat | None = Field(
        default=None,
        description="Override of the host CPU's DRAM bandwidth, in "
        "bytes/s (null: the catalogue's).",
    )
    warmup_tokens: PositiveInt = Field(
        default=64,
        description="Tokens of the routing trace before the run that profile each "
        "layer for the cache policy and warm the cache.",
    )
    gpu_expert_overhead_s: Seconds = Field(
        default=0.0,
        description="Extra seconds per activated expert on the GPU beyond its roofline time.",
    )
    cpu_expert_overhead_s: Seconds = Field(
        default=0.0,
        description="Extra seconds per activated expert on the CPU beyond its modelled time.",
    )
    cpu_layer_overhead_s: Seconds = Field(
        default=0.0,
        description="Host seconds per layer with CPU experts before they start "
        "(thread start-up; a fused MoE call's cost).",
    )
    copy_priority: bool = Field(
        True, description="demand copies overtake queued prefetches; stale prefetches cancelled"
    )
    batch: PositiveInt = Field(
        1,
        description="sequences decoded together: each decode step routes this many tokens "
        "and computes each activated expert once (de-duplicated) on all of its tokens",
    )
    cpu_model: Literal["roofline", "kernels"] = Field(
        "roofline", description="CPU expert pricing: the device roofline, or devices/cpu.py"
    )
    cpu_format: str = Field(
        default="q4_k",
        description="Weight format of the CPU experts in the kernel model "
        "(devices/cpu_kernels.yaml, e.g. q4_k, int4, int8).",
    )
    cpu_calls_per_expert: NonNegativeInt = Field(
        2,
        description="CPU kernel calls per expert (gate+up, down); 0 = one fused MoE call "
        "per layer (kTransformers, llama.cpp mul_mat_id), whose cost is cpu_layer_overhead_s",
    )
    cpu_amx_tokens_per_expert: NonNegativeFloat | None = Field(
        4.0,
        description="kt-kernel's kernel switch (cpu_format int4/int8, its AMXINT4/AMXINT8): "
        "a forward call runs its CPU experts on the AMX matrix kernel only when it routes "
        "more than this many tokens per expert of the layer on average, else on the "
        "AVX-512 vector kernel whose time grows with each expert's tokens (4: "
        "kt-kernel/operators/amx/moe.hpp, qlen > 4 E / k; doc/en/AMX.md section 3); "
        "null: the faster of the two at each expert's load (the CPU model's auto path)",
    )
    cpu_threads: PositiveInt | None = Field(
        default=None,
        description="Threads of the CPU kernel model (null: "
        "cpu_cores, else every core of every socket).",
    )
    cpu_sockets: Literal[1, 2] = Field(
        default=1, description="CPU sockets the kernel model streams expert weights from."
    )
    cpu_numa: Literal["interleave", "replicate"] = Field(
        default="interleave",
        description="Two sockets: weights interleaved across both memories, "
        "or replicated per socket (local reads only).",
    )
    cpu_kernels: dict[str, Any] = Field(
        default_factory=dict,
        description="Overrides of the CPU type's kernel constants in "
        "devices/cpu_kernels.yaml (cpu_model kernels).",
    )
    gpu_dequant_s_per_expert: NonNegativeFloat = Field(
        0.0,
        description="GPU dequantisation + launch of one expert beyond its roofline "
        "(a named parameter until the GPU kernel model prices quantised experts)",
    )
    gpu_kernel: str | None = Field(
        None,
        description="price the GPU's routed experts with this low-bit dequant-fused kernel "
        "family (devices/lowbit_kernels.yaml: gemv, marlin, triton-gemm) at expert_bits; "
        "default: the engine's kernel, else the fitted weight-only GEMM (devices/kernels.py)",
    )
    gpu_kernels: dict[str, Any] = Field(
        default_factory=dict,
        description="overrides of that family's fields (bandwidth_fraction, floor_s, "
        "ops_per_weight, peak, pad_rows): the swept kernel unknowns",
    )
    engine: str | None = Field(
        None,
        description="engine host profile of the GPU expert path (workloads/moe/engines.yaml: "
        "hqq-offloading = Mixtral-offloading's and AdapMoE's eager PyTorch + Triton path): "
        "host ops, launches and syncs per expert and per layer; default: none (0 host time)",
    )
    engine_overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="overrides of the profile's fields (torch_op_s, launch_s, sync_s, counts)",
    )
    tee: Literal["none", "h100-cc"] = Field(
        default="none",
        description="GPU confidential computing: expert copies and hand-offs go "
        "through the h100-cc encrypted bounce buffer.",
    )
    cc_crypto_throughput_Bps: PositiveFloat | None = Field(
        default=None,
        description="CPU AES-GCM rate of the bounce buffer, in bytes/s (null: the h100-cc preset).",
    )
    cpu_handoff: bool = Field(
        False,
        description="price the per-layer GPU<->CPU hand-off of a hybrid engine: hidden "
        "states D2H before the CPU experts, their output H2D after (two copies at the "
        "link's latency and rate; through the bounce buffer under tee: h100-cc)",
    )
    host_callbacks_per_layer: NonNegativeInt = Field(
        0,
        description="host functions enqueued in the GPU stream per layer with CPU experts "
        "(kTransformers' CPUInfer submit_with_cuda_stream + sync_with_cuda_stream: 2), "
        "each stalling the stream for host_callback_s",
    )
    host_callback_s: Seconds = Field(
        1.0e-4,
        description="latency of one host function in a CUDA stream: ~100 us measured on an "
        "RTX 3080 over PCIe 4.0 (facebookincubator/velox PR #6096)",
    )
    sched_split_s: Seconds = Field(
        0.0,
        description="host time of ggml's backend scheduler (llama.cpp, ik_llama.cpp -ot "
        "exps=CPU) per graph split at a GPU<->CPU boundary, beyond the copies cpu_handoff "
        "prices; a layer whose routed experts run on the CPU has two (GPU->CPU, CPU->GPU). "
        "0: engines without ggml's scheduler. Measured for ik_llama.cpp: 39.6 us "
        "(SCHED_SPLIT_S; swept 0-58.8 us in scenarios/ggml-split-robustness.yaml)",
    )
    shared_after_cpu_experts: bool = Field(
        False,
        description="in a layer with CPU experts the GPU's shared expert starts only after "
        "the CPU experts return: ggml's scheduler runs graph splits one after another and "
        "llama.cpp / ik_llama.cpp build the shared expert after the routed ones; default: "
        "it overlaps them (kTransformers runs it while the CPU works)",
    )
    experts_after_layer_copies: bool = Field(
        False,
        description="the GPU computes a layer's routed experts only after all of that "
        "layer's expert copies have landed (one fused MoE call over the loaded layer: "
        "kt-kernel's layerwise GPU prefill); default: each expert as its weights land",
    )
    layer_load_stages: bool = Field(
        False,
        description="with experts_after_layer_copies: price kt-kernel's INT4 layer load as "
        "its code runs it (workloads/moe/layer_load.py): per expert a CPU write into a "
        "pinned double buffer, the copy, a GPU transpose + Marlin repack, and the Python "
        "loop's ops, pipelined; default off (copies only)",
    )
    layer_load_host_op_s: Seconds = Field(
        20e-6,
        description="host time per PyTorch op of that loop (about 20 us from an op's call to "
        "its kernel's start: Nsight Systems user guide trace, as serving's cpu_launch_s)",
    )
    layer_load_permute_scales_s: Seconds = Field(
        PERMUTE_SCALES_S,
        description="host time per marlin_permute_scales call of that loop (two per expert: "
        "a Python-list index rebuilt, uploaded and gathered each call; ~121 us measured in "
        "ModelCloud/GPTQModel PR #2988, 60 us if that count included bias permutes)",
    )
    gpu_tp: PositiveInt = Field(
        1,
        description="tensor parallelism of the GPU side over this many identical GPUs (the "
        "named GPU and its peers): attention, shared/dense FFN, GPU-resident experts and "
        "the LM head split 1/gpu_tp per GPU, two activation all-reduces per layer "
        "(ring over the GPU's host link: reconstruction); KV cache replicated",
    )

    @field_validator("model", mode="before")
    @classmethod
    def _inline_model(cls, v: Any) -> Any:
        """Validate an inline model as one type, so errors name its own field."""
        if not isinstance(v, dict):
            return v
        kind: type[BaseModel] = ModelRef if "hf_config_path" in v else MoEModel
        try:
            return kind.model_validate(v)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise ValueError(f"{where}: {err['msg']}".removeprefix(": ")) from None


@workloads.register("moe")
class MoEWorkload(Workload):
    """MoE prefill + decode with routed experts offloaded to host memory (AdapMoE, HybriMoE)."""

    Params = MoEParams
    domain = "moe"
    decision_points: ClassVar[dict[str, str]] = {
        "gating": "topk",
        "placement": "gpu",
        "prefetch": "none",
        "cache": "lru",
    }
    metrics: ClassVar[dict[str, str]] = METRICS

    def __init__(
        self,
        sim: Simulation,
        cluster: Cluster,
        params: MoEParams,
        policies: dict[str, Any],
        base_dir: Path,
    ) -> None:
        super().__init__(sim, cluster, params, policies, base_dir)
        self.model: MoEModel = resolve_model(params.model, base_dir)
        self.gating, self.placement = policies["gating"], policies["placement"]
        self.prefetcher, self.cache = policies["prefetch"], policies["cache"]
        self.gpu_name, self.cpu_name = self._devices(cluster, params)
        self.costs = self._costs(cluster, params)
        w, p, o = params.warmup_tokens, params.prompt_tokens, params.output_tokens
        rng = sim.rng("moe.routing")
        self.trace = build_trace(
            params.routing, self.model, w + p + o * params.batch, rng, base_dir
        )
        self.steps = self._steps(params)
        self.counters = Counters()
        self.predictions: Any = None  # PredictionBlock of the current decode token
        self._token: tuple[int, np.ndarray] = (-1, np.zeros((0, 0)))  # (t, its probs)
        # decode tokens' probs computed a block at a time: (t0, t1, (t1 - t0, layers, experts))
        self._token_block: tuple[int, int, np.ndarray] = (0, 0, np.zeros((0, 0, 0)))
        # a decode token's gating at every layer, where the policy decides a token at
        # once (TokenGatingPolicy): (t, mask (layers, experts), each layer's ids as arrays
        # and each layer's ids as tuples)
        self._routed: tuple[int, np.ndarray, list[np.ndarray], list[tuple[int, ...]]] = (
            -1, np.zeros((0, 0)), [], [],
        )  # fmt: skip
        self._token_layers: list[tuple[Any, ...]] = []  # see _route_token
        self._lookahead: int = self.prefetcher.lookahead_layers
        self._select_token = getattr(self.gating, "select_token", None)
        self._observe_token = getattr(self.cache, "observe_token", None)
        self.res = self._allocate()
        self._allocate_memory()
        self._layers = sim.recorder.table("layers", LAYER_COLUMNS)
        self._layer_row = self._layers.row_sink()  # rows of LAYER_COLUMNS' width
        self._steps_tbl = sim.recorder.table("steps", STEP_COLUMNS)
        rec = sim.recorder
        self.tracks = {
            "gpu": cluster.device(self.gpu_name).track,
            "cpu": cluster.device(self.cpu_name).track,
            "pcie": rec.track(f"{self.gpu_name} pcie h2d", group="links", kind="link"),
        }
        # energy (devices/energy.py): each layer-step's GPU and CPU busy seconds on the
        # devices' meters, with the seconds its FLOPs take at each one's compute roof
        self._gpu_meter = cluster.device(self.gpu_name).energy
        self._cpu_meter = cluster.device(self.cpu_name).energy
        roof = compute_roof_flops(cluster.device(self.gpu_name).spec,
                                  self.costs.dense_precision.math_dtype(),
                                  self.costs.fits.clock_ratio)  # fmt: skip
        self._gpu_s_per_flop = 1.0 / (params.gpu_tp * roof) if roof > 0 else 0.0
        cpu_roof = compute_roof_flops(self.costs.cpu, params.cpu_dtype)
        self._cpu_s_per_flop = 1.0 / cpu_roof if cpu_roof > 0 else 0.0
        # the last MoE layer's (GPU busy, GPU compute, CPU busy, CPU compute) seconds,
        # booked when its barrier is reached (a run cut by until_s books none in flight)
        self._layer_energy = (0.0, 0.0, 0.0, 0.0)

    # ---- set-up -------------------------------------------------------------------
    @staticmethod
    def _devices(cluster: Cluster, params: MoEParams) -> tuple[str, str]:
        gpu = cluster.accelerator(params.gpu, "gpu")
        cpu = params.cpu or cluster.host_of(gpu)
        if cpu is None:
            raise ValueError(f"cpu: GPU {gpu} has no host CPU on its node")
        if cluster.device(cpu).spec.kind != "cpu":
            raise ValueError(f"cpu: device {cpu} is not a CPU")
        return gpu, cpu

    def _costs(self, cluster: Cluster, params: MoEParams) -> MoECosts:
        m = self.model
        cpu_spec = cpu_override(
            cluster.device(self.cpu_name).spec, params.cpu_cores, params.cpu_memory_bandwidth_Bps
        )
        expert_bytes = m.expert_bytes(params.expert_bits)
        copy_s = cluster.copy_time_s(self.cpu_name, self.gpu_name, expert_bytes)
        if params.tee == "h100-cc":
            secure = SecureCopy.preset("h100-cc", params.cc_crypto_throughput_Bps)
            copy_s = secure.copy_time_s(copy_s, expert_bytes)
        cpu_model = None
        if params.cpu_model == "kernels":
            raw = cluster.device(self.cpu_name).spec
            kern = cpu_kernels(raw.name, params.cpu_kernels)  # errors name the field
            try:
                kern.dequant_rate(params.cpu_format)
            except ValueError as e:
                raise ValueError(f"cpu_format: {e}") from None
            cpu_model = CpuModel(raw, kern, threads=params.cpu_threads or params.cpu_cores,
                                 sockets=params.cpu_sockets, numa=params.cpu_numa,
                                 socket_bandwidth_Bps=params.cpu_memory_bandwidth_Bps)  # fmt: skip
        costs = MoECosts(
            m,
            cluster.device(self.gpu_name).spec,
            cpu_spec,
            copy_s,
            expert_bits=params.expert_bits,
            dense_bits=params.dense_bits,
            gpu_dtype=params.gpu_dtype,
            cpu_dtype=params.cpu_dtype,
            max_tokens=max(params.prompt_tokens, params.batch, 1),
            gpu_expert_overhead_s=params.gpu_expert_overhead_s,
            cpu_expert_overhead_s=params.cpu_expert_overhead_s,
            cpu_layer_overhead_s=params.cpu_layer_overhead_s,
            cpu_model=cpu_model,
            cpu_format=params.cpu_format,
            cpu_calls_per_expert=params.cpu_calls_per_expert,
            cpu_amx_tokens_per_expert=params.cpu_amx_tokens_per_expert,
            gpu_tp=params.gpu_tp,
            gpu_clocks=params.gpu_clocks,
            tp_allreduce_s=self._tp_allreduce(cluster) if params.gpu_tp > 1 else None,
            handoff_s=self._handoff(cluster)
            if params.cpu_handoff or params.host_callbacks_per_layer or params.sched_split_s
            else None,
        )
        if params.gpu_kernel is not None or params.engine is not None:
            self._lowbit_experts(cluster, params, costs)
        costs.gpu_expert_s[1:] += params.gpu_dequant_s_per_expert
        self._load_stages = (
            self._layer_load(cluster, cpu_spec, cpu_model, expert_bytes)
            if params.experts_after_layer_copies and params.layer_load_stages
            else None
        )
        return costs

    def _lowbit_experts(self, cluster: Cluster, params: MoEParams, costs: MoECosts) -> None:
        """GPU expert times from a low-bit kernel family and an engine's host profile
        (workloads/moe/engines.py), replacing the fitted-GEMM table; the engine's
        per-layer host time floors each layer's attention stage. The prefetch and
        gating host ops count where those policies run (a gate-reuse lookahead; a
        gating threshold above 0, as AdapMoE's code checks it only then)."""
        engine = None
        if params.engine is not None:
            engine = load_engine(params.engine, params.engine_overrides)
        name = params.gpu_kernel or (engine.gpu_kernel if engine is not None else "")
        kernel = lowbit_kernel(name, params.gpu_kernels)
        spec = cluster.device(self.gpu_name).spec
        peak_flops(spec, kernel.peak)  # the device has the rate the family needs
        table = expert_table_s(kernel, engine, spec, self.model, len(costs.gpu_expert_s) - 1,
                               params.expert_bits, params.gpu_tp)  # fmt: skip
        table[1:] += params.gpu_expert_overhead_s
        costs.gpu_expert_s = table
        if engine is not None:
            threshold = getattr(getattr(self.gating, "params", None), "threshold", 0.0)
            costs.layer_host_s, costs.layer_sync_s = engine.layer_host_s(
                self.prefetcher.lookahead_layers > 0, float(threshold or 0.0) > 0.0
            )

    def _layer_load(
        self, cluster: Cluster, cpu_spec: Any, cpu_model: CpuModel | None, expert_bytes: float
    ) -> LayerLoadStages:
        """Per-expert stage times of kt-kernel's layer load (workloads/moe/layer_load.py):
        the CPU write streams the expert's bytes in and out (CPU model, or the CPU's
        roofline), the GPU repack moves REPACK_TRAFFIC_FACTOR times them (GPU memory
        roofline, one launch per kernel), the host issues HOST_OPS_PER_EXPERT ops and
        PERMUTE_SCALES_PER_EXPERT marlin_permute_scales calls."""
        p = self.params
        gpu = cluster.device(self.gpu_name).spec
        write = (
            cpu_model.stream_time_s(2.0 * expert_bytes)
            if cpu_model is not None
            else op_time_s(cpu_spec, 0.0, 2.0 * expert_bytes, p.cpu_dtype)
        )
        repack = (
            op_time_s(gpu, 0.0, REPACK_TRAFFIC_FACTOR * expert_bytes, p.gpu_dtype)
            + (REPACK_KERNELS - 1) * gpu.launch_overhead_s
        )
        host = (
            HOST_OPS_PER_EXPERT * p.layer_load_host_op_s
            + PERMUTE_SCALES_PER_EXPERT * p.layer_load_permute_scales_s
        )
        return LayerLoadStages(host, write, repack)

    def _host_link(self, cluster: Cluster, field: str) -> Any:
        hops = cluster.topology.path(self.cpu_name, self.gpu_name)
        if not hops:
            raise ValueError(f"{field}: no link between {self.cpu_name} and {self.gpu_name}")
        return min((h.spec for h in hops), key=lambda s: s.bandwidth_Bps)

    def _handoff(self, cluster: Cluster) -> Any:
        """Seconds of one layer's hand-off of ``nbytes`` of activations each way: a D2H
        copy (at D2H_RATIO of the H2D rate) and an H2D copy, each the link's per-copy
        latency plus bytes at its effective rate; each through the encrypted bounce
        buffer under ``tee: h100-cc`` (copies only with ``cpu_handoff``); plus the host
        functions that submit and await the CPU experts in the GPU stream."""
        link = self._host_link(cluster, "cpu_handoff")
        p = self.params
        secure = (SecureCopy.preset("h100-cc", p.cc_crypto_throughput_Bps)
                  if p.tee == "h100-cc" else None)  # fmt: skip

        def one(nbytes: float, ratio: float) -> float:
            t = link.latency_s + nbytes / (link.effective_bandwidth_Bps(nbytes) * ratio)
            return t if secure is None else secure.copy_time_s(t, int(nbytes))

        callbacks = (p.host_callbacks_per_layer * p.host_callback_s
                     + SPLITS_PER_CPU_LAYER * p.sched_split_s)  # fmt: skip
        if not p.cpu_handoff:
            return lambda nbytes: callbacks
        return lambda nbytes: one(nbytes, D2H_RATIO) + one(nbytes, 1.0) + callbacks

    def _tp_allreduce(self, cluster: Cluster) -> Any:
        """Ring all-reduce of ``nbytes`` over ``gpu_tp`` GPUs whose only path is the GPU's
        host link (PCIe cards without NVLink, as V61's L20s): 2 (n - 1) steps, each one
        link latency plus ``nbytes / n`` at the link's effective rate for that size.
        Reconstruction: no PCIe all-reduce measurement in the calibration data."""
        n = self.params.gpu_tp
        link = self._host_link(cluster, "gpu_tp")

        def allreduce_s(nbytes: float) -> float:
            chunk = max(nbytes / n, 1.0)
            return 2 * (n - 1) * (link.latency_s + chunk / link.effective_bandwidth_Bps(chunk))

        return allreduce_s

    def _steps(self, params: MoEParams) -> list[tuple[Phase, int, int, int]]:
        w, p = params.warmup_tokens, params.prompt_tokens
        steps: list[tuple[Phase, int, int, int]] = []
        if params.phase != "decode":
            steps.append(("prefill", w, w + p, 0))
        if params.phase != "prefill":
            a = w + p
            b = params.batch
            steps += [("decode", a + b * i, a + b * (i + 1), p + i)
                      for i in range(params.output_tokens)]  # fmt: skip
        return steps

    def profile(self) -> AllocationView:
        """Warm-up profile of each MoE layer on the first ``warmup_tokens`` tokens."""
        m, w = self.model, self.params.warmup_tokens
        top1, acc, freq = [], [], []
        for layer in range(m.moe_layers):
            probs = read_only(self.trace.probs(0, w, layer))
            mask = route(self.gating, self._gating_view(layer, "decode", probs))[0]
            pred = self.trace.predicted(0, w, layer, 1).argmax(axis=1)
            top1.append(float((mask.sum(axis=1) == 1).mean()))
            acc.append(float(mask[np.arange(w), pred].mean()))
            freq.append(mask.mean(axis=0))
        total = round(self.params.cache_fraction * m.moe_layers * m.routed_experts)
        return AllocationView(
            layers=m.moe_layers,
            experts=m.routed_experts,
            top_k=m.top_k,
            total_slots=total,
            top1_ratio=read_only(np.asarray(top1)),
            prefetch_accuracy=read_only(np.asarray(acc)),
            frequency=read_only(np.asarray(freq)),
        )

    def _allocate(self) -> Residency:
        view = self.profile()
        slots = tuple(int(s) for s in self.cache.allocate(view))
        m = self.model
        if len(slots) != m.moe_layers or min(slots, default=0) < 0:
            raise InvariantViolation(f"cache allocation {slots} is not one count per layer")
        if sum(slots) > view.total_slots or max(slots, default=0) > m.routed_experts:
            raise InvariantViolation(
                f"cache allocation {slots} exceeds {view.total_slots} slots "
                f"or {m.routed_experts} per layer"
            )
        res = Residency(slots, m.routed_experts, self.costs.copy_s, self.params.copy_priority)
        res.warm(np.asarray(view.frequency))
        return res

    def _allocate_memory(self) -> None:
        m, p, eb = self.model, self.params, self.costs.expert_bytes
        resident = sum(m.resident_params(layer) for layer in range(m.layers))
        resident += 2 * m.vocab * m.hidden  # embedding and LM head
        tp = p.gpu_tp  # per GPU of the tensor-parallel group: weights split, KV replicated
        needs = {
            "moe.resident": int(resident * p.dense_bits / 8 / tp),
            "moe.kv": m.kv_bytes_per_token * (p.prompt_tokens + p.output_tokens) * p.batch,
            "moe.staging": m.routed_experts * eb // tp,
            "moe.cache": int(self.res.slots.sum()) * eb // tp,
        }
        gpu = self.cluster.memory(self.gpu_name)
        for tag, nbytes in needs.items():
            try:
                gpu.allocate(tag, nbytes)
            except OutOfMemory as e:
                field = "cache_fraction" if tag == "moe.cache" else "model"
                raise ValueError(
                    f"{field}: {tag} needs {nbytes} bytes on {self.gpu_name}, "
                    f"{e.free_bytes} free of {gpu.capacity_bytes}"
                ) from None
        host = self.cluster.memory(self.cpu_name)
        routed = m.moe_layers * m.routed_experts * eb
        if not host.can_fit(routed):
            raise ValueError(f"model: routed experts need {routed} bytes on {self.cpu_name}")
        host.allocate("moe.experts", routed)

    def _gating_view(self, layer: int, phase: Phase, probs: np.ndarray) -> GatingView:
        m = self.model
        sens = m.gate_sensitivity
        return GatingView(
            layer, phase, m.top_k, probs, None if sens is None else sens[layer], m.renormalize
        )

    # ---- the run ------------------------------------------------------------------
    def start(self) -> None:
        """Start the one process that walks the steps layer by layer."""
        self.sim.env.process(self._run())

    def _run(self) -> Any:
        # each layer-step ends with the clock moved to its barrier: by an event only
        # when another event is due by then (Simulation.advance: the same times)
        env = self.sim.env
        advance = self.sim.advance
        m = self.model
        for index, (phase, t0, t1, context) in enumerate(self.steps):
            step_start = env.now
            seqs = self.params.batch if phase == "decode" else 1
            costs = self.costs.step(t1 - t0, context, seqs)
            self._flops = flops = self.costs.step_flops(t1 - t0, context, seqs)
            gpu_meter, s_per_flop = self._gpu_meter, self._gpu_s_per_flop
            experts = 0.0
            for layer in range(m.layers):
                start = env.now
                if layer < m.dense_layers:
                    dense = costs.attention_gpu_s + costs.dense_ffn_gpu_s
                    self.counters.gpu_busy_s += dense
                    if not advance(dense):
                        yield env.timeout(dense)
                    gpu_meter.window(start, env.now, dense,
                                     (flops.attention + flops.dense_ffn) * s_per_flop)  # fmt: skip
                    continue
                moe_layer = layer - m.dense_layers
                end, per_token = self._moe_layer(index, phase, t0, t1, moe_layer, costs)
                experts += per_token
                delay = end - env.now
                if not advance(delay):
                    yield env.timeout(delay)
                g_busy, g_compute, c_busy, c_compute = self._layer_energy
                gpu_meter.window(start, env.now, g_busy, g_compute)
                self._cpu_meter.window(start, env.now, c_busy, c_compute)
            start = env.now
            self.counters.gpu_busy_s += costs.lm_head_s
            if not advance(costs.lm_head_s):
                yield env.timeout(costs.lm_head_s)
            gpu_meter.window(start, env.now, costs.lm_head_s, flops.lm_head * s_per_flop)
            per_layer = experts / m.moe_layers
            self._steps_tbl.append(index, phase, t1 - t0, step_start, env.now, per_layer)
        self.done.succeed()

    def _moe_layer(
        self, index: int, phase: Phase, t0: int, t1: int, layer: int, costs: StepCosts
    ) -> tuple[float, float]:
        """Run one MoE layer; returns (barrier time, mean experts per token)."""
        now = self.sim.now
        if t1 - t0 == 1 and self._select_token is not None:
            if self._routed[0] != t0:
                self._probs(t0, t1, 0)  # the token's probabilities at every layer
                self._route_token(index, phase, t0)
            probs, mask, ids, ids_t, loads = self._token_layers[layer]
        else:
            probs = self._probs(t0, t1, layer)
            mask, ids, ids_t, loads = route(self.gating, self._gating_view(layer, phase, probs))
        self.cache.observe(layer, probs, mask, index)
        router_abs = now + costs.attention_gpu_s
        used = self.res.settle_prefetches(layer, ids_t, router_abs)
        view = placement_view(
            layer, phase, ids, ids_t, loads, self.res, self.costs, costs, router_abs
        )
        placed = self.placement.place(view)
        check_placement(placed, ids_t, layer)
        spans = self.sim.recorder.record_spans
        router, end, gbusy, cbusy, stall, copied, out = timeline(
            view, placed, self.res, now, costs, spans, None,
            self.params.experts_after_layer_copies, self._load_stages,
            self.params.shared_after_cpu_experts,
        )  # fmt: skip
        cached = view.cached
        hits = cached.count(True)
        # cached and landed: ready_s is 0.0 there and for the uncached, > 0 in flight
        self.counters.resident[phase] += view.ready_s.count(0.0) - (len(cached) - hits)
        if copied:
            in_use = [e for e, c in zip(ids_t, cached, strict=True) if c]
            resident = set(in_use)
            moved = tuple([e for e in placed.gpu if e not in resident])
            self.res.request(self.cache, layer, moved, in_use, router, prefetch=False)
        depth = min(self._lookahead, self.model.moe_layers - 1 - layer)
        if depth > 0:
            issue_prefetches(self, phase, t0, t1, layer, depth, router, end, out)
        activated = self.counters.add_layer(
            phase, mask, ids_t, loads, hits, placed, copied, used, gbusy, cbusy, stall
        )
        self._layer_energy = self._layer_work(placed, ids_t, loads, gbusy, cbusy, copied)
        for track, name, s, e in out:
            self.sim.recorder.span(self.tracks[track], name, s, e)
        self._layer_row((
            index, phase, layer, now, router, end, len(ids), hits, len(placed.gpu),
            copied, len(placed.cpu), gbusy, cbusy, stall,
        ))  # fmt: skip
        return end, activated / (t1 - t0)

    def _layer_work(
        self, placed: Any, ids: tuple[int, ...], loads: tuple[int, ...], gpu_busy_s: float,
        cpu_busy_s: float, copied: int,
    ) -> tuple[float, float, float, float]:  # fmt: skip
        """(GPU busy, GPU compute, CPU busy, CPU compute) seconds of a MoE layer-step
        for its devices' meters: the timeline's busy time (with kt-kernel's layer load,
        also each copied expert's GPU repack and CPU write), and the time of its FLOPs
        (attention and shared experts where they ran, each expert's on its tokens) at
        each device's compute roof (a GPU of a tensor-parallel group: its 1/gpu_tp)."""
        flops: StepFlops = self._flops
        per_expert = self.model.expert_flops(1)
        if len(ids) and loads is unit_loads(len(ids)):  # decode: one token per expert
            gpu_pairs, cpu_pairs = len(placed.gpu), len(placed.cpu)
        else:
            by_id = dict(zip(ids, loads, strict=True))
            gpu_pairs = sum(map(by_id.__getitem__, placed.gpu))
            cpu_pairs = sum(map(by_id.__getitem__, placed.cpu))
        dense = flops.attention + flops.shared
        gpu_flops = per_expert * gpu_pairs + (0.0 if placed.dense_on_cpu else dense)
        cpu_flops = per_expert * cpu_pairs + (dense if placed.dense_on_cpu else 0.0)
        stages = self._load_stages
        if stages is not None and copied:
            gpu_busy_s += copied * stages.repack_s
            cpu_busy_s += copied * stages.write_s
        return (gpu_busy_s, gpu_flops * self._gpu_s_per_flop,
                cpu_busy_s, cpu_flops * self._cpu_s_per_flop)  # fmt: skip

    def _route_token(self, index: int, phase: Phase, t: int) -> None:
        """Decode token ``t`` routed at every layer from the policy's decision for the
        token at once (``_probs`` holds its probs): ``_token_layers[l]`` is layer
        ``l``'s (probs row, mask row, then :func:`route`'s ids, ids as a tuple and
        loads). A cache policy with ``observe_token`` is shown the token's routing too."""
        m = self.model
        sens = m.gate_sensitivity
        view = TokenGatingView(
            phase, m.top_k, self._token[1], None if sens is None else tuple(sens),
            m.renormalize,
        )  # fmt: skip
        self._routed = (t, *route_token(self.gating, view))
        if self._observe_token is not None:
            self._observe_token(view.probs, self._routed[1], index)
        _, mask, ids, ids_t = self._routed
        probs = self._token[1]
        self._token_layers = [
            (probs[i : i + 1], mask[i : i + 1], ids[i], ids_t[i], unit_loads(len(ids_t[i])))
            for i in range(len(ids))
        ]

    def _probs(self, t0: int, t1: int, layer: int) -> np.ndarray:
        """Read-only router probabilities of a step at ``layer``; a decode token's are
        computed once for all layers and handed out as row views."""
        if t1 - t0 != 1:
            return read_only(self.trace.probs(t0, t1, layer))
        if self._token[0] != t0:
            b0, b1, block = self._token_block
            if not b0 <= t0 < b1:
                b0, b1 = t0, min(t0 + BLOCK_TOKENS, self.trace.tokens)
                block = read_only(self.trace.token_probs_block(b0, b1))
                self._token_block = (b0, b1, block)
            self._token = (t0, block[t0 - b0])
        return self._token[1][layer : layer + 1]

    # ---- results ------------------------------------------------------------------
    def horizon_s(self) -> float | None:
        """Unknown ahead of time."""
        return None

    def check(self) -> None:
        """Conservation: every activated expert computed exactly once per token and layer."""
        c = self.counters
        if c.activated_pairs != c.computed_pairs:
            raise InvariantViolation(
                f"{c.activated_pairs} token-expert activations, {c.computed_pairs} computed"
            )
        expected = sum(t1 - t0 for _, t0, t1, _ in self.steps) * self.model.moe_layers
        if c.token_layers != expected:
            raise InvariantViolation(f"{c.token_layers} token-layers run of {expected}")

    @classmethod
    def estimate_work(cls, params: MoEParams) -> WorkEstimate | None:
        """Tokens x layers: every token routed (warm-up profile, prompt, and ``batch``
        per decode step) passes every layer. None: a model given by a config file (read
        at build)."""
        if isinstance(params.model, ModelRef):
            return None
        try:
            layers = resolve_model(params.model, Path(".")).layers
        except KeyError:
            return None  # build names the unknown model
        p = params
        tokens = p.warmup_tokens + p.prompt_tokens + p.output_tokens * p.batch
        return WorkEstimate(float(tokens * layers), None, f"{tokens} tokens x {layers} layers")

    def check_partial(self) -> None:
        """At any moment: every activated expert computed once; the token-layers run
        are those of the finished steps plus at most the one in flight."""
        c = self.counters
        if c.activated_pairs != c.computed_pairs:
            raise InvariantViolation(
                f"moe: {c.activated_pairs} token-expert activations, {c.computed_pairs} computed"
            )
        m, done = self.model.moe_layers, len(self._steps_tbl)
        tokens = [t1 - t0 for _, t0, t1, _ in self.steps]
        if done > len(tokens):
            raise InvariantViolation(f"moe: {done} steps recorded of {len(tokens)}")
        finished = sum(tokens[:done]) * m
        current = c.token_layers - finished
        in_flight = tokens[done] * m if done < len(tokens) else 0
        if not 0 <= current <= in_flight:
            raise InvariantViolation(
                f"moe: {c.token_layers} token-layers run; {done} finished steps hold "
                f"{finished} and the step in flight at most {in_flight}"
            )

    def policy_names(self) -> str:
        """``gating/placement/prefetch/cache`` registered names of the chosen policies."""
        names = []
        for point, obj in (
            ("gating", self.gating), ("placement", self.placement),
            ("prefetch", self.prefetcher), ("cache", self.cache),
        ):  # fmt: skip
            # the chosen policy's module is imported: its entries are registered already
            # (full discovery, which imports every module, only if it is not found there)
            reg = policy_registry.point(f"moe.{point}")
            name = next((e.name for e in reg.loaded() if e.obj is type(obj)), None)
            if name is None:
                name = next((e.name for e in reg if e.obj is type(obj)), type(obj).__name__)
            names.append(name)
        return "/".join(names)

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """Run metrics (see :data:`workloads.moe_metrics.METRICS`)."""
        out = summarise(self, end_s)
        c = self.counters
        out.update(moe_trust(self.costs, self.params.prompt_tokens, float(self.model.top_k),
                             c.gpu_busy_s, c.cpu_busy_s))  # fmt: skip
        phases = self._steps_tbl.column("phase") if len(self._steps_tbl) else np.zeros(0)
        decoded = int((phases == "decode").sum()) * self.params.batch
        peers = [f"{self.gpu_name} tp{k}" for k in range(1, self.params.gpu_tp)]
        out.update(metered_columns(self, end_s, (self.gpu_name, self.cpu_name),
                                   {"output_token": decoded}, "output_token",
                                   {self.gpu_name: peers} if peers else None))  # fmt: skip
        return out
