"""The ``workload:`` block of a serving scenario (pydantic models)."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from hetsim.devices.kernels import LaunchModel
from hetsim.devices.precision import Precision
from hetsim.devices.secure_copy import SecureCopy
from hetsim.devices.sustained import DEFAULT_GPU_CLOCKS, GPU_CLOCKS_DESCRIPTION, GpuClocks
from hetsim.simulator.limits import PositiveSeconds, Seconds
from hetsim.workloads.base import WorkloadParams
from hetsim.workloads.models.dense import model_spec
from hetsim.workloads.models.transformer_cost import EngineOverheads
from hetsim.workloads.serving.requests import RequestsConfig, SloClass


class SloConfig(BaseModel):
    """Latency SLOs of every request."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ttft_s: PositiveSeconds = Field(
        default=1.0, description="Time-to-first-token target of every request, in seconds."
    )
    tpot_s: PositiveSeconds = Field(
        default=0.1,
        description="Time-per-output-token target of every request (mean "
        "gap between output tokens), in seconds.",
    )


class ColdStart(BaseModel):
    """What a serving instance added by the autoscaler waits for before it serves
    (scale-out; the initial deployment is loaded before traffic starts): its container
    image is pulled, the model's weights are downloaded from remote storage to the node,
    copied to the GPUs over the topology (as at start), and the engine warms up
    (torch.compile, CUDA-graph capture, KV allocation). Defaults from published
    measurements (all overridable; sweep them):

    * ``image_pull_s`` 60 s: a fresh pull of a 2-5 GB serving runtime image takes
      30-60 s (kunwar.page, "The model cold-start problem", ch. 52); a 2.4 GB inference
      image took 91 s unoptimised (blog.vertexcover.io, "How we made a 13 GB LLM
      container cold-start in 40 seconds"); an image with Llama-3.1-8B's weights baked
      in, 5-6 min (bentoml.com, "Cold-starting LLMs on Kubernetes in under 30 seconds");
    * ``storage_Bps`` 1 GB/s: object storage read in the same cloud region (kunwar.page
      ch. 52: "1 GB/s ... typical for cloud-managed S3"; ServerlessLLM, OSDI'24, takes
      5 GB/s as a fast case: 130 GB in 26 s);
    * ``engine_warmup_s`` 60 s: vLLM server start to ready with torch.compile and
      CUDA-graph capture, about 1 min (user report, r/Vllm, Dec 2025, Gemma-3-12B);
      5-10 s without compilation (kunwar.page ch. 52)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    image_pull_s: Seconds = Field(
        default=60.0,
        description="Seconds to pull the serving container image on a new instance (60 "
        "s from published cold-start measurements, see above).",
    )
    storage_Bps: PositiveFloat = Field(
        default=1e9,
        description="Remote object-storage read rate for the weights download, "
        "in bytes/s (1 GB/s, same-region S3 figure).",
    )
    engine_warmup_s: Seconds = Field(
        default=60.0,
        description="Seconds from weights loaded to serving (torch.compile, "
        "CUDA-graph capture, KV allocation; 60 s, vLLM user report).",
    )

    def download_s(self, weight_bytes: int) -> float:
        """Seconds to fetch ``weight_bytes`` from remote storage."""
        return weight_bytes / self.storage_Bps


class OutputEstimate(BaseModel):
    """The output length a policy sees for a request before it runs (Melange's routing
    by size bucket and its plan): never the request's true length unless ``kind`` is
    ``oracle`` (an upper bound, labelled so). ``prompt-history``: the mean output length
    of the held-out sizing sample's requests in the same prompt-size bucket (a predictor
    from history and the prompt alone); ``lognormal``: true x (1 + bias) exp(sigma Z -
    sigma^2 / 2) per request (a learned predictor with that error; E = true x (1 +
    bias), std of the log error = sigma). ``bias`` and ``noise_sigma`` also apply to
    ``prompt-history``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["prompt-history", "lognormal", "oracle"] = Field(
        default="prompt-history",
        description="Predictor of a request's output length: prompt-history, lognormal "
        "error around the true length, or oracle (the true length).",
    )
    bias: float = Field(
        default=0.0,
        gt=-1.0,
        description="Relative bias of the predicted output length: the "
        "mean prediction is true x (1 + bias).",
    )
    noise_sigma: NonNegativeFloat = Field(
        default=0.0,
        description="Standard deviation of the log error of the "
        "predicted output length (0: no noise).",
    )

    @model_validator(mode="after")
    def _oracle_exact(self) -> OutputEstimate:
        if self.kind == "oracle" and (self.bias != 0.0 or self.noise_sigma != 0.0):
            raise ValueError("output_estimate: kind 'oracle' is the true length (no bias, noise)")
        return self


class LudConfig(BaseModel):
    """Lexical unit decoding (LUD, LREC-COLING'24): ``lookahead`` positions per decode
    step; within a step each next position is accepted with the request's acceptance
    probability after the previous one (truncated geometric, E[A | p] = (1 - p^K) /
    (1 - p)). The acceptance is drawn once per request (task) from a Beta distribution
    with mean ``accept_p`` and concentration ``accept_concentration`` (alpha + beta;
    None: every request has ``accept_p``).

    LUD publishes no acceptance or span-length figures (abstract only, no code), so the
    acceptance comes from published measurements of decoders that, like LUD, need no
    draft model and no extra heads: Spec-Bench's leaderboard (Xia et al., Findings of
    ACL'24; hemingkx/Spec-Bench Leaderboard.md: Vicuna-7B-v1.3, greedy, batch 1) gives
    1.63 (REST), 1.65 (Lookahead decoding) and 1.74 (prompt-lookup decoding) mean
    accepted tokens per step, and 2.32 for Medusa (fine-tuned extra heads, the upper
    end for a fine-tuned self-drafter without a draft model). At K = 4 these are
    p = 0.40 (E[A] = 1.62), 0.45 (1.74) and 0.64 (2.31): the default is the low end,
    0.40; ``scenarios/lud-robustness.yaml`` sweeps 0.40-0.64 (the published range; its
    headline) and 0.1-0.27 below it (stress points, not measurements). The
    concentration 10 (per-request sd 0.15 at p = 0.40) stands for the task-to-task
    spread speculative decoders report (Spec-Bench's per-task speedups differ up to 2x
    for one method) and is a labelled reconstruction, swept (2, 10, 50).
    ``enabled: false`` runs standard decoding (the baseline of that sweep)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool = Field(
        default=True, description="Decode with LUD; false runs standard one-token decode steps."
    )
    lookahead: PositiveInt = Field(
        default=4,
        description="Positions K proposed per LUD decode step (at "
        "most K tokens accepted per step).",
    )
    accept_p: float = Field(0.40, ge=0.0, lt=1.0, description="mean acceptance over requests")
    accept_concentration: PositiveFloat | None = Field(
        10.0, description="Beta alpha + beta of the per-request acceptance (None: fixed)"
    )


class ServingParams(WorkloadParams):
    """The ``workload:`` block of a serving scenario."""

    kind: Literal["serving"] = Field(default="serving", description="Workload kind (serving).")
    model: str = Field(default="llama-3-8b", description="Model served, by catalogue name.")
    dtype: Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"] = Field(
        "fp16",
        description="weight format; activations follow it (fp8: FP8 GEMMs; int8: W8A8; "
        "int4: weight-only W4A16, activations fp16) unless activation_dtype is set",
    )
    activation_dtype: Literal["fp32", "bf16", "fp16", "fp8", "int8"] | None = Field(
        default=None,
        description="Activation format when it differs from the weights' (null: follow dtype).",
    )
    kv_dtype: Literal["fp32", "bf16", "fp16", "fp8", "int8"] | None = Field(
        None, description="KV-cache format (default: the activations')"
    )
    weight_group_size: PositiveInt = Field(
        128, description="weights per fp16 scale/zero pair of weight-only integer formats"
    )
    weight_dequant: Literal["fused", "materialize"] = Field(
        "fused",
        description="where weight-only weights (int4/int8 with fp16 activations) are "
        "dequantised: fused into the GEMM (AWQ/GPTQ/Marlin kernels), or materialize: a "
        "kernel of its own writes an activation-format copy that a plain GEMM then reads "
        "(DeepSpeed-Inference's int8 path: quantized_gemm -> launch_dequantize + cuBLAS)",
    )
    cuda_graphs: bool = Field(
        True, description="decode iterations replay a CUDA graph (no per-kernel launch cost)"
    )
    cpu_launch_s: float = Field(
        20e-6,
        ge=0.0,
        le=1e-3,
        description="host time per kernel launch without CUDA graphs: about 20 us from a "
        "PyTorch elementwise op's call to its kernel's start on a V100 (NVIDIA Nsight "
        "Systems user guide's example trace); engines that launch from C/C++ (llama.cpp, "
        "ExLlamaV2's extension) pay a C launch, 4.9 us measured (JuliaGPU/CUDAdrv.jl PR #15)",
    )
    framework_overhead_s: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="engine time per iteration before its kernels run (scheduling, input "
        "preparation, sampling bookkeeping). 0 by default (an engine that overlaps its loop "
        "with the GPU); vLLM's pre-0.6 synchronous loop left the GPU idle about 4 ms per "
        "decode step in vLLM's own trace (vllm-project/vllm issue #6854): set it for such an "
        "engine, sweep it (disaggregation-robustness.yaml does: 0 and 4 ms)",
    )
    tee: Literal["none", "h100-cc"] = Field(
        "none",
        description="GPU confidential computing: every iteration's two "
        "host<->GPU transfers (input ids in, sampled tokens out) go through the encrypted "
        "bounce buffer of devices.secure_copy and pay its per-transfer toll",
    )
    cc_crypto_throughput_Bps: PositiveFloat | None = Field(
        None, description="CPU AES-GCM rate of the bounce buffer (default: the h100-cc preset)"
    )
    framework_per_seq_s: float = Field(
        0.0, ge=0.0, le=0.1, description="engine time per iteration per sequence in the batch"
    )
    fused_elementwise: bool = Field(
        False,
        description="norms, rotary, activation and adds fused into other kernels "
        "(TensorRT-LLM, LMDeploy TurboMind); reconstruction, see transformer_cost",
    )
    gpu_clocks: GpuClocks = Field(default=DEFAULT_GPU_CLOCKS, description=GPU_CLOCKS_DESCRIPTION)
    fp8_attention: bool | None = Field(
        None,
        description="attention math in FP8 under FP8 activations (FlashAttention-3 FP8, "
        "TensorRT-LLM FP8 context FMHA); null: when the KV cache is FP8 too (TensorRT-LLM's "
        "rule with paged context FMHA); false: 16-bit Q, O and math; "
        "workloads/models/transformer_cost.py",
    )
    tp_allreduce: Literal["nccl", "trtllm", "vllm"] = Field(
        "nccl",
        description="how the TP all-reduces run: nccl (the fabric's fitted NCCL algorithms; "
        "DeepSpeed-Inference, LMDeploy TurboMind, HF) or the engine's own IPC kernel: trtllm "
        "(TensorRT-LLM, NIM) or vllm (vLLM, SGLang <= 0.4); devices/custom_allreduce.py",
    )
    gemv_memory: Literal["shipped", "lender"] = Field(
        "shipped",
        description="GEMM memory curve of GPUs that devices/kernels.yaml gives a GEMV fit "
        "(gemv_memory_borrow: rtx-3090-ti, rtx-4090 -> ga102-gddr6x, fitted on published "
        "RTX 3090/3090 Ti GEMV kernel times): shipped, or lender (the A100 operator-profile "
        "curve they borrowed before). The 4090's own DRAM-bound GEMV rate is unmeasured: "
        "swept in scenarios/gemv-memory-robustness.yaml",
    )
    split_projections: bool = Field(
        False,
        description="Q, K, V and the MLP's gate and up as separate GEMMs, each quantising "
        "its own input under 8-bit activations (llama.cpp's graph), not fused QKV and "
        "gate+up GEMMs",
    )
    extra_kernels_per_layer: NonNegativeInt = Field(
        0,
        description="kernels per layer the engine's graph runs beyond the cost model's "
        "(workloads/models/transformer_cost.py), each at the elementwise class's minimum "
        "kernel time and one launch; llama.cpp's early-2024 graph: 9",
    )
    requests: RequestsConfig = Field(
        default=RequestsConfig(),
        description="How requests are generated: count, arrivals and lengths.",
    )
    slo: SloConfig = Field(
        default=SloConfig(),
        description="Latency SLOs of every request (unless slo_classes assigns its class's).",
    )
    deployment_rate_per_s: PositiveFloat | Literal["peak"] | None = Field(
        None,
        description="request rate the deployment is sized for (None: requests.rate_per_s; "
        "'peak': requests.rate_per_s x requests.surge.factor, a static deployment "
        "provisioned for a known surge)",
    )
    tp_options: list[PositiveInt] = Field(
        default_factory=lambda: [1, 2, 4, 8],
        description="Tensor-parallel degrees the deployment search may choose per instance.",
    )
    power_cap_options_w: list[PositiveFloat | None] = Field(
        default_factory=lambda: [None],  # type: ignore[arg-type]
        min_length=1,
        description="board power limits in W each (GPU type, TP) configuration is offered "
        "to the deployment policy at (None: the GPU's TDP; a cap at or above a type's TDP "
        "is its TDP): an instance runs its GPUs at its config's cap, through the clock and "
        "power model (devices/power.py). [None]: no capped configs",
    )
    tp_fabrics: dict[str, str] = Field(
        default_factory=dict,
        description="GPU type -> collective fabric of its TP all-reduces (a fabric of "
        "devices/links.yaml, pcie or link), overriding the device catalogue's "
        "scaleup_fabric (devices/catalogue.yaml); empty: every type's catalogue fabric",
    )
    mem_fraction: float = Field(
        0.9,
        gt=0.0,
        le=1.0,
        description="Share of each GPU's memory the engine may use; the KV cache "
        "gets this share of tp x memory minus the weights.",
    )
    block_tokens: PositiveInt = Field(
        default=16, description="Tokens per KV-cache block (paged attention's block size)."
    )
    max_batch: PositiveInt = Field(
        default=256,
        description="Largest batch the goodput estimator sizes an instance "
        "for (batching policies set the runtime limit).",
    )
    sizing_attainment: float = Field(
        0.9,
        ge=0.5,
        lt=1.0,
        description="SLO attainment deployments are sized for: a config's goodput is the "
        "predicted rate at which this share of requests meets both targets.",
    )
    sizing_headroom: float = Field(
        0.1,
        ge=0.0,
        description="Rate margin for the estimator's error: every predicted "
        "goodput is divided by 1 + sizing_headroom.",
    )
    estimate_sample: PositiveInt = Field(
        default=256,
        description="Number of held-out requests the sizing sample draws (sizing_source holdout).",
    )
    sizing_source: Literal["holdout", "window"] = Field(
        "holdout",
        description="the requests deployment sizing and the autoscaler's configs are "
        "estimated from, never the measured ones: 'holdout', estimate_sample requests drawn "
        "apart (own random streams; trace lengths at random rows); 'window', the requests "
        "arriving before sizing_window_s, their lengths and (without deployment_rate_per_s) "
        "their rate (needs warmup_s >= sizing_window_s, so that they are not measured)",
    )
    sizing_window_s: PositiveSeconds = Field(
        default=60.0,
        description="Seconds of arrivals at the start of the run that form "
        "the sizing sample (sizing_source window).",
    )
    output_estimate: OutputEstimate = Field(
        default_factory=OutputEstimate,
        description="The output length a policy sees for a request before "
        "it runs (never the true one unless oracle).",
    )
    cold_start: ColdStart = Field(
        default=ColdStart(),
        description="What an instance the autoscaler adds waits for before it "
        "serves (image pull, weights download, engine warm-up).",
    )
    sizing_estimator: Literal["analytic", "simulate"] = Field(
        "analytic",
        description="the one goodput estimator every deployment policy of the run sizes "
        "from: analytic (the attainment predictor, workloads/serving/estimate.py) or "
        "simulate (each policy's shortlisted units bisected on short seeded "
        "sub-simulations, workloads/serving/subsim.py: Cauchy's combos, DistServe's "
        "per-phase configs, colocated and Melange configs); no policy may size another way "
        "in the same run",
    )
    price_preset: str = Field(
        "aws-ondemand",
        description="$/GPU-hour preset: one provider's list in devices/prices.yaml "
        "(aws-ondemand, aws-capacity-blocks-2024, lambda, runpod, melange2024), catalogue "
        "(each GPU's catalogue default: mixes providers) or none",
    )
    tokens: Literal["output", "total"] = Field(
        default="output",
        description="Tokens counted by the token and cost-per-token metrics: "
        "output tokens only, or prompt plus output.",
    )
    lud: LudConfig | None = Field(
        default=None,
        description="Lexical unit decoding (LUD) of several tokens per "
        "decode step (null: standard decoding).",
    )
    truncate_to_context: bool = Field(
        default=True,
        description="Shorten prompts so that prompt + output fits the "
        "model's context window (at least 1 prompt token).",
    )
    gpus: list[str] | None = Field(
        default=None,
        description="Cluster device names the deployment may use "
        "(null: every GPU and NPU of the cluster).",
    )
    load_weights: bool = Field(
        default=True,
        description="Copy each instance's weights from its node's CPU to its GPUs over the "
        "topology before it serves (false: weights already resident).",
    )
    slo_classes: list[SloClass] = Field(
        default_factory=list,
        description="Request classes with their own TTFT/TPOT targets "
        "(empty: every request has the slo targets).",
    )
    report_window_s: PositiveSeconds = Field(
        default=60.0, description="Width of the windows table's arrival-time windows, in seconds."
    )
    warmup_s: Seconds = Field(
        0.0,
        description="steady-state cut: requests arriving before this simulated time are "
        "left out of the latency, throughput and SLO metrics (not of cost, which counts "
        "every provisioned hour)",
    )
    prefix_cache: bool = Field(
        default=False,
        description="Automatic prefix caching on colocated and prefill "
        "instances (needs requests with prefix-block hashes).",
    )

    @model_validator(mode="after")
    def _known_model(self) -> ServingParams:
        model_spec(self.model)
        self.precision()  # a bad combination of formats is a field error
        return self

    def precision(self) -> Precision:
        """The formats of weights, activations and KV cache this workload runs."""
        base = Precision.uniform(self.dtype, None, self.weight_group_size)
        act = self.activation_dtype or base.activations
        kv = self.kv_dtype or act
        return Precision(base.weights, act, kv, self.weight_group_size, self.weight_dequant)

    def overheads(self) -> EngineOverheads:
        """The engine's launch and per-iteration host costs."""
        toll = 0.0
        if self.tee == "h100-cc":  # two small encrypted transfers per iteration (4 KiB each)
            toll = 2 * SecureCopy.preset("h100-cc", self.cc_crypto_throughput_Bps).copy_time_s(
                0.0, 4096
            )
        return EngineOverheads(
            LaunchModel(self.cpu_launch_s, self.cuda_graphs), self.framework_overhead_s + toll,
            self.framework_per_seq_s, self.fused_elementwise, self.gpu_clocks,
            self.fp8_attention, self.tp_allreduce, gemv_memory=self.gemv_memory,
            split_projections=self.split_projections,
            extra_kernels_per_layer=self.extra_kernels_per_layer,
        )  # fmt: skip

    @model_validator(mode="after")
    def _peak_rate(self) -> ServingParams:
        if self.deployment_rate_per_s == "peak" and (
            self.requests.surge is None or self.requests.rate_per_s is None
        ):
            raise ValueError(
                "deployment_rate_per_s: 'peak' needs requests.rate_per_s and requests.surge"
            )
        return self

    @model_validator(mode="after")
    def _fp8_attention(self) -> ServingParams:
        if self.fp8_attention and self.precision().activations != "fp8":
            raise ValueError(
                "fp8_attention: true needs FP8 activations (dtype or activation_dtype fp8)"
            )
        return self

    def sized_rate_per_s(self) -> float | None:
        """The rate ``deployment_rate_per_s`` names ('peak' resolved), or None (unset)."""
        rate = self.deployment_rate_per_s
        if rate == "peak":
            assert self.requests.surge is not None and self.requests.rate_per_s is not None
            return self.requests.rate_per_s * self.requests.surge.factor
        return rate

    @model_validator(mode="after")
    def _sizing_window(self) -> ServingParams:
        if self.sizing_source == "window" and self.warmup_s < self.sizing_window_s:
            raise ValueError(
                f"warmup_s: must be >= sizing_window_s ({self.sizing_window_s:g}) with "
                "sizing_source 'window' (the sizing window is not measured)"
            )
        return self

    @model_validator(mode="after")
    def _classes(self) -> ServingParams:
        names = [c.name for c in self.slo_classes]
        if len(set(names)) != len(names):
            raise ValueError(f"slo_classes: names must be unique, got {names}")
        shares = [c.share for c in self.slo_classes if c.share is not None]
        trace = self.requests.trace
        if trace is not None and trace.class_column is not None:
            if not self.slo_classes or shares:
                raise ValueError(
                    "slo_classes: with a trace class column, give classes without share"
                )
        elif self.slo_classes and (
            len(shares) != len(self.slo_classes) or abs(sum(shares) - 1.0) > 1e-6
        ):
            raise ValueError(f"slo_classes: shares must sum to 1, got {sum(shares):g}")
        return self
