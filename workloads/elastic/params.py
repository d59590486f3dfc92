"""The ``workload:`` block of an elastic online-training scenario (pydantic models).

Defaults are assumptions, each written next to its field; Kale's production job is
not public (``elastic-observability.md`` section 0), so every constant is a field.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from hetsim.simulator.limits import MAX_STEPS, PositiveSeconds, Seconds
from hetsim.workloads.base import WorkloadParams
from hetsim.workloads.elastic.traffic import DAY_S, Traffic


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class JobModel(_Strict):
    """Cost inputs of one worker of the synchronous PS training job (assumptions).

    A recommendation model: dense towers of ~0.5 GFLOP forward per sample (3x for
    forward + backward), embedding rows read and updated in HBM, and embedding rows and
    gradients exchanged with the parameter servers over the worker's NIC.
    """

    dtype: str = "bf16"
    batch_per_worker: PositiveInt = 2048
    flops_per_sample: PositiveFloat = 3.0e9
    hbm_bytes_per_sample: NonNegativeFloat = 4.0e5
    ps_bytes_per_sample: NonNegativeFloat = 2.0e5
    worker_link: str = "eth-100g"
    ps_link: str = "eth-200g"
    ps_shards: PositiveInt = 8
    kappa: NonNegativeFloat = Field(
        default=0.02, lt=1.0, description="PS contention: mu(n) = n mu_1 / (1 + kappa (n-1))"
    )
    efficiency_vs_estimate: PositiveFloat = Field(
        default=1.0, description="true throughput / cost-model estimate (model error)"
    )
    throughput_noise_cv: NonNegativeFloat = Field(
        default=0.03, description="per-step log-normal jitter of the true throughput"
    )


class Rescale(_Strict):
    """Downtime of one rescale.

    ``mode: stop`` (stop the world, checkpoint-restart): the job stops consuming for the
    whole rescale; scale-up pays checkpoint + pod start + consumer-group rebalance,
    scale-down checkpoint + rebalance (notes: "tens of seconds to a few minutes").
    ``mode: partial`` (elastic frameworks that add or drop workers without a full stop):
    new workers start while the old ones keep consuming; the job pauses only for the
    rebalance (group membership change and state sync, no checkpoint), up or down; the
    new workers join at the first control step after ``pod_start_s``.
    """

    mode: Literal["stop", "partial"] = "stop"
    checkpoint_s: Seconds = 30.0
    pod_start_s: Seconds = 60.0
    rebalance_s: Seconds = 15.0

    @property
    def up_s(self) -> float:
        """Pause of a scale-up."""
        if self.mode == "partial":
            return self.rebalance_s
        return self.checkpoint_s + self.pod_start_s + self.rebalance_s

    @property
    def down_s(self) -> float:
        """Pause of a scale-down."""
        if self.mode == "partial":
            return self.rebalance_s
        return self.checkpoint_s + self.rebalance_s


class Pool(_Strict):
    """The shared GPU pool: the cluster's GPUs (or ``gpus``), part held by other tenants.

    Other tenants hold ``round(size * fraction * (1 + amplitude * cos(...)))`` GPUs,
    peaking at ``peak_hour`` (in phase with the stream by default: shortage at peak).
    """

    gpus: list[str] | None = None
    background_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    background_amplitude: float = Field(default=0.0, ge=0.0, le=1.0)
    background_peak_hour: float = Field(default=20.0, ge=0.0, lt=24.0)


class ElasticParams(WorkloadParams):
    """The ``workload:`` block of an elastic scenario."""

    kind: Literal["elastic"] = "elastic"
    duration_s: PositiveSeconds = 7 * DAY_S
    step_s: PositiveSeconds = 15.0
    traffic: Traffic
    partitions: PositiveInt = 128
    partition_skew: NonNegativeFloat = 0.5
    job: JobModel = JobModel()
    rescale: Rescale = Rescale()
    pool: Pool = Pool()
    initial_replicas: PositiveInt = 8
    min_replicas: PositiveInt = 1
    max_replicas: PositiveInt | None = None
    slo_freshness_s: PositiveSeconds = 300.0
    record_timeline: bool = True

    @model_validator(mode="after")
    def _replica_bounds(self) -> Self:
        top = self.max_replicas if self.max_replicas is not None else self.initial_replicas
        if not self.min_replicas <= self.initial_replicas <= top:
            raise ValueError("need min_replicas <= initial_replicas <= max_replicas")
        if self.duration_s < self.step_s:
            raise ValueError("duration_s must be at least one step_s")
        if self.duration_s / self.step_s > MAX_STEPS:
            raise ValueError(f"duration_s / step_s exceeds the limit of {MAX_STEPS} steps")
        return self
