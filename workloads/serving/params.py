"""The ``workload:`` block of a serving scenario (pydantic models)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from hetsim.workloads.base import WorkloadParams
from hetsim.workloads.models.dense import model_spec
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
    dtype: Literal["fp16", "bf16"] = "fp16"
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
    prefix_cache: bool = False  # automatic prefix caching on colocated/prefill instances

    @model_validator(mode="after")
    def _known_model(self) -> ServingParams:
        model_spec(self.model)
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
