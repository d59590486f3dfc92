"""The ``workload:`` block of a ``cluster`` scenario (DL jobs on a heterogeneous GPU cluster).

Every constant that is not read from data is a parameter here, with its source named in
the field description. Paths are relative to the scenario file.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt

from hetsim.simulator.limits import (
    MAX_GPUS_PER_NODE,
    MAX_JOBS,
    MAX_LOG_SIGMA,
    MAX_NODES,
    MAX_SCALE,
    PositiveDays,
    PositiveSeconds,
    Seconds,
)
from hetsim.workloads.base import WorkloadParams
from hetsim.workloads.paths import DATA_DIR as SHIPPED_DATA
from hetsim.workloads.paths import shipped

DATA_DIR = SHIPPED_DATA / "cluster"

#: Muri model -> Gavel job type used for its per-GPU-type speed (assumption: nearest model
#: family in Gavel's measured set; Gavel measured neither VGG, ShuffleNet, BERT, GPT-2 nor DQN).
DEFAULT_MODEL_MAP = {
    "vgg16": "ResNet-50 (batch size 64)",
    "vgg19": "ResNet-50 (batch size 64)",
    "resnet18": "ResNet-18 (batch size 32)",
    "shufflenet_v2_x1_0": "ResNet-18 (batch size 32)",
    "bert": "Transformer (batch size 128)",
    "gpt2": "LM (batch size 20)",
    "a2c": "A3C",
    "dqn": "A3C",
}

#: GPUs-per-job weights of Muri's trace1 (Philly-derived; ../shared/data/muri-traces/SOURCE.md)
PHILLY_GPU_COUNTS = {1: 536, 2: 5, 4: 423, 8: 465, 16: 40, 32: 25}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: Node capacities used only with ``contention.enabled`` (see docs/cluster.md).
CPU_CORES_DOC = "CPU cores per node (default 92: Muri's testbed node, 8 V100 + 92 CPUs)"
NIC_DOC = (
    "inter-node NIC bytes/s per node (default 12.5e9 = one 100 Gb/s InfiniBand EDR port, a "
    "common V100-server figure; ASSUMPTION: Muri does not state its testbed's NIC)"
)
STORAGE_DOC = (
    "storage read bytes/s per node (default 2e9; ASSUMPTION, no source: a local NVMe SSD "
    "or a fast shared file system)"
)


class NodeCapacity(_Strict):
    """Per-node CPU, storage and NIC capacities (only read with node contention on)."""

    cpu_cores: PositiveFloat = Field(92.0, description=CPU_CORES_DOC)
    storage_Bps: PositiveFloat = Field(2e9, description=STORAGE_DOC)
    nic_Bps: PositiveFloat = Field(12.5e9, description=NIC_DOC)


class NodeGroup(NodeCapacity):
    """``nodes`` identical machines, each with ``gpus_per_node`` GPUs of one type, and
    CPU cores, storage and NIC bandwidth (used by node contention)."""

    gpu_type: str = Field(description="GPU type of these nodes, by catalogue name.")
    nodes: int = Field(gt=0, le=MAX_NODES, description="Identical nodes in the group.")
    gpus_per_node: int = Field(default=8, gt=0, le=MAX_GPUS_PER_NODE, description="GPUs per node.")


class AlibabaInventory(NodeCapacity):
    """The GPU node list of Alibaba's cluster-trace-gpu-v2023 (one node per row); the
    capacities apply to every node."""

    kind: Literal["alibaba2023"] = Field(
        default="alibaba2023", description="Inventory kind (alibaba2023)."
    )
    trace_dir: str = Field(description="folder holding openb_node_list_gpu_node.csv")
    file: str = Field(
        default="openb_node_list_gpu_node.csv", description="Node-list CSV inside trace_dir."
    )


class SyntheticJobs(_Strict):
    """Poisson arrivals; GPU counts, models and lognormal solo durations as documented."""

    kind: Literal["synthetic"] = Field(
        default="synthetic", description="Job source kind (synthetic)."
    )
    num_jobs: int = Field(default=200, gt=0, le=MAX_JOBS, description="Jobs generated.")
    arrival_rate_per_s: PositiveFloat = Field(
        default=0.01, description="Poisson arrival rate of jobs, per second."
    )
    gpu_counts: list[tuple[PositiveInt, PositiveFloat]] = Field(
        default_factory=lambda: [(c, float(w)) for c, w in sorted(PHILLY_GPU_COUNTS.items())],
        min_length=1,
        description="[GPUs per job, weight] pairs (default: Muri trace1, Philly-derived)",
    )
    models: list[str] = Field(
        default_factory=lambda: sorted(DEFAULT_MODEL_MAP),
        min_length=1,
        description="Models drawn uniformly for the jobs (names of the speed table's model_map).",
    )
    duration_median_s: PositiveSeconds = Field(
        default=3600.0,
        description="Median solo duration of a job on the reference type, in seconds (lognormal).",
    )
    duration_sigma: float = Field(
        1.0, ge=0, le=MAX_LOG_SIGMA, description="sigma of ln(solo duration)"
    )


class MuriTraceJobs(_Strict):
    """A job trace in Muri's CSV format (Philly-derived durations, per-stage times)."""

    kind: Literal["muri_trace"] = Field(
        default="muri_trace", description="Job source kind (muri_trace)."
    )
    path: str = Field(
        description="Trace CSV in Muri's format (times in ms; relative to the scenario's folder)."
    )
    max_jobs: int | None = Field(
        default=None, gt=0, le=MAX_JOBS, description="Read at most this many jobs (null: all)."
    )
    submit_at_zero: bool = Field(False, description="all jobs at t=0, as Muri's *_pr traces")
    skip_bad_rows: bool = Field(
        default=False,
        description="Skip and count bad rows (a warning says how "
        "many) instead of stopping at the first.",
    )


class AlibabaJobs(_Strict):
    """GPU tasks of Alibaba's cluster-trace-gpu-v2023 (lifetimes, GPU counts, type limits)."""

    kind: Literal["alibaba2023"] = Field(
        default="alibaba2023", description="Job source kind (alibaba2023)."
    )
    trace_dir: str = Field(description="Folder holding the cluster-trace-gpu-v2023 files.")
    file: str = Field(
        default="openb_pod_list_default.csv", description="Pod-list CSV inside trace_dir."
    )
    max_jobs: int | None = Field(
        default=None, gt=0, le=MAX_JOBS, description="Read at most this many jobs (null: all)."
    )
    skip_bad_rows: bool = Field(
        default=False,
        description="Skip and count bad rows (a warning says how "
        "many) instead of stopping at the first.",
    )


class PhillyJobs(_Strict):
    """Poisson arrivals with solo durations resampled from Philly's job run times (the
    per-job log with submit times and GPU counts is not available; see docs/cluster.md)."""

    kind: Literal["philly"] = Field(default="philly", description="Job source kind (philly).")
    runtime_path: str = Field(
        shipped("cluster/philly_runtime_sample.csv"),
        description="one-column 'runtime' CSV (s); default: every 200th row of Philly's "
        "sorted runtime file (416 rows, CC-BY 4.0)",
    )
    num_jobs: int = Field(default=200, gt=0, le=MAX_JOBS, description="Jobs generated.")
    arrival_rate_per_s: PositiveFloat = Field(
        default=0.01, description="Poisson arrival rate of jobs, per second."
    )
    min_runtime_s: PositiveSeconds = Field(1.0, description="shorter runs (0 s) are not drawn")
    gpu_counts: list[tuple[PositiveInt, PositiveFloat]] = Field(
        default_factory=lambda: [(c, float(w)) for c, w in sorted(PHILLY_GPU_COUNTS.items())],
        min_length=1,
        description="[GPUs per job, weight] pairs (default: Muri trace1, Philly-derived)",
    )
    models: list[str] = Field(
        default_factory=lambda: sorted(DEFAULT_MODEL_MAP),
        min_length=1,
        description="Models drawn uniformly for the jobs (names of the speed table's model_map).",
    )
    skip_bad_rows: bool = Field(
        default=False,
        description="Skip and count bad rows of the runtime file instead of stopping at the first.",
    )


class HeliosJobs(_Strict):
    """Poisson arrivals, lognormal durations and a two-point GPU-count mix matched to one
    Helios cluster's GPU-job summary (mean/median run time and GPUs; reconstruction)."""

    kind: Literal["helios"] = Field(default="helios", description="Job source kind (helios).")
    summary_path: str = Field(
        default=shipped("cluster/helios_cluster_summary.csv"),
        description="Helios per-cluster GPU-job summary CSV (shipped).",
    )
    cluster: str = Field("Earth", description="Venus, Earth, Saturn, Uranus (or total)")
    period_days: PositiveDays = Field(
        183.0, description="trace span the job count covers (Apr-Sep 2020, SC'21 paper)"
    )
    rate_scale: PositiveFloat = Field(1.0, description="multiplies the cluster's job rate")
    num_jobs: int = Field(default=200, gt=0, le=MAX_JOBS, description="Jobs generated.")
    models: list[str] = Field(
        default_factory=lambda: sorted(DEFAULT_MODEL_MAP),
        min_length=1,
        description="Models drawn uniformly for the jobs (names of the speed table's model_map).",
    )
    skip_bad_rows: bool = Field(
        default=False,
        description="Skip and count bad rows of the summary file instead of stopping at the first.",
    )


Jobs = Annotated[
    SyntheticJobs | MuriTraceJobs | AlibabaJobs | PhillyJobs | HeliosJobs,
    Field(discriminator="kind"),
]


class SpeedTable(_Strict):
    """Per-model, per-GPU-type throughput (Gavel's measured isolated steps/s, MIT)."""

    path: str = Field(
        shipped("cluster/gavel_throughputs_sf1.csv"),
        description="CSV of isolated throughput per model and GPU type "
        "(default: Gavel's measured table, shipped).",
    )
    reference_type: str = Field("v100", description="type the jobs' stage times refer to")
    model_map: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_MODEL_MAP),
        description="Job model name -> the table's model name; jobs of models "
        "not listed run at the same speed on every type.",
    )
    type_speeds: dict[str, PositiveFloat] = Field(
        default_factory=dict,
        description="GPU types absent from the table -> speed relative to the reference "
        "type, applied to every model (an assumption the scenario must state)",
    )
    pairs_path: str | None = Field(
        None,
        description="Gavel's measured co-location pairs (workloads.cluster.pairs; shipped: "
        "pkg:cluster/gavel_pairs_sf1.csv): a group of two 1-GPU jobs with a measured pair on "
        "its type runs each member at its own measured rate (ground truth); None: every "
        "group follows execution.interference_model",
    )


class Deadlines(_Strict):
    """D = submit + lambda x solo duration on the reference type, lambda ~ U[low, high]."""

    fraction: float = Field(0.0, ge=0.0, le=1.0, description="share of jobs with a deadline")
    factor_low: PositiveFloat = Field(
        default=0.5,
        description="Lower bound of lambda, the deadline over the job's "
        "solo duration on the reference type.",
    )
    factor_high: PositiveFloat = Field(
        default=1.5,
        description="Upper bound of lambda, the deadline over the job's "
        "solo duration on the reference type.",
    )


class Execution(_Strict):
    """How groups run: interference, group size, restarts and scheduling rounds."""

    interference: list[PositiveFloat] = Field(
        default_factory=lambda: [1.015, 1.33 / 1.015, 1.5 / 1.015, 1.37 / 1.015],
        description="group model: multiplier of the solo (1 job) and packed cycle time (2-4 "
        "jobs); Muri's code (jobs.py itertime_overhead_list): 1.015, 1.33/1.015, 1.5/1.015, "
        "1.37/1.015",
    )
    interference_model: Literal["group", "stage"] = Field(
        "group",
        description="ground truth of packed groups: 'group' (Muri's per-size factors) or "
        "'stage' (per-stage beta inflation, Cuckoo's stage-grained model; reconstruction)",
    )
    stage_beta: tuple[NonNegativeFloat, NonNegativeFloat, NonNegativeFloat] = Field(
        (0.65, 0.65, 0.65),
        description="stage model: beta_r per stage (data, gpu, net). ASSUMPTION (no published "
        "values): one value for all stages, chosen so the mean 2-job penalty over the 36 pairs "
        "of Muri's 8 models on 8 GPUs (1.30) matches Muri's measured 1.33/1.015 = 1.31",
    )
    data_slots: Literal[1, 2] = Field(
        2,
        description="phases of the interleaving cycle taken by the data stage: 2 = storage IO "
        "and CPU (merged in Muri's traces), as Muri's simulator with 4 resources; 1 = a plain "
        "3-stage cycle",
    )
    solo_time: Literal["measured", "stage_sum"] = Field(
        "measured",
        description="a lone job's iteration time: the measured iteration_time of its (model, "
        "GPUs) profile (Muri's simulator) or the sum of its stage times",
    )
    max_group_size: int = Field(4, ge=1, le=4, description="at most the cycle's phases")
    restart_s: Seconds = Field(
        10.0, description="checkpoint-restart delay on (re)start or regroup (Muri: 4-46 s)"
    )
    round_s: PositiveSeconds | None = Field(
        300.0, description="period of scheduling rounds (None: only on arrivals/completions)"
    )
    preemption: bool = Field(False, description="rounds may preempt running groups")
    unpack: bool = Field(
        True,
        description="run members of packed groups alone when the queue is empty and GPUs are "
        "free (Muri re-plans all jobs at each event and packs only while demand exceeds the "
        "cluster)",
    )
    cross_gpu_packing: bool = Field(
        False,
        description="ablation (not Muri: it packs only jobs with the same GPU count): let "
        "packing merge jobs with different GPU counts; the group holds the largest count, "
        "a smaller member runs on a subset of those GPUs",
    )
    compute_bound_fraction: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="share of a job's GPU-stage time (the per-iteration time its kernels "
        "run) in compute-bound kernels: they draw the power limit and a power cap "
        "(cluster.accelerator_power_cap_w) stretches them by 1 / its clock ratio "
        "(devices/power.py); the rest draws the memory-bound power and keeps its time "
        "(workloads/cluster/power_cap.py). Default 1.0: the domain's energy reading of a "
        "running kernel (at the power limit: Seren/Kalos A100 p90-95 power at the 400 W "
        "limit, Hu et al., NSDI'24) and the reading under which dvfs_exponent was derived "
        "from a whole training step (Factryze: an H100 at 600 W loses 10-15%); an upper "
        "bound on a cap's slowdown. Swept 0.25-1 in cluster-power-cap-robustness.yaml",
    )
    window: PositiveInt = Field(64, description="queued jobs considered per pass")
    pack_window: PositiveInt = Field(
        16, description="queued jobs and open running groups offered to packing per pass"
    )


#: Published parameter counts (gradient bytes = count x grad_bytes_per_param): torchvision's
#: model docs (vgg16 138.4M, vgg19 143.7M, resnet18 11.7M, shufflenet_v2_x1_0 2.3M),
#: BERT-base 110M (Devlin et al. 2019; ASSUMPTION that Muri's "bert" is base), GPT-2 small
#: 124M (Hugging Face gpt2), a2c/dqn: the Nature-DQN Atari network (Mnih et al. 2015; conv
#: 32x8x8, 64x4x4, 64x3x3, fc 512, 18 actions: 1,693,362; ASSUMPTION for a2c's trunk).
PARAM_COUNTS = {
    "vgg16": 138.4e6,
    "vgg19": 143.7e6,
    "resnet18": 11.7e6,
    "shufflenet_v2_x1_0": 2.3e6,
    "bert": 110e6,
    "gpt2": 124e6,
    "a2c": 1.69e6,
    "dqn": 1.69e6,
}

#: Storage bytes read per GPU per iteration. ASSUMPTION (no source for Muri's batch sizes):
#: image models 32 ImageNet images per GPU x 110 KB (ImageNet-1k train: about 140 GB over
#: 1.28M images); bert/gpt2 32 sequences x 512 tokens x 4 B; a2c/dqn read nothing (their
#: data stage is environment simulation on the CPU).
STORAGE_BYTES_PER_GPU_ITER = {
    "vgg16": 3.52e6,
    "vgg19": 3.52e6,
    "resnet18": 3.52e6,
    "shufflenet_v2_x1_0": 3.52e6,
    "bert": 65536.0,
    "gpt2": 65536.0,
    "a2c": 0.0,
    "dqn": 0.0,
}


class Contention(_Strict):
    """Node contention between groups sharing a node (off by default). Mean-field rule in
    workloads/cluster/contention.py; every demand constant below is exposed."""

    enabled: bool = Field(
        default=False,
        description="Model CPU, storage and network contention between groups sharing a node.",
    )
    cpu_cores_per_gpu: NonNegativeFloat = Field(
        11.5,
        description="cores a job uses per GPU during its data stage. ASSUMPTION: Muri's "
        "profiles were measured at the testbed's per-GPU share, 92 cores / 8 GPUs",
    )
    cpu_cores_per_gpu_by_model: dict[str, NonNegativeFloat] = Field(
        default_factory=dict, description="per-model overrides of cpu_cores_per_gpu"
    )
    storage_bytes_per_gpu_iter: dict[str, NonNegativeFloat] = Field(
        default_factory=lambda: dict(STORAGE_BYTES_PER_GPU_ITER),
        description="bytes read per GPU per iteration in the data stage (models absent: 0)",
    )
    param_count: dict[str, NonNegativeFloat] = Field(
        default_factory=lambda: dict(PARAM_COUNTS),
        description="model parameters (gradient bytes; models absent: no NIC demand)",
    )
    grad_bytes_per_param: PositiveFloat = Field(4.0, description="fp32 gradients")


class Estimates(_Strict):
    """The named estimator of job length that every policy sees (never the run's truth).

    A job's declared length is its true iteration count x f_j, drawn once at submission,
    ``f_j = (1 + duration_bias) exp(sigma Z - sigma^2 / 2)``, ``Z ~ N(0, 1)``, sigma =
    ``duration_noise_sigma``: E[f] = 1 + bias, std(ln f) = sigma. Policies see remaining
    iterations = declared - done (at least 1 while the job runs). Interference estimates
    are separate: each policy has its paper's model (Muri's per-size factors, Cuckoo's
    stage model), the run's truth is ``execution.interference_model``, and the
    ``interference_*`` fields add the estimator's own bias and noise on top of the model
    (or hand every policy the truth: an oracle).

    Defaults are published estimator errors, not the papers' exact-knowledge assumption
    (0 / 0, which is an oracle: set it so, labelled):

    * ``duration_noise_sigma`` 0.15: history-based runtime prediction of recurring jobs
      errs by under 25% for 90% of predictions (Popescu et al., "Same Queries, Different
      Data: Can we Predict Runtime Performance?", ICDE Workshops 2012); a lognormal error
      with sigma 0.15 puts 90.8% of predictions within 25%. Deep-learning jobs recur as
      often (Weng et al., NSDI'22) but no DL job-length predictor's error was found
      published; the robustness scenarios sweep 0.15-1.0 (1.0: user-declared lengths);
    * ``interference_noise_sigma`` 0.28: the spread of Gavel's measured pair slowdowns
      (``workloads/data/cluster/gavel_pairs_sf1.csv``, 81 pairs of 1-GPU jobs sharing a
      K80, P100 or V100) around one factor per GPU type, i.e. the error of a per-size
      factor predictor on measured pairs: std of ln(slowdown) within type, pooled,
      0.278 (0.135 K80, 0.183 P100, 0.417 V100; swept 0.14-0.42).
    """

    duration_bias: float = Field(
        0.0, gt=-1.0, le=MAX_SCALE,
        description="mean relative error of declared job lengths (E[f] = 1 + bias)",
    )  # fmt: skip
    duration_noise_sigma: float = Field(
        0.15, ge=0, le=MAX_LOG_SIGMA,
        description="sigma of ln(declared / true length), drawn once per job",
    )  # fmt: skip
    #: Interference estimator (workloads.cluster.interference_estimate): the packed
    #: iteration time a policy sees for a group of two or more jobs on a GPU type is its
    #: model's value (Muri's factors or Cuckoo's stage model) x g, g = (1 + bias)
    #: exp(sigma Z - sigma^2 / 2) drawn once per (member profiles, type); lone jobs'
    #: times are the profiled ones. 0 / 0: the model's value unchanged.
    interference_bias: float = Field(
        0.0, gt=-1.0, le=MAX_SCALE,
        description="mean relative error of packed iteration-time estimates",
    )  # fmt: skip
    interference_noise_sigma: float = Field(
        0.28, ge=0, le=MAX_LOG_SIGMA,
        description="sigma of ln(estimated / modelled packed iteration time)",
    )  # fmt: skip
    interference_oracle: bool = Field(
        False,
        description="oracle upper bound: every interference estimate a policy sees is the "
        "run's ground truth (execution.interference_model), bias and noise ignored",
    )


class ClusterParams(WorkloadParams):
    """The ``workload:`` block of a cluster-scheduling scenario."""

    kind: Literal["cluster"] = Field(default="cluster", description="Workload kind (cluster).")
    inventory: list[NodeGroup] | AlibabaInventory = Field(
        description="The GPU nodes: groups of identical nodes, or "
        "the Alibaba 2023 trace's node list."
    )
    jobs: Jobs = Field(
        description="The job stream: synthetic, or a trace (Muri, "
        "Alibaba, Philly, Helios), by kind."
    )
    speeds: SpeedTable = Field(
        default_factory=lambda: SpeedTable.model_validate({}),
        description="Per-model, per-GPU-type throughput table "
        "(default: Gavel's measured isolated steps/s).",
    )
    deadlines: Deadlines = Field(
        default_factory=lambda: Deadlines.model_validate({}),
        description="Which jobs get a deadline, and how tight: D = submit + "
        "lambda x solo duration on the reference type.",
    )
    execution: Execution = Field(
        default_factory=lambda: Execution.model_validate({}),
        description="How groups run: interference, group size, restarts and scheduling rounds.",
    )
    contention: Contention = Field(
        default_factory=lambda: Contention.model_validate({}),
        description="Node contention (CPU, storage, NIC) between "
        "groups sharing a node (off by default).",
    )
    estimates: Estimates = Field(
        default_factory=lambda: Estimates.model_validate({}),
        description="The named estimator of job length every policy sees (never the run's truth).",
    )
    stage_profiles_path: str = Field(
        shipped("cluster/muri_stage_profiles.csv"),
        description="CSV of per-iteration data, GPU and network seconds per "
        "(model, GPUs) from Muri's traces (shipped).",
    )
    utilisation_bins: PositiveInt = Field(50, description="time bins of the utilisation table")
