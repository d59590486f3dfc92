"""Per-rank, per-operator timings of a data-parallel training job, a window at a time.

One iteration of rank r runs four operators in order: ``dataload`` (host input
pipeline), ``forward`` and ``backward`` (GPU compute: with ``architecture``, a dense catalogue
model's kernels as the training-parallel step prices them; otherwise ``2 P T`` FLOPs on
the device roofline),
then enters the gradient all-reduce. The collective starts when its last rank arrives
(``max_r entry_r``) and, being a ring, runs at the pace of its slowest link: its
duration is ``max_r send_r``, where ``send_r`` is the time rank r's own link needs for
its share of the all-reduce (the collective model's time on the fabric, times noise and
any link degradation). What a per-rank profiler sees (``link_telemetry``): each rank's
compute ops, its ``wait`` at the collective and, as its ``send`` operator, the
all-reduce's duration, the same on every rank (``collective``, default: in a ring every
step waits for the slowest link, so a slow link slows every rank's all-reduce alike and
no rank's own link time is visible); ``own`` exposes each rank's own link time instead
(an idealised per-link counter, the earlier model). Every rank leaves the collective
together, so all ranks share one iteration time.

Every operator time is ``base x rank_factor x noise x node_noise x fault_factor``:
mean-one lognormal noise (``noise_sigma``), per-node noise shared by a node's ranks in an
iteration (``node_sigma``, compute operators: one host, one power and thermal envelope),
a persistent per-rank factor (``rank_sigma``: workers differ even when healthy, as in
Alibaba PAI 2020's job 2), and
rare transient hiccups of the host (``spike_prob`` per rank-iteration, adding
``spike_s`` seconds to dataload: garbage collection, a page-cache miss, a logging flush).
These noise constants are reconstruction (exposed as parameters): PAI 2020's per-iteration
coefficient of variation across 10 workers has median 0.094 on shared GPUs. Measured on
its stable job 2 (``../shared/data/alibaba-pai-2020/job_2_norm.csv``, 10 workers x 254
iterations, 20% GPU shares; std of logs): persistent per-worker offset 0.091, the
per-iteration component shared by all workers 0.0063, the rest 0.0157. The defaults are
the dedicated-GPU end (``rank_sigma`` 0.005, ``noise_sigma`` 0.03) with the shared
component as ``node_sigma``; ``scenarios/kair-robustness.yaml`` sweeps ``rank_sigma`` up
to PAI's 0.091.

Everything is a numpy matrix of ranks x iterations: no process per rank or operator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, model_validator

from hetsim.devices.catalogue import fabric_spec, link_spec
from hetsim.devices.collectives import AlgorithmFit, CollectiveFabric, collective_time_s
from hetsim.devices.compute import ComputeDevice
from hetsim.devices.sustained import DEFAULT_GPU_CLOCKS, GPU_CLOCKS_DESCRIPTION, GpuClocks
from hetsim.simulator.limits import Seconds

OPS = ("dataload", "forward", "backward", "send")
COMPUTE_OPS = ("dataload", "forward", "backward")
FAULT_OPS: dict[str, tuple[str, ...]] = {
    "gpu-slowdown": ("forward", "backward"),
    "host-cpu-contention": ("dataload", "forward"),  # launches and input both need the CPU
    "dataloader-stall": ("dataload",),
    "link-degradation": ("send",),
}
"""Which operators each fail-slow kind multiplies (reconstruction of the causal chain)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TrainingModel(_Strict):
    """Work of one data-parallel rank per iteration: a dense catalogue transformer priced
    kernel by kernel (``architecture``), or ``6 x P x T`` FLOPs on the device roofline."""

    params: PositiveFloat = Field(
        default=1.3e9,
        description="Model parameters P (replaced by the architecture's when one is named).",
    )
    tokens_per_rank: int = Field(
        default=16_384, ge=1, description="Tokens T per rank per iteration."
    )
    dtype: str = Field(default="bf16", description="Number format of forward and backward compute.")
    grad_bytes_per_param: PositiveFloat = Field(
        default=2.0, description="Bytes per gradient value all-reduced (2: bf16)."
    )
    dataload_s: Seconds = Field(
        default=0.02, ge=0, description="Seconds of the host input pipeline per iteration."
    )
    architecture: str | None = Field(
        default=None,
        description="dense catalogue model (workloads/models/dense.yaml) whose layers price "
        "forward and backward kernel by kernel as training-parallel does (TP 1); its "
        "parameter count replaces params. null: 2 P T FLOPs per pass on the device roofline",
    )
    seq_len: int = Field(default=2048, ge=1, le=1 << 20, description="tokens per sequence")
    gpu_clocks: GpuClocks = Field(default=DEFAULT_GPU_CLOCKS, description=GPU_CLOCKS_DESCRIPTION)

    @model_validator(mode="after")
    def _clocks_need_kernels(self) -> TrainingModel:
        if self.architecture is None and self.gpu_clocks != DEFAULT_GPU_CLOCKS:
            raise ValueError(f"gpu_clocks: {self.gpu_clocks} needs an architecture (the "
                             "device roofline has no clock regime)")  # fmt: skip
        return self

    def param_count(self) -> float:
        """P: the architecture's parameters when one is named, else ``params``."""
        if self.architecture is None:
            return self.params
        from hetsim.workloads.training.step import dense_model

        return float(dense_model(self.architecture).params)

    def forward_flops(self) -> float:
        """2 P T (one multiply-add per parameter per token)."""
        return 2.0 * self.param_count() * self.tokens_per_rank

    def grad_bytes(self) -> int:
        """Bytes all-reduced per iteration."""
        return int(self.param_count() * self.grad_bytes_per_param)


class CommConfig(_Strict):
    """The gradient all-reduce: a collective fabric by name, or an alpha-beta link."""

    fabric: str | None = Field(
        default=None,
        description="Collective fabric from the catalogue that prices the "
        "gradient all-reduce (give this or link).",
    )
    link: str | None = Field(
        default=None,
        description="Catalogue link priced as an alpha-beta fabric (latency, "
        "bandwidth) for the all-reduce (give this or fabric).",
    )
    algorithm: str = Field(
        default="ring",
        description="All-reduce algorithm of the collective model (ring; a fabric may fit others).",
    )

    @model_validator(mode="after")
    def _one(self) -> CommConfig:
        if (self.fabric is None) == (self.link is None):
            raise ValueError("give exactly one of fabric or link")
        try:
            self.fabric_spec()
        except KeyError as e:  # UnknownName lists the valid names
            raise ValueError(str(e)) from None
        return self

    def fabric_spec(self) -> CollectiveFabric:
        """The fabric (a link becomes a fabric with alpha = latency, beta = its bandwidth)."""
        if self.fabric is not None:
            return fabric_spec(self.fabric)
        assert self.link is not None
        spec = link_spec(self.link)
        fit = AlgorithmFit(spec.latency_s, spec.efficiency, basis=f"link {spec.name}")
        return CollectiveFabric(spec.name, spec.display_name, spec.bandwidth_Bps, {"ring": fit})


class NoiseModel(_Strict):
    """Run-to-run variation of operator times (reconstruction; see module doc)."""

    noise_sigma: float = Field(
        default=0.03,
        ge=0,
        description="Log standard deviation of the mean-one lognormal noise on "
        "every operator time, per rank and iteration.",
    )
    rank_sigma: float = Field(
        default=0.005,
        ge=0,
        description="Log standard deviation of each rank's "
        "persistent factor on its operator times.",
    )
    node_sigma: float = Field(
        default=0.0063,
        ge=0,
        description="per-node, per-iteration factor on compute ops "
        "(PAI 2020 job 2's shared per-iteration component)",
    )
    spike_prob: float = Field(
        default=1e-4,
        ge=0,
        le=1,
        description="Chance per rank-iteration of a host hiccup "
        "adding spike_s seconds to dataload.",
    )
    spike_s: tuple[Seconds, Seconds] = Field(
        default=(0.5, 3.0),
        description="Range in seconds of one host hiccup added to dataload, drawn uniformly.",
    )

    @model_validator(mode="after")
    def _check(self) -> NoiseModel:
        lo, hi = self.spike_s
        if not 0.0 <= lo <= hi < math.inf:
            raise ValueError("spike_s must be (low, high) with 0 <= low <= high")
        return self


@dataclass(frozen=True)
class BaseTimes:
    """Fault-free, noise-free operator times of one rank and the collective, in seconds."""

    dataload_s: float
    forward_s: float
    backward_s: float
    send_s: float

    def iteration_s(self) -> float:
        """Nominal iteration: input, forward, backward, then the all-reduce."""
        return self.dataload_s + self.forward_s + self.backward_s + self.send_s

    def vector(self) -> np.ndarray:
        """Times in :data:`OPS` order."""
        return np.array([self.dataload_s, self.forward_s, self.backward_s, self.send_s])


def base_times(model: TrainingModel, comm: CommConfig, gpu: ComputeDevice, ranks: int) -> BaseTimes:
    """Nominal times: compute from the kernel classes (``architecture``) or the device
    roofline, the all-reduce from the collective model."""
    fabric = comm.fabric_spec()
    if model.architecture is not None:
        fwd_s, bwd_s = _kernel_passes_s(model, gpu, fabric)
    else:
        fwd = model.forward_flops()
        weight_bytes = model.params * 2.0  # weights read once per pass
        fwd_s = gpu.op_time_s(fwd, weight_bytes, model.dtype)
        bwd_s = gpu.op_time_s(2.0 * fwd, 2.0 * weight_bytes, model.dtype)
    send_s = collective_time_s("all_reduce", ranks, model.grad_bytes(), fabric, comm.algorithm)
    return BaseTimes(model.dataload_s, fwd_s, bwd_s, send_s)


def _kernel_passes_s(
    model: TrainingModel, gpu: ComputeDevice, fabric: CollectiveFabric
) -> tuple[float, float]:
    """Forward and backward seconds of one rank's tokens, kernel by kernel (the
    training-parallel step model at TP 1: layers, embedding and LM head)."""
    from hetsim.devices.precision import Format, Precision
    from hetsim.workloads.training.parallel_comm import Fabrics, Layout
    from hetsim.workloads.training.step import dense_model
    from hetsim.workloads.training.step_cost import MicroBatchCost, StepKnobs

    dm = dense_model(model.architecture or "")
    micro = max(1, model.tokens_per_rank // model.seq_len)
    fmt = cast(Format, model.dtype)
    prec = Precision(fmt, fmt, fmt)
    knobs = StepKnobs(micro_batch=micro, seq_len=model.seq_len, sequence_parallel=False,
                      gpu_clocks=model.gpu_clocks)  # fmt: skip
    mb = MicroBatchCost(gpu.spec, dm, Layout(), Fabrics(fabric, fabric, fabric.bandwidth_Bps),
                        knobs, prec)  # fmt: skip
    scale = model.tokens_per_rank / (micro * model.seq_len)  # a partial last sequence
    emb, head = mb.embedding, mb.head
    fwd = dm.layers * mb.layer_fwd_s() + emb[0] + head[0]
    bwd = dm.layers * mb.layer_bwd_s() + emb[1] + head[1]
    return fwd * scale, bwd * scale


@dataclass(frozen=True)
class Window:
    """Telemetry of ``W`` iterations on ``N`` ranks (arrays are read-only).

    ``op_s[o, r, i]``: operator o of rank r in iteration i; ``entry_s[r, i]``: when rank
    r reached the all-reduce, from the iteration start; ``comm_s[i]``: collective
    duration; ``iteration_s[i]``: iteration time (shared by every rank).
    """

    op_s: np.ndarray
    entry_s: np.ndarray
    comm_s: np.ndarray
    iteration_s: np.ndarray

    @property
    def wait_s(self) -> np.ndarray:
        """Time each rank waited at the collective for the last arrival."""
        return self.entry_s.max(axis=0, keepdims=True) - self.entry_s


def _lognormal(rng: np.random.Generator, sigma: float, shape: tuple[int, ...]) -> np.ndarray:
    """Mean-one lognormal factors ``exp(sigma Z - sigma^2 / 2)``."""
    if sigma == 0:
        return np.ones(shape)
    return np.exp(sigma * rng.standard_normal(shape) - 0.5 * sigma * sigma)


def rank_factors(noise: NoiseModel, ranks: int, rng: np.random.Generator) -> np.ndarray:
    """Persistent per-rank speed factors, one row per operator (``len(OPS) x N``)."""
    return _lognormal(rng, noise.rank_sigma, (len(OPS), ranks))


def simulate_window(
    base: BaseTimes,
    noise: NoiseModel,
    rank_factor: np.ndarray,
    fault_factor: np.ndarray,
    rng: np.random.Generator,
    gpus_per_node: int = 1,
    link_telemetry: str = "collective",
) -> Window:
    """One window of telemetry; ``fault_factor[o, r, i]`` multiplies operator times.

    Vectorised over ranks and iterations; the collective of iteration i starts at
    ``max_r entry[r, i]`` and lasts ``max_r send[r, i]``; with ``link_telemetry =
    "collective"`` every rank's ``send`` shows that duration.
    """
    n_ops, ranks, iters = fault_factor.shape
    op_s = base.vector()[:, None, None] * rank_factor[:, :, None] * fault_factor
    op_s *= _lognormal(rng, noise.noise_sigma, (n_ops, ranks, iters))
    if noise.node_sigma > 0:
        nodes = -(-ranks // gpus_per_node)
        node = _lognormal(rng, noise.node_sigma, (nodes, iters))
        op_s[:3] *= np.repeat(node, gpus_per_node, axis=0)[:ranks][None]
    if noise.spike_prob > 0:
        spikes = rng.random((ranks, iters)) < noise.spike_prob
        lo, hi = noise.spike_s
        op_s[0][spikes] += rng.uniform(lo, hi, int(spikes.sum()))
    entry_s = op_s[0] + op_s[1] + op_s[2]
    comm_s = op_s[3].max(axis=0)
    if link_telemetry == "collective":
        op_s[3] = comm_s[None, :]
    iteration_s = entry_s.max(axis=0) + comm_s
    for arr in (op_s, entry_s, comm_s, iteration_s):
        arr.flags.writeable = False
    return Window(op_s, entry_s, comm_s, iteration_s)


def iteration_slowdown(base: BaseTimes, active: list[tuple[str, float]]) -> float:
    """Iteration time with fail-slow faults ``(kind, factor)`` on distinct ranks, over nominal.

    Noise-free form of :func:`simulate_window`: the collective starts at the latest
    entry and runs at the slowest link, so ``(max entry + max send) / nominal``.
    """
    ops = dict(zip(OPS, base.vector(), strict=True))
    entry = sum(ops[o] for o in COMPUTE_OPS)
    send = ops["send"]
    worst_entry, worst_send = entry, send
    for kind, factor in active:
        hit = FAULT_OPS[kind]
        e = sum(ops[o] * (factor if o in hit else 1.0) for o in COMPUTE_OPS)
        worst_entry = max(worst_entry, e)
        worst_send = max(worst_send, send * (factor if "send" in hit else 1.0))
    return (worst_entry + worst_send) / (entry + send)
