"""The ``workload:`` block of a serving scenario (pydantic models)."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from hetsim.devices.kernels import LaunchModel
from hetsim.devices.precision import Precision
from hetsim.devices.secure_copy import SecureCopy
from hetsim.workloads.base import WorkloadParams
from hetsim.workloads.models.dense import model_spec
from hetsim.workloads.models.transformer_cost import EngineOverheads
from hetsim.workloads.serving.requests import RequestsConfig, SloClass

DEFAULT_FABRICS = {
    "a100-80gb": "a100-nvswitch",
    "a100-40gb": "a100-nvswitch",
    "a800": "a800-nvswitch",
    "h100-sxm": "h100-nvswitch",
    "h800": "h800-nvlink",
}


class SloConfig(BaseModel):
    """Latency SLOs of every request."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ttft_s: PositiveFloat = 1.0
    tpot_s: PositiveFloat = 0.1


class LudConfig(BaseModel):
    """Lexical unit decoding (LUD, LREC-COLING'24): ``lookahead`` positions per decode
    step, each accepted with probability ``accept_p`` after the previous one. p = 0.27
    and K = 4 give E[A] = 1.36 (``../shared/papers/serving.md`` §7.3, a calibration to
    the abstract's 1.33x, not a measurement)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    lookahead: PositiveInt = 4
    accept_p: float = Field(0.27, ge=0.0, lt=1.0)


class ServingParams(WorkloadParams):
    """The ``workload:`` block of a serving scenario."""

    kind: Literal["serving"] = "serving"
    model: str = "llama-3-8b"
    dtype: Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"] = Field(
        "fp16",
        description="weight format; activations follow it (fp8: FP8 GEMMs; int8: W8A8; "
        "int4: weight-only W4A16, activations fp16) unless activation_dtype is set",
    )
    activation_dtype: Literal["fp32", "bf16", "fp16", "fp8", "int8"] | None = None
    kv_dtype: Literal["fp32", "bf16", "fp16", "fp8", "int8"] | None = Field(
        None, description="KV-cache format (default: the activations')"
    )
    weight_group_size: PositiveInt = Field(
        128, description="weights per fp16 scale/zero pair of weight-only integer formats"
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
        "Systems user guide's example trace)",
    )
    framework_overhead_s: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="engine time per iteration before its kernels run (scheduling, input "
        "preparation, sampling bookkeeping). No measurement is in the calibration data: "
        "0 by default; sweep it (the fidelity report shows its effect)",
    )
    tee: Literal["none", "h100-cc"] = Field(
        "none",
        description="GPU confidential computing (issue 17): every iteration's two "
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
    requests: RequestsConfig = RequestsConfig()
    slo: SloConfig = SloConfig()
    deployment_rate_per_s: PositiveFloat | None = None
    tp_options: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4, 8])
    tp_fabrics: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_FABRICS))
    mem_fraction: float = Field(0.9, gt=0.0, le=1.0)
    block_tokens: PositiveInt = 16
    max_batch: PositiveInt = 256
    sizing_attainment: float = Field(0.9, ge=0.5, lt=1.0)
    sizing_headroom: float = Field(0.1, ge=0.0)
    estimate_sample: PositiveInt = 256
    goodput: Literal["estimate", "simulate"] = "estimate"
    price_preset: str = "catalogue"
    tokens: Literal["output", "total"] = "output"
    lud: LudConfig | None = None
    truncate_to_context: bool = True
    gpus: list[str] | None = None
    load_weights: bool = True
    slo_classes: list[SloClass] = Field(default_factory=list)
    report_window_s: PositiveFloat = 60.0
    warmup_s: NonNegativeFloat = Field(
        0.0,
        description="steady-state cut: requests arriving before this simulated time are "
        "left out of the latency, throughput and SLO metrics (not of cost, which counts "
        "every provisioned hour)",
    )
    prefix_cache: bool = False  # automatic prefix caching on colocated/prefill instances

    @model_validator(mode="after")
    def _known_model(self) -> ServingParams:
        model_spec(self.model)
        self.precision()  # a bad combination of formats is a field error
        return self

    def precision(self) -> Precision:
        """The formats of weights, activations and KV cache this workload runs."""
        base = Precision.uniform(self.dtype, None, self.weight_group_size)
        act = self.activation_dtype or base.activations
        return Precision(base.weights, act, self.kv_dtype or act, self.weight_group_size)

    def overheads(self) -> EngineOverheads:
        """The engine's launch and per-iteration host costs."""
        toll = 0.0
        if self.tee == "h100-cc":  # two small encrypted transfers per iteration (4 KiB each)
            toll = 2 * SecureCopy.preset("h100-cc", self.cc_crypto_throughput_Bps).copy_time_s(
                0.0, 4096
            )
        return EngineOverheads(
            LaunchModel(self.cpu_launch_s, self.cuda_graphs), self.framework_overhead_s + toll,
            self.framework_per_seq_s, self.fused_elementwise,
        )  # fmt: skip

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
