"""Preemptible training jobs on the GPUs a workload is granted (harvesting).

Each job trains a dense model for ``steps_per_job`` optimizer steps on a gang of
``gpus_per_job`` GPUs of one type on one node (FSDP / ZeRO-3 over the gang). The step
time of a gang of each GPU type comes from the ``training-parallel`` cost model, run
once per type as a nested one-step simulation at build (``dp = gpus_per_job``): the
mechanism never invents a speed. Jobs wait in FIFO order; the scheduling pass starts the
head job on the fastest type that has a free gang.

The devices are *granted*: standalone, every accelerator the workload sees; beside
other workloads (``workloads:``, :mod:`simulator.colocate`), its own devices plus
whatever the arbiter lends it (:meth:`grant`) and takes back (:meth:`reclaim`). Moving
costs (``checkpoint``):

* a (re)start restores: ``restart_s`` (process launch, NCCL init) plus reading the
  job's state from storage at ``storage_Bps``, then copying each rank's share from its
  node's CPU to the GPU over the cluster's links (shared with every other workload);
* a preemption checkpoints: each rank's share is copied GPU -> CPU over the links, then
  written to storage at ``storage_Bps``; only then are the GPUs released. The partial
  step in flight is lost (counted in ``lost_gpu_s``);
* a periodic checkpoint (``checkpoint.interval_steps``; none by default) is taken
  asynchronously: at every ``interval_steps``-th step each rank's share is copied GPU ->
  CPU over the links and then written to storage while the job runs on (the snapshot's
  stall is not modelled; one is skipped while the last is still being written); it is
  the job's restart point once the write ends.

A device that fails (:meth:`fail`, the cluster fault injector of
:mod:`workloads.colocate.faults`) leaves the workload at once; a job whose gang holds
it loses the steps since its last written checkpoint (periodic, or the one a preemption
wrote) and waits at the head of the queue to restart (a restore, as after a preemption).

On a GPU it shares with serving (``sharing:``), the arbiter may *pause* training
(:meth:`set_paused`): a gang holding a paused GPU stops stepping (the step in flight is
lost, the memory stays: no checkpoint) and resumes when the pause is lifted.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_serializer

from hetsim.devices.cluster import Cluster
from hetsim.simulator.engine import Alarm, InvariantViolation, Simulation
from hetsim.simulator.limits import Seconds
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, WorkloadParams, conserve
from hetsim.workloads.models.dense import model_spec
from hetsim.workloads.training.model import STATE_BYTES_PER_PARAM

ACCELERATORS = ("gpu", "npu")

METRICS = {
    "jobs_total": "training jobs in the run",
    "jobs_completed": "jobs that ran all their steps",
    "steps_completed": "optimizer steps completed over all jobs (checkpointed or not)",
    "tokens_trained": "steps_completed x gpus_per_job x micro_batch x seq_len",
    "tokens_per_s": "tokens_trained / run end time",
    "gpu_s": "GPU-seconds held by gangs (restore, steps, checkpoint)",
    "step_gpu_s": "GPU-seconds of gangs running steps (useful and lost)",
    "lost_gpu_s": "GPU-seconds of partial steps discarded at a preemption or a pause",
    "job_preemptions": "jobs stopped by reclaim (each paid a checkpoint)",
    "checkpoint_s": "job-seconds spent writing checkpoints at preemption",
    "restore_s": "job-seconds spent (re)starting: restart, storage read, host-to-GPU copy",
    "jct_mean_s": "mean submit-to-finish time of completed jobs (absent if none)",
    "granted_gpus_peak": "most GPUs granted to the workload at once",
    "step_energy_J": "energy of the gangs' GPUs while running steps, J: each GPU's draw at "
    "the step's hardware FLOP utilisation (the cost model's hfu; devices/power.py) over "
    "its running time",
}

JOB_COLUMNS = ("time_s", "job", "event", "gpu_type", "devices", "steps_done")


class CheckpointCost(BaseModel):
    """Costs of moving a job (restore on start, checkpoint on preemption).

    * ``state_bytes_per_param`` 16: mixed-precision AdamW state (bf16 weights and
      gradients, fp32 master, momentum, variance), as the training cost model
      (``workloads.training.model.STATE_BYTES_PER_PARAM``);
    * ``storage_Bps`` 1 GB/s: object storage in the same cloud region, the value the
      serving cold start uses (``workloads.serving.params.ColdStart``; kunwar.page,
      "The model cold-start problem", ch. 52);
    * ``restart_s`` 30 s: process launch, NCCL communicator set-up and data-loader
      warm-up of a restarted job. A labelled reconstruction (no component measurement
      in the calibration set), swept in ``scenarios/colocate-robustness.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    state_bytes_per_param: PositiveFloat = Field(
        default=float(STATE_BYTES_PER_PARAM),
        description="Bytes of checkpoint state per model parameter (16: mixed-precision "
        "AdamW, bf16 weights and fp32 master weights and moments).",
    )
    storage_Bps: PositiveFloat = Field(
        default=1e9, description="checkpoint storage bandwidth (B/s)"
    )
    restart_s: Seconds = Field(
        default=30.0, description="restart overhead of a (re)started job (s)"
    )
    interval_steps: PositiveInt | None = Field(
        default=None,
        description="optimizer steps between periodic (asynchronous) checkpoints; null: a "
        "job saves only when preempted (a failed job restarts from its last saved step)",
    )

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        """Without periodic checkpoints, the resolved block is the one from before the
        field existed (resolved scenarios of existing runs stay byte-identical)."""
        out: dict[str, Any] = handler(self)
        if out.get("interval_steps", 0) is None:
            del out["interval_steps"]
        return out


class TrainingJobsParams(WorkloadParams):
    """The block of a ``training-jobs`` workload (preemptible harvesting jobs)."""

    kind: Literal["training-jobs"] = Field(
        default="training-jobs", description="Workload kind (training-jobs)."
    )
    model: str = Field(default="llama-3-8b", description="catalogue model trained by every job")
    num_jobs: PositiveInt = Field(
        default=4, description="jobs, all submitted at submit_interval_s apart"
    )
    steps_per_job: PositiveInt = Field(default=1000, description="optimizer steps per job")
    gpus_per_job: PositiveInt = Field(
        default=4, description="GPUs of one gang (one type, one node)"
    )
    micro_batch: PositiveInt = Field(default=1, description="sequences per GPU per step")
    seq_len: PositiveInt = Field(default=4096, description="tokens per sequence")
    recompute: Literal["none", "selective", "op", "full"] = Field(
        default="full", description="activation recomputation of the training cost model"
    )
    fabrics: dict[str, str] = Field(
        default_factory=dict,
        description="GPU type -> collective fabric of a gang, over the catalogue's "
        "scaleup_fabric; jobs run only on types with a named fabric (not pcie or link)",
    )
    submit_interval_s: Seconds = Field(default=0.0, description="seconds between job submissions")
    checkpoint: CheckpointCost = Field(
        default_factory=CheckpointCost, description="moving costs: restore and checkpoint"
    )


@dataclass
class Job:
    """One job's progress and state."""

    number: int
    submit_s: float
    steps_done: int = 0
    state: Literal[
        "pending", "waiting", "restoring", "running", "paused", "checkpointing", "done"
    ] = "pending"
    gang: list[str] = field(default_factory=list)
    run_start_s: float = 0.0
    gang_start_s: float = 0.0
    version: int = 0
    alarm: Alarm | None = None
    finish_s: float = math.nan
    started_once: bool = False
    #: steps in the last checkpoint written to storage (where a failed job restarts)
    saved_steps: int = 0
    #: when the preemption checkpoint in progress began
    checkpoint_start_s: float = 0.0
    #: the version (gang) whose periodic checkpoint is being written; None: none
    writing: int | None = None


@workloads.register("training-jobs")
class TrainingJobsWorkload(Workload):
    """Preemptible FSDP training jobs on granted GPU gangs (module doc)."""

    Params = TrainingJobsParams
    domain = "training_jobs"
    decision_points: ClassVar[dict[str, str]] = {}
    metrics: ClassVar[dict[str, str]] = METRICS

    def __init__(
        self, sim: Simulation, cluster: Cluster, params: TrainingJobsParams,
        policies: dict[str, Any], base_dir: Path,
    ) -> None:  # fmt: skip
        super().__init__(sim, cluster, params, policies, base_dir)
        p = params
        self.model = model_spec(p.model)
        self.state_bytes = int(self.model.params * p.checkpoint.state_bytes_per_param)
        self.share_bytes = self.state_bytes // p.gpus_per_job
        self.tokens_per_step = p.gpus_per_job * p.micro_batch * p.seq_len
        #: GPU type -> (step seconds, peak bytes per rank) from the cost model
        self.step_s: dict[str, tuple[float, int]] = {}
        #: GPU type -> hardware FLOP utilisation of a step (its power draw)
        self.hfu: dict[str, float] = {}
        self.step_energy_J = 0.0
        whole = getattr(cluster, "whole", cluster)  # beside others: every type it may be lent
        types = {d.spec.name for d in whole.devices() if d.spec.kind in ACCELERATORS}
        specs = {d.spec.name: d.spec for d in whole.devices() if d.spec.kind in ACCELERATORS}
        self.fabric = {t: p.fabrics.get(t) or specs[t].scaleup_fabric for t in types}
        for t in sorted(t for t in types if self.fabric[t] not in ("", "pcie", "link")):
            cost = self._price(t)
            if cost is not None:
                self.step_s[t], self.hfu[t] = cost[:2], cost[2]
        if not self.step_s:
            raise ValueError(
                "fabrics: no GPU type of the cluster can run a job (a type needs a named "
                "scale-up fabric and must hold a rank's state)"
            )
        self.jobs = [Job(j, j * p.submit_interval_s) for j in range(p.num_jobs)]
        self.queue: deque[int] = deque()
        self.granted: dict[str, int | None] = {}  # device -> job holding it (None: free)
        self._reclaims: dict[str, Callable[[str], None]] = {}
        self.granted_peak = 0
        #: device -> factor its steps take longer on a shared GPU (simulator.colocate)
        self.slowdown: dict[str, float] = {}
        #: shared GPUs training may not compute on now (the arbiter's deferral)
        self.paused: set[str] = set()
        self.preemptions = 0
        self.checkpoint_s = 0.0
        self.restore_s = 0.0
        self.lost_gpu_s = 0.0
        self.step_gpu_s = 0.0
        #: device failures (:meth:`fail`): jobs stopped, steps and GPU-seconds thrown away
        self.failures = 0
        self.fault_steps_lost = 0
        self.fault_gpu_s_lost = 0.0
        #: periodic checkpoints written (``checkpoint.interval_steps``)
        self.checkpoints_saved = 0
        #: (device, start_s, end_s, job) of every gang occupancy, closed at release
        self.busy: list[tuple[str, float, float, int]] = []
        self.events = sim.recorder.table("training_job_events", JOB_COLUMNS)

    # ---- build ---------------------------------------------------------------------------
    def _price(self, gpu_type: str) -> tuple[float, int, float] | None:
        """One optimizer step of a gang of ``gpu_type`` from the training-parallel cost
        model (a nested run); None when a rank's memory does not fit the type."""
        p = self.params
        if self.sim.run_nested is None:
            raise ValueError("training-jobs needs the runner's nested simulation")
        raw = {
            "name": f"training-jobs step on {gpu_type}",
            "cluster": {"nodes": [{"name": "n", "devices": {"gpu": {"type": gpu_type}}}]},
            "workload": {
                "kind": "training-parallel", "model": p.model, "dp": p.gpus_per_job,
                "micro_batch": p.micro_batch, "global_batch": p.gpus_per_job * p.micro_batch,
                "seq_len": p.seq_len, "zero": 3, "recompute": p.recompute,
                "intra_fabric": self.fabric[gpu_type], "gpus_per_node": max(8, p.gpus_per_job),
            },
            "outputs": {"spans": False},
        }  # fmt: skip
        row = self.sim.run_nested(raw, self.base_dir).summary_row
        if row.get("oom"):
            return None
        return float(row["iteration_s"]), int(row["peak_bytes"]), float(row["hfu"])

    # ---- grants (the arbiter's side) -----------------------------------------------------
    def grant(self, devices: list[str]) -> None:
        """Add ``devices`` to the GPUs this workload may use; start what now fits."""
        for d in devices:
            if d in self.granted:
                raise InvariantViolation(f"training-jobs: {d} granted twice")
            self.granted[d] = None
        self.granted_peak = max(self.granted_peak, len(self.granted))
        self._request_pass()

    def reclaim(self, devices: list[str], on_released: Callable[[str], None]) -> None:
        """Give ``devices`` back: a free one at once, one in a gang after its job is
        checkpointed; ``on_released(device)`` is called as each leaves the workload."""
        stop: set[int] = set()
        for d in devices:
            holder = self.granted.get(d, -1)
            if holder == -1:
                raise InvariantViolation(f"training-jobs: reclaim of {d}, not granted")
            if holder is None:
                del self.granted[d]
                on_released(d)
            else:
                self._reclaims[d] = on_released
                stop.add(int(holder))
        for j in sorted(stop):
            self._preempt(self.jobs[j])

    def predicted_move_s(self) -> tuple[float, float]:
        """(restore, checkpoint) seconds of one move of a job, predicted from the
        ``checkpoint`` profile alone: ``restart_s`` + state / ``storage_Bps`` and
        state / ``storage_Bps`` (the host copies, contended links, are left out)."""
        c = self.params.checkpoint
        io_s = self.state_bytes / c.storage_Bps
        return c.restart_s + io_s, io_s

    def set_paused(self, devices: set[str]) -> None:
        """Training may not compute on ``devices`` (shared GPUs) from now: a running gang
        holding one stops stepping (its step in flight is lost, its memory stays), a
        paused gang holding none resumes, and no new gang forms on them."""
        self.paused = set(devices)
        for job in self.jobs:
            hit = bool(self.paused.intersection(job.gang))
            if job.state == "running" and hit:
                if job.alarm is not None:
                    job.alarm.cancel()
                    job.alarm = None
                self._settle(job)
                job.state = "paused"
                self._event(job, "pause", "", job.gang)
            elif job.state == "paused" and not hit:
                job.state, job.run_start_s = "running", self.sim.now
                self._event(job, "resume", "", job.gang)
                self._arm(job)
        self._request_pass()

    def free_devices(self) -> list[str]:
        """Granted devices no gang holds."""
        return [d for d, j in self.granted.items() if j is None]

    # ---- run -----------------------------------------------------------------------------
    def start(self) -> None:
        """Grant this workload's own accelerators, then submit the jobs."""
        own = self.cluster.device_names(ACCELERATORS)
        if own:
            self.grant(own)
        for job in self.jobs:
            self.sim.env.timeout(job.submit_s).callbacks.append(self._submitter(job))

    def _submitter(self, job: Job) -> Callable[[Any], None]:
        return lambda _e: self._submit(job)

    def _submit(self, job: Job) -> None:
        job.state = "waiting"
        self.queue.append(job.number)
        self._event(job, "submit", "", ())
        self._request_pass()

    def _request_pass(self) -> None:
        self.sim.at_end_of_instant(("training-jobs", id(self)), self._pass)

    def _pass(self) -> None:
        """Start waiting jobs in order, each on the fastest type with a free gang."""
        while self.queue:
            gang = self._find_gang()
            if gang is None:
                return
            self._start(self.jobs[self.queue.popleft()], gang)

    def _find_gang(self) -> list[str] | None:
        free: dict[tuple[str, str], list[str]] = {}
        for d, j in self.granted.items():
            if j is None and d not in self._reclaims and d not in self.paused:
                dev = self.cluster.device(d)
                ok = dev.spec.name in self.step_s and self.cluster.memory(d).can_fit(
                    self.step_s[dev.spec.name][1]
                )
                if ok:
                    free.setdefault((dev.spec.name, dev.node), []).append(d)
        n = self.params.gpus_per_job
        fits = [(self.step_s[t][0], t, node) for (t, node), ds in free.items() if len(ds) >= n]
        if not fits:
            return None
        _, t, node = min(fits)
        return sorted(free[(t, node)])[:n]

    def _start(self, job: Job, gang: list[str]) -> None:
        p, now = self.params, self.sim.now
        peak = self.step_s[self.cluster.device(gang[0]).spec.name][1]
        for d in gang:
            self.granted[d] = job.number
            self.cluster.memory(d).allocate(f"train-job{job.number}", peak)
        job.gang, job.state, job.gang_start_s = gang, "restoring", now
        job.version += 1
        version = job.version
        read_s = self.state_bytes / p.checkpoint.storage_Bps
        self._event(job, "start", self.cluster.device(gang[0]).spec.name, gang)

        def copies(_e: object) -> None:
            if job.version != version:
                return
            events = self._host_copies(gang, "restore")
            if events:
                self.sim.env.all_of(events).callbacks.append(lambda _e: run())
            else:
                run()

        def run() -> None:
            if job.version != version:
                return
            self.restore_s += self.sim.now - now
            job.state, job.run_start_s, job.started_once = "running", self.sim.now, True
            if self.paused.intersection(gang):  # deferred while it restored
                job.state = "paused"
                self._event(job, "pause", "", gang)
                return
            self._arm(job)
            self._next_snapshot(job, job.steps_done)

        self.sim.env.timeout(p.checkpoint.restart_s + read_s).callbacks.append(copies)

    def _host_copies(self, gang: list[str], what: str) -> list[Any]:
        """Copy each rank's share of the state between its GPU and its node's CPU over the
        cluster's links: host -> GPU for a ``restore``, GPU -> host for a ``checkpoint``."""
        events = []
        for d in gang:
            host = self.cluster.host_of(d)
            if host is not None:
                src, dst = (host, d) if what == "restore" else (d, host)
                events.append(self.cluster.copy(src, dst, self.share_bytes, what))
        return events

    def _arm(self, job: Job) -> None:
        step_s = self._job_step_s(job)
        left = self.params.steps_per_job - job.steps_done
        job.alarm = Alarm(self.sim, job.run_start_s + left * step_s, lambda _e: self._finish(job))

    def _next_snapshot(self, job: Job, after: int) -> None:
        """Schedule the periodic checkpoint after step ``after`` of the running segment
        (none without ``interval_steps``, nor at the job's last step: it finishes)."""
        every = self.params.checkpoint.interval_steps
        if every is None:
            return
        step = (after // every + 1) * every
        if step >= self.params.steps_per_job:
            return
        at = job.run_start_s + (step - job.steps_done) * self._job_step_s(job)
        version = job.version

        def snap(_e: object) -> None:
            if job.version == version and job.state == "running":
                self._snapshot(job, step)

        self.sim.env.timeout(max(0.0, at - self.sim.now)).callbacks.append(snap)

    def _snapshot(self, job: Job, step: int) -> None:
        """Step ``step`` is done: copy each rank's share to its host, write it to
        storage (the job runs on); it becomes the restart point when written, unless the
        gang was stopped meanwhile. Skipped while the last one is still being written."""
        version = job.version
        self._next_snapshot(job, step)
        if job.writing == version:
            return
        job.writing = version
        events = self._host_copies(job.gang, "checkpoint")

        def written(_e: object) -> None:
            if job.writing == version:
                job.writing = None
            if job.version == version and job.state != "done":
                job.saved_steps = max(job.saved_steps, step)
                self.checkpoints_saved += 1
                self._event(job, "checkpoint-saved", "", job.gang)

        def to_storage(_e: object) -> None:
            write_s = self.state_bytes / self.params.checkpoint.storage_Bps
            self.sim.env.timeout(write_s).callbacks.append(written)

        if events:
            self.sim.env.all_of(events).callbacks.append(to_storage)
        else:
            to_storage(None)

    def _job_step_s(self, job: Job) -> float:
        """The gang type's step time, on a shared GPU slowed by its slowest device."""
        base = self.step_s[self.cluster.device(job.gang[0]).spec.name][0]
        return base * max((self.slowdown.get(d, 1.0) for d in job.gang), default=1.0)

    def _settle(self, job: Job, *, finished: bool = False) -> None:
        """Count the steps run since ``run_start_s``; the partial step is lost. A
        ``finished`` job ran all its steps (its alarm was armed for them: counting them
        by division could fall one short by rounding)."""
        step_s, now = self._job_step_s(job), self.sim.now
        ran = now - job.run_start_s
        left = self.params.steps_per_job - job.steps_done
        k = left if finished else min(int(ran // step_s), left)
        job.steps_done += k
        self.step_gpu_s += ran * len(job.gang)
        self.lost_gpu_s += max(0.0, ran - k * step_s) * len(job.gang)
        self._meter(job, job.run_start_s, now)

    def _meter(self, job: Job, start_s: float, end_s: float) -> None:
        """The gang's GPUs ran steps over [start_s, end_s] (their timeline and energy)."""
        hfu = self.hfu[self.cluster.device(job.gang[0]).spec.name]
        for d in job.gang:
            dev = self.cluster.device(d)
            dev.record_busy(start_s, end_s, f"job{job.number}", utilisation=hfu)
            self.step_energy_J += dev.energy.model.busy_W(hfu) * (end_s - start_s)

    def _finish(self, job: Job) -> None:
        job.alarm = None
        self._settle(job, finished=True)
        job.state, job.finish_s = "done", self.sim.now
        self._event(job, "finish", "", job.gang)
        self._release(job)
        if all(j.state == "done" for j in self.jobs):
            self.done.succeed()

    def _preempt(self, job: Job) -> None:
        """Stop ``job``: settle, checkpoint (copy to host, write to storage), release."""
        if job.state == "checkpointing":
            return
        self.preemptions += 1
        if job.state == "restoring":  # nothing new to save: drop the restore
            job.version += 1
            self.restore_s += self.sim.now - job.gang_start_s
            self._event(job, "preempt-restoring", "", job.gang)
            self._release(job, requeue=True)
            return
        if job.alarm is not None:
            job.alarm.cancel()
            job.alarm = None
        if job.state == "running":  # a paused job was settled when it paused
            self._settle(job)
        job.state = "checkpointing"
        start = job.checkpoint_start_s = self.sim.now
        version = job.version
        self._event(job, "preempt", "", job.gang)
        events = self._host_copies(job.gang, "checkpoint")

        def written(_e: object) -> None:
            if job.version != version:  # the gang failed meanwhile (fail)
                return
            self.checkpoint_s += self.sim.now - start
            job.saved_steps = job.steps_done
            self._event(job, "checkpointed", "", job.gang)
            self._release(job, requeue=True)

        def to_storage(_e: object) -> None:
            if job.version != version:
                return
            write_s = self.state_bytes / self.params.checkpoint.storage_Bps
            self.sim.env.timeout(write_s).callbacks.append(written)

        if events:
            self.sim.env.all_of(events).callbacks.append(to_storage)
        else:
            to_storage(None)

    # ---- device failures (workloads.colocate.faults) ---------------------------------------
    def fail(self, devices: list[str]) -> list[tuple[int, int, float, str]]:
        """``devices`` failed now and leave the workload (a reclaim pending on one is
        dropped: the caller takes the device). A job whose gang holds one stops: the
        steps since its last written checkpoint are lost (``steps_done`` goes back to
        it), its gang is released (the healthy devices to the free pool or to their
        pending reclaim) and it waits at the head of the queue to restart. Returns per
        job stopped: (job, steps lost, GPU-seconds lost, the state it was in)."""
        for d in devices:
            if d not in self.granted:
                raise InvariantViolation(f"training-jobs: {d} failed, not granted")
            self._reclaims.pop(d, None)
        jobs = sorted({j for d in devices if (j := self.granted[d]) is not None})
        out = [self._fail_job(self.jobs[j]) for j in jobs]
        for d in devices:
            del self.granted[d]
        self._request_pass()
        return out

    def _fail_job(self, job: Job) -> tuple[int, int, float, str]:
        """Stop ``job`` on a failure: count what ran, roll back, release, requeue."""
        now, n, was = self.sim.now, len(job.gang), job.state
        step_s = self._job_step_s(job)
        wasted_s = 0.0  # gang time thrown away besides whole steps
        if was == "running":
            if job.alarm is not None:
                job.alarm.cancel()
                job.alarm = None
            ran = now - job.run_start_s
            k = min(int(ran // step_s), self.params.steps_per_job - job.steps_done)
            job.steps_done += k
            self.step_gpu_s += ran * n
            self._meter(job, job.run_start_s, now)
            wasted_s = ran - k * step_s
        elif was == "restoring":
            self.restore_s += now - job.gang_start_s
            wasted_s = now - job.gang_start_s
        elif was == "checkpointing":
            self.checkpoint_s += now - job.checkpoint_start_s
            wasted_s = now - job.checkpoint_start_s
        lost = job.steps_done - job.saved_steps
        gpu_s = (lost * step_s + wasted_s) * n
        job.steps_done = job.saved_steps
        job.version += 1  # restore, checkpoint and snapshot callbacks in flight: void
        self.failures += 1
        self.fault_steps_lost += lost
        self.fault_gpu_s_lost += gpu_s
        self._event(job, f"fail-{was}", "", job.gang)
        self._release(job, requeue=True)
        return job.number, lost, gpu_s, was

    def _release(self, job: Job, requeue: bool = False) -> None:
        now = self.sim.now
        for d in job.gang:
            self.cluster.memory(d).free(f"train-job{job.number}")
            self.busy.append((d, job.gang_start_s, now, job.number))
            self.granted[d] = None
            back = self._reclaims.pop(d, None)
            if back is not None:
                del self.granted[d]
                back(d)
        job.gang = []
        if requeue:
            job.state = "waiting"
            self.queue.appendleft(job.number)
        self._request_pass()

    def _event(self, job: Job, what: str, gpu_type: str, gang: Any) -> None:
        self.events.append(self.sim.now, job.number, what, gpu_type, "+".join(gang), job.steps_done)

    # ---- results -------------------------------------------------------------------------
    def horizon_s(self) -> float | None:
        """No estimate (the grants decide)."""
        return None

    def _counts(self) -> dict[str, int]:
        states: list[str] = [j.state for j in self.jobs]
        names = ("pending", "waiting", "restoring", "running", "paused", "checkpointing", "done")
        return {s: states.count(s) for s in names}

    def check(self) -> None:
        """Every job ran all its steps; no gang or memory left held."""
        self.check_partial()
        short = [j.number for j in self.jobs if j.steps_done != self.params.steps_per_job]
        if short:
            raise InvariantViolation(f"training jobs {short} ended short of their steps")

    def check_partial(self) -> None:
        """Jobs: done, holding a gang, queued or not yet submitted; steps never past the
        total; a queued job is in the queue once."""
        c, n = self._counts(), len(self.jobs)
        held = c["restoring"] + c["running"] + c["paused"] + c["checkpointing"]
        if c["waiting"] != len(self.queue) or len(set(self.queue)) != len(self.queue):
            raise InvariantViolation(
                f"training jobs: {c['waiting']} waiting, {len(self.queue)} in the queue"
            )
        conserve("training jobs", n, c["done"], held, c["pending"] + c["waiting"])
        steps = sum(j.steps_done for j in self.jobs)
        conserve("training steps", n * self.params.steps_per_job, steps, 0,
                 n * self.params.steps_per_job - steps)  # fmt: skip
        holders = sum(1 for j in self.granted.values() if j is not None)
        if holders != sum(len(j.gang) for j in self.jobs):
            raise InvariantViolation("training jobs: gang devices and grants disagree")

    def busy_spans(self, end_s: float) -> list[tuple[str, float, float]]:
        """(device, start_s, end_s) of every gang occupancy, open ones cut at ``end_s``."""
        out = [(d, a, b) for d, a, b, _ in self.busy]
        for j in self.jobs:
            out.extend((d, j.gang_start_s, end_s) for d in j.gang)
        return out

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """See :data:`METRICS`."""
        for j in self.jobs:  # a gang running at the end: its steps so far (not settled)
            if j.state == "running":
                step_s = self._job_step_s(j)
                ran = end_s - j.run_start_s
                k = min(int(ran // step_s), self.params.steps_per_job - j.steps_done)
                j.steps_done += k
                self._meter(j, j.run_start_s, end_s)
                self.step_gpu_s += (end_s - j.run_start_s) * len(j.gang)
                j.run_start_s = end_s
        steps = sum(j.steps_done for j in self.jobs)
        tokens = steps * self.tokens_per_step
        done = [j.finish_s - j.submit_s for j in self.jobs if j.state == "done"]
        gpu_s = sum(b - a for _, a, b in self.busy_spans(end_s))
        return {
            "jobs_total": len(self.jobs),
            "jobs_completed": len(done),
            "steps_completed": steps,
            "tokens_trained": tokens,
            "tokens_per_s": tokens / end_s if end_s > 0 else math.nan,
            "gpu_s": gpu_s,
            "step_gpu_s": self.step_gpu_s,
            "lost_gpu_s": self.lost_gpu_s,
            "job_preemptions": self.preemptions,
            "checkpoint_s": self.checkpoint_s,
            "restore_s": self.restore_s,
            "jct_mean_s": sum(done) / len(done) if done else math.nan,
            "granted_gpus_peak": self.granted_peak,
            "step_energy_J": self.step_energy_J,
        }
