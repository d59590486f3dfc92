"""Arrivals and service demands of the generic queueing workload, sampled up front.

All requests are drawn with numpy before the run starts (one vectorised call per
stream), so the event loop only indexes arrays. Arrivals come from a Poisson process or
a trace file; each request's demand is FLOPs and bytes, turned into seconds on a given
device by the device's roofline.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt

from hetsim.devices.precision import Precision
from hetsim.devices.spec import DeviceSpec
from hetsim.devices.sustained import DEFAULT_GPU_CLOCKS, GPU_CLOCKS_DESCRIPTION, GpuClocks
from hetsim.simulator.limits import MAX_SCALE
from hetsim.workloads.models.dense import model_spec
from hetsim.workloads.models.transformer_cost import (
    EngineOverheads,
    TransformerCost,
    prefill_batch,
)
from hetsim.workloads.paths import resolve_path

if TYPE_CHECKING:
    import pandas as pd


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PoissonArrivals(_Strict):
    """Poisson arrivals: exponential inter-arrival times with mean 1 / rate_per_s."""

    kind: Literal["poisson"] = Field(default="poisson", description="Arrival kind (poisson).")
    rate_per_s: PositiveFloat = Field(description="Mean arrival rate, in requests per second.")


class TraceArrivals(_Strict):
    """Arrival times (seconds) read from a CSV or Parquet file's ``time_column``.

    Optional ``flops_column``/``bytes_column`` give per-request demand and override
    the ``demand:`` block. ``time_scale`` multiplies every time (0.5 = twice the rate).
    """

    kind: Literal["trace"] = Field(default="trace", description="Arrival kind (trace).")
    path: str = Field(
        description="CSV or Parquet file of arrivals (relative to the scenario's folder)."
    )
    time_column: str = Field(
        default="arrival_s", description="Column of arrival times, in seconds."
    )
    flops_column: str | None = Field(
        default=None,
        description="Column of per-request FLOPs, overriding the demand block (null: none).",
    )
    bytes_column: str | None = Field(
        default=None,
        description="Column of per-request bytes moved, overriding the demand block (null: none).",
    )
    time_scale: Annotated[float, Field(gt=0, le=MAX_SCALE)] = Field(
        default=1.0, description="Multiplier of every arrival time (0.5: twice the rate)."
    )


Arrivals = Annotated[PoissonArrivals | TraceArrivals, Field(discriminator="kind")]


class ExponentialDemand(_Strict):
    """Demand ``x * (mean_flops, mean_bytes)`` with ``x ~ Exp(1)``: exponential service
    time on a device whose efficiency does not depend on size."""

    kind: Literal["exponential"] = Field(
        default="exponential", description="Demand kind (exponential)."
    )
    mean_flops: float = Field(ge=0, description="Mean FLOPs of a request.")
    mean_bytes: float = Field(
        default=0.0,
        ge=0,
        description="Mean bytes a request moves (scaled by the same Exp(1) draw as its FLOPs).",
    )
    dtype: str = Field(
        default="fp16", description="Number format the device roofline prices the FLOPs in."
    )


class DeterministicDemand(_Strict):
    """Every request needs the same FLOPs and bytes."""

    kind: Literal["deterministic"] = Field(
        default="deterministic", description="Demand kind (deterministic)."
    )
    flops: float = Field(ge=0, description="FLOPs of every request.")
    bytes: float = Field(default=0.0, ge=0, description="Bytes every request moves.")
    dtype: str = Field(
        default="fp16", description="Number format the device roofline prices the FLOPs in."
    )


class LLMPrefillDemand(_Strict):
    """A prefill of a dense LLM over ``prompt_tokens`` (an int or a uniform [min, max]).

    FLOPs and bytes come from the model spec (:meth:`ModelSpec.prefill_flops`).
    """

    kind: Literal["llm-prefill"] = Field(
        default="llm-prefill", description="Demand kind (llm-prefill)."
    )
    model: str = Field(description="Dense model, by catalogue name.")
    prompt_tokens: PositiveInt | tuple[PositiveInt, PositiveInt] = Field(
        default=512,
        description="Prompt length in tokens, or [min, max] drawn uniformly per request.",
    )
    dtype: Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"] = Field(
        default="fp16", description="Number format of the weights and compute."
    )
    load_weights: bool = Field(
        default=True,
        description="Allocate and copy the weights from the host to every server before it serves.",
    )
    gpu_clocks: GpuClocks = Field(default=DEFAULT_GPU_CLOCKS, description=GPU_CLOCKS_DESCRIPTION)


Demand = Annotated[
    ExponentialDemand | DeterministicDemand | LLMPrefillDemand, Field(discriminator="kind")
]


@dataclass(frozen=True)
class RequestBatch:
    """Every request of a run: arrival times and demands, as numpy arrays."""

    arrival_s: np.ndarray
    flops: np.ndarray
    nbytes: np.ndarray
    dtype: str
    #: prompt tokens of each request (LLM demand: priced kernel by kernel), else None
    tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.arrival_s)


def sample_arrivals(spec: PoissonArrivals, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` Poisson arrival times starting after t=0."""
    return np.cumsum(rng.exponential(1.0 / spec.rate_per_s, size=n))


def read_trace(spec: TraceArrivals, base_dir: Path) -> pd.DataFrame:
    """The trace's rows sorted by time (raises OSError/KeyError with the column name)."""
    path = resolve_path(spec.path, base_dir).resolve()
    import pandas as pd  # only trace arrivals need it (start-up)

    frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    for col in (spec.time_column, spec.flops_column, spec.bytes_column):
        if col is not None and col not in frame.columns:
            raise KeyError(f"column {col!r} not in {spec.path} (has {list(frame.columns)})")
    return frame.sort_values(spec.time_column, kind="stable").reset_index(drop=True)


def sample_demand(
    spec: ExponentialDemand | DeterministicDemand | LLMPrefillDemand,
    n: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Per-request (flops, bytes, prompt tokens or None) arrays of length ``n``."""
    if isinstance(spec, ExponentialDemand):
        x = rng.exponential(1.0, size=n)
        return x * spec.mean_flops, x * spec.mean_bytes, None
    if isinstance(spec, DeterministicDemand):
        return np.full(n, spec.flops), np.full(n, spec.bytes), None
    model = model_spec(spec.model)
    if isinstance(spec.prompt_tokens, tuple):
        lo, hi = spec.prompt_tokens
        tokens = rng.integers(lo, hi + 1, size=n)
    else:
        tokens = np.full(n, spec.prompt_tokens)
    flops = np.array([model.prefill_flops(int(t)) for t in tokens])
    nbytes = np.array([model.prefill_bytes(int(t), spec.dtype) for t in tokens])
    return flops, nbytes, tokens.astype(np.int64)


def build_requests(
    arrivals: PoissonArrivals | TraceArrivals,
    demand: ExponentialDemand | DeterministicDemand | LLMPrefillDemand,
    num_requests: int,
    sim_rng: dict[str, np.random.Generator],
    base_dir: Path,
) -> RequestBatch:
    """Sample (or read) every request of the run."""
    if isinstance(arrivals, PoissonArrivals):
        times = sample_arrivals(arrivals, num_requests, sim_rng["arrivals"])
        flops, nbytes, tokens = sample_demand(demand, num_requests, sim_rng["demand"])
    else:
        frame = read_trace(arrivals, base_dir).head(num_requests)
        times = frame[arrivals.time_column].to_numpy(dtype=float) * arrivals.time_scale
        flops, nbytes, tokens = sample_demand(demand, len(frame), sim_rng["demand"])
        if arrivals.flops_column:
            flops = frame[arrivals.flops_column].to_numpy(dtype=float)
            tokens = None  # the trace's FLOPs, priced by the roofline
        if arrivals.bytes_column:
            nbytes = frame[arrivals.bytes_column].to_numpy(dtype=float)
    if len(times) and times[0] < 0:
        raise ValueError("arrival times must be >= 0")
    return RequestBatch(times, flops, nbytes, demand.dtype, tokens)


def prefill_cost(spec: LLMPrefillDemand, device: DeviceSpec) -> TransformerCost:
    """The kernel-level cost model of ``spec``'s prompts on ``device`` (weights and
    activations in ``spec.dtype``, CUDA graphs, no engine overhead, ``spec.gpu_clocks``)."""
    return TransformerCost(
        model_spec(spec.model),
        device,
        precision=Precision.uniform(spec.dtype),
        overheads=EngineOverheads(gpu_clocks=spec.gpu_clocks),
    )


def prefill_times_s(spec: LLMPrefillDemand, device: DeviceSpec, tokens: np.ndarray) -> list[float]:
    """Seconds of each prompt's prefill alone on ``device``, kernel by kernel
    (:class:`~hetsim.workloads.models.transformer_cost.TransformerCost`, weights and
    activations in ``spec.dtype``, CUDA graphs, no engine overhead, compute roofs at the
    clock regime ``spec.gpu_clocks``)."""
    cost = prefill_cost(spec, device)
    unique = {int(t): cost.iteration_s(prefill_batch(int(t))) for t in np.unique(tokens)}
    return [unique[int(t)] for t in tokens]
