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

    dtype: str = Field(
        default="bf16", description="Number format of the dense compute on the GPU roofline."
    )
    batch_per_worker: PositiveInt = Field(
        default=2048, description="Samples per step of one worker (assumption)."
    )
    flops_per_sample: PositiveFloat = Field(
        default=3.0e9,
        description="Forward + backward FLOPs per sample (assumption: 3 x ~1 GFLOP dense towers).",
    )
    hbm_bytes_per_sample: NonNegativeFloat = Field(
        default=4.0e5,
        description="HBM bytes read and written per sample for embedding rows (assumption).",
    )
    ps_bytes_per_sample: NonNegativeFloat = Field(
        default=2.0e5,
        description="Bytes exchanged with the parameter servers per sample "
        "(embedding rows and gradients; assumption).",
    )
    worker_link: str = Field(
        default="eth-100g",
        description="Catalogue link type of each worker's NIC to the parameter servers.",
    )
    ps_link: str = Field(
        default="eth-200g",
        description="Catalogue link type of each parameter-server shard; "
        "shards x its bandwidth caps the job's rate.",
    )
    ps_shards: PositiveInt = Field(
        default=8,
        description="Parameter-server shards whose summed link "
        "bandwidth bounds the job's throughput.",
    )
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

    mode: Literal["stop", "partial"] = Field(
        default="stop",
        description="stop: checkpoint-restart, the job stops for the whole "
        "rescale; partial: only the rebalance pauses it.",
    )
    checkpoint_s: Seconds = Field(
        default=30.0,
        description="Seconds to checkpoint before a stop-the-world rescale (assumption).",
    )
    pod_start_s: Seconds = Field(
        default=60.0, description="Seconds for a new worker pod to start (assumption)."
    )
    rebalance_s: Seconds = Field(
        default=15.0,
        description="Seconds of consumer-group rebalance and state sync per rescale (assumption).",
    )

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

    gpus: list[str] | None = Field(
        default=None,
        description="Cluster device names of the GPU pool, all of one type "
        "(null: every GPU, NPU and server device).",
    )
    background_fraction: float = Field(
        default=0.0, ge=0.0, le=1.0, description="Mean share of the pool held by other tenants."
    )
    background_amplitude: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Relative daily swing of the other tenants' share (cosine, 0: constant).",
    )
    background_peak_hour: float = Field(
        default=20.0,
        ge=0.0,
        lt=24.0,
        description="Hour of the day (0-24) at which the other tenants hold the most GPUs.",
    )


class ElasticParams(WorkloadParams):
    """The ``workload:`` block of an elastic scenario."""

    kind: Literal["elastic"] = Field(default="elastic", description="Workload kind (elastic).")
    duration_s: PositiveSeconds = Field(
        default=7 * DAY_S, description="Simulated length of the run, in seconds (default 7 days)."
    )
    step_s: PositiveSeconds = Field(
        default=15.0,
        description="Control step, in seconds: rates are constant within a "
        "step and the scaler decides once per step.",
    )
    traffic: Traffic = Field(
        description="The sample stream's arrival rate: synthetic (diurnal with bursts) or a trace."
    )
    partitions: PositiveInt = Field(
        default=128, description="Stream partitions spread over the workers."
    )
    partition_skew: NonNegativeFloat = Field(
        default=0.5,
        description="Zipf exponent of the partitions' shares of the "
        "stream ((p + 1)^-skew; 0: equal).",
    )
    job: JobModel = Field(
        default=JobModel(),
        description="Cost inputs of one worker of the synchronous "
        "parameter-server training job (assumptions).",
    )
    rescale: Rescale = Field(
        default=Rescale(), description="Downtime of one rescale (stop-the-world or partial)."
    )
    pool: Pool = Field(
        default=Pool(), description="The shared GPU pool and the share other tenants hold."
    )
    initial_replicas: PositiveInt = Field(default=8, description="Workers at the start of the run.")
    min_replicas: PositiveInt = Field(
        default=1, description="Fewest workers the scaler may choose."
    )
    max_replicas: PositiveInt | None = Field(
        default=None, description="Most workers the scaler may choose (null: the pool size)."
    )
    slo_freshness_s: PositiveSeconds = Field(
        default=300.0,
        description="Freshness target, in seconds: a sample consumed later "
        "than this after it arrived violates the SLO.",
    )
    record_timeline: bool = Field(
        default=True, description="Write the per-step timeline and rescales tables."
    )

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
