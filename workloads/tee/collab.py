"""Secure collaborative LLM training: accelerator forward/backward, CPU Adam (TensorTEE).

The ``tee.protection`` policy decides how each byte stream and each CPU-accelerator
transfer is protected (none, cacheline TEE, TensorTEE, H100-CC-like); the mechanism
prices the step with :mod:`workloads.tee.collab_costs` (secure memory traffic through
the memory-encryption engines of :mod:`devices.mee`, stored metadata, re-encryption or
bounce-buffer passes, verification stalls, TensorTEE's residual costs), sizes the
micro-batches to what fits in accelerator memory once MACs are stored, and runs every
step as a task graph of SimPy processes (forward and backward on the accelerator,
engine passes, copies on each PCIe direction, Adam on the CPU; :mod:`workloads.tee.dag`);
spans are recorded for the first ``trace_steps`` steps. The CPU side has one thread
budget (``cpu_threads``, default every core: DeepSpeed's CPU Adam runs an OpenMP loop
over all threads, ``csrc/adam/cpu_adam_impl.cpp``): Adam runs on it, and so does the
software re-encryption of the protections that re-encrypt transfers (``cpu_crypto``
per thread), so no protection gets more CPU than another. The same model is also priced
unprotected and with each security cost switched off in turn, which attributes the
step's overhead to re-encryption, verification and metadata (in that order).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveInt

from hetsim.devices.cluster import Cluster
from hetsim.devices.mee import aes_engine
from hetsim.devices.power import cap_ratio, compute_roof_flops
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.limits import Seconds
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, WorkloadParams, check_steps
from hetsim.workloads.metered import metered_columns, metered_metrics
from hetsim.workloads.tee.collab_costs import (
    CollabConfig,
    StepResult,
    Toggles,
    accel_footprint,
    compute_times,
    cpu_thread_shares,
    stage_row,
    step,
    streams,
)
from hetsim.workloads.tee.dag import run_repeated
from hetsim.workloads.tee.models import llm_shape
from hetsim.workloads.tee.secure import SecureMemoryParams, stored_metadata_bytes, tee_preset
from hetsim.workloads.tee.view import ProtectionPlan, ProtectionView


class TeeCollabParams(WorkloadParams):
    """The ``workload:`` block of a collaborative-training TEE scenario."""

    kind: Literal["tee-collab"] = Field(
        default="tee-collab", description="Workload kind (tee-collab)."
    )
    model: str = Field(
        default="gpt3-6.7b",
        description="Model trained: a GPT-3 size (gpt3-*) or a catalogue model.",
    )
    steps: PositiveInt = Field(default=20, description="Training steps run.")
    batch_sequences: PositiveInt = Field(
        default=8,
        description="Sequences per step, split into the "
        "micro-batches that fit in accelerator memory.",
    )
    seq_len: PositiveInt = Field(default=2048, description="Tokens per sequence.")
    dtype: str = Field(
        default="bf16",
        description="Number format of the accelerator's forward and "
        "backward (must have a peak on it).",
    )
    accelerator: str | None = Field(default=None, description="device name; default: first npu/gpu")
    act_bytes_per_token_hidden: float = Field(
        default=34.0, gt=0, description="Korthikanti et al. 2022"
    )
    recompute: bool = Field(default=True, description="activation checkpointing per layer")
    adam_flops_per_param: float = Field(default=12.0, ge=0, description="reconstruction")
    secure: SecureMemoryParams = Field(
        default=SecureMemoryParams(),
        description="Metadata-cache behaviour of the cacheline TEEs: simulated or fixed rates.",
    )
    verify_latency_s: Seconds = Field(
        default=1e-6, ge=0, description="one MAC check (reconstruction)"
    )
    tile_bytes: float = Field(
        default=1 << 20, gt=0, description="sync-verified tile (reconstruction)"
    )
    accel_engine_Bps: float = Field(
        default=1e12, gt=0, description="accelerator copy-engine crypto rate (reconstruction)"
    )
    cpu_crypto: str = Field(
        default="aesni-gcm", description="software AES engine of transfer re-encryption"
    )
    cpu_threads: PositiveInt | None = Field(
        default=None,
        description="CPU threads of the step's CPU side: Adam and any software "
        "re-encryption share them (None: every core, as DeepSpeed's CPU Adam runs)",
    )
    cpu_crypto_Bps: float | None = Field(
        default=None,
        gt=0,
        description="override of the re-encryption rate (sensitivity; ignores cpu_threads)",
    )
    cpu_mee: str = Field(default="sgx-mee-hw", description="inline engine of CPU memory")
    cpu_mee_lanes: PositiveInt = Field(
        default=8, description="AES pipes of that engine, one per channel (reconstruction)"
    )
    accel_mac_Bps: float = Field(
        default=200e9, gt=0, description="accelerator MAC engine rate (reconstruction)"
    )
    mlp: float = Field(default=10.0, gt=0, description="version misses in flight (reconstr.)")
    tensors_per_layer: PositiveInt = Field(
        default=12, description="weight and bias tensors of a GPT layer (4 GEMMs, 2 norms)"
    )
    detect_window_bytes: float = Field(
        default=4096.0, ge=0, description="bytes per tensor before detection (reconstr.)"
    )
    detect_miss_rate: float = Field(
        default=0.0, ge=0, le=1, description="tensor bytes never detected (reconstruction)"
    )
    detector_streams: PositiveInt = Field(
        default=16, description="interleaved streams the detector tracks (reconstruction)"
    )
    commit_latency_s: Seconds = Field(
        default=1e-6, ge=0, description="MAC finalise + check before a commit (reconstr.)"
    )
    verify_window_layers: PositiveInt = Field(
        default=1, description="layers compute may run ahead of verification (reconstr.)"
    )
    trace_steps: int = Field(default=2, ge=0, description="steps drawn on the timeline")


@workloads.register("tee-collab")
class TeeCollabWorkload(Workload):
    """Collaborative LLM training across a CPU enclave and an accelerator enclave."""

    Params = TeeCollabParams
    domain = "tee"
    decision_points: ClassVar[dict[str, str]] = {"protection": "tensortee"}
    metrics: ClassVar[dict[str, str]] = {
        "steps": "training steps completed",
        "step_s": "seconds of one step (forward, backward, transfers, CPU Adam)",
        "tokens_per_s": "batch_sequences x seq_len / step_s",
        "plain_step_s": "step_s of the same model and hardware unprotected",
        "overhead_vs_plain": "step_s / plain_step_s - 1",
        "stall_s": "step_s - plain_step_s: seconds per step spent waiting on security",
        "reencrypt_s": "step_s - step_s with transfer crypto removed",
        "verify_s": "previous - the same with verification stalls also removed",
        "metadata_s": "previous - plain_step_s (metadata traffic and capacity lost)",
        "metadata_bytes": "MAC + counter + tree bytes moved per step, both sides",
        "reencrypt_bytes": "bytes run through a cipher by transfers per step",
        "crypto_s": "seconds of transfer crypto passes per step (busy, not exposed)",
        "accel_meta_capacity_bytes": "accelerator memory holding stored metadata",
        "cpu_meta_capacity_bytes": "CPU memory holding stored metadata",
        "micro_batches": "micro-batches per step (fewer fit when MACs take memory)",
        "cpu_threads": "CPU threads running Adam and any software re-encryption",
        "accel_utilisation": "accelerator compute seconds / step_s",
        "makespan_s": "end time of the last step",
        # energy (workloads/metered.py): each step's accelerator and CPU busy time
        **metered_metrics(
            {
                "step": "training steps completed",
                "token": "tokens trained (steps x batch_sequences x seq_len)",
            },
            "token",
        ),
    }

    def __init__(
        self,
        sim: Simulation,
        cluster: Cluster,
        params: TeeCollabParams,
        policies: dict[str, Any],
        base_dir: Path,
    ) -> None:
        super().__init__(sim, cluster, params, policies, base_dir)
        self.shape = llm_shape(params.model)
        self.accel_name = params.accelerator or _first(cluster, ("npu", "gpu"))
        cpu = cluster.host_of(self.accel_name)
        if cpu is None:
            raise ValueError(f"accelerator {self.accel_name} has no CPU on its node")
        self.cpu_name = cpu
        cores = cluster.device(cpu).spec.cores
        self.cpu_threads = params.cpu_threads or cores or 1
        if cores and self.cpu_threads > cores:
            raise ValueError(f"cpu_threads: {self.cpu_threads} exceeds the {cores} cores of {cpu}")
        accel = cluster.device(self.accel_name).spec
        accel.peak(params.dtype)  # KeyError naming the dtypes if unsupported
        base = self._config(micro_batches=1)
        view = ProtectionView(cluster.device(cpu).spec.name, accel.name, accel.kind, streams(base))
        self.plan: ProtectionPlan = policies["protection"].plan(view)
        self._check_plan(view)
        self.cfg = self._fit(self.plan)
        self.plain_cfg = self._fit(_plain_plan(len(view.streams)))
        self.result = step(self.cfg, self.plan)
        self._attribute()
        self._energy = self._step_work()
        self._steps_done = 0
        self._rows = sim.recorder.table("steps", ("step", "start_s", "end_s"))

    # ---- building -----------------------------------------------------------------
    def _config(self, micro_batches: int) -> CollabConfig:
        p, s = self.params, self.shape
        seqs = -(-p.batch_sequences // micro_batches)
        threads = self.cpu_threads
        crypto = p.cpu_crypto_Bps or aes_engine(p.cpu_crypto, threads).throughput_Bps
        cpu = self.cluster.device(self.cpu_name).spec
        return CollabConfig(
            s, self.cluster.device(self.accel_name).spec, self.cluster.device(self.cpu_name).spec,
            p.dtype, p.seq_len, seqs * p.seq_len, micro_batches, p.act_bytes_per_token_hidden,
            p.recompute,
            p.adam_flops_per_param, p.secure, p.verify_latency_s, p.tile_bytes,
            p.accel_engine_Bps, crypto,
            self.cluster.copy_time_s(self.accel_name, self.cpu_name, int(2 * s.params / s.layers)),
            self.cluster.copy_time_s(self.cpu_name, self.accel_name, int(2 * s.params / s.layers)),
            aes_engine(p.cpu_mee, p.cpu_mee_lanes), p.accel_mac_Bps, p.mlp,
            p.tensors_per_layer, p.detect_window_bytes, p.detect_miss_rate, p.detector_streams,
            p.commit_latency_s, p.verify_window_layers,
            cpu_thread_shares(cpu, threads),
        )  # fmt: skip

    def _fit(self, plan: ProtectionPlan) -> CollabConfig:
        """The config with the fewest micro-batches whose footprint fits the accelerator."""
        cap = self.cluster.memory(self.accel_name).capacity_bytes
        for m in range(1, self.params.batch_sequences + 1):
            cfg = self._config(m)
            data, meta = accel_footprint(cfg, plan, cfg.tokens_mb)
            if data + meta <= cap:
                return cfg
        raise ValueError(
            f"{self.shape.name} does not fit {self.accel_name} ({cap} B) even one sequence "
            "per micro-batch"
        )

    def _check_plan(self, view: ProtectionView) -> None:
        if len(self.plan.stream_enclaves) != len(view.streams):
            raise InvariantViolation("protection plan does not cover every stream")
        for name in (self.plan.cpu_enclave, self.plan.accel_enclave, *self.plan.stream_enclaves):
            if name is not None:
                tee_preset(name)

    def _attribute(self) -> None:
        plain = step(self.plain_cfg, _plain_plan(len(self.plan.stream_enclaves)))
        no_x = step(self.cfg, self.plan, Toggles(crypto=False))
        no_xv = step(self.cfg, self.plan, Toggles(crypto=False, verify=False))
        full = self.result.step_s
        self.plain: StepResult = plain
        self.parts = {
            "reencrypt_s": full - no_x.step_s,
            "verify_s": no_x.step_s - no_xv.step_s,
            "metadata_s": no_xv.step_s - plain.step_s,
        }

    def _step_work(self) -> list[tuple[Any, float, float]]:
        """(meter, busy seconds, compute-roof seconds) of one step per device: the
        accelerator's forward and backward kernels (their FLOPs, recompute included, at
        its compute roof; verification stalls idle), and the CPU stage (its transfer
        passes, software crypto and Adam; a busy CPU draws its power limit whatever its
        utilisation, devices/power.py). The accelerator side of a transfer (its crypto
        and copy engines) and the link draw nothing above idle: the power model has no
        term for them."""
        cfg, s = self.cfg, self.shape
        row, _, _, _, _, traffic = stage_row(cfg, self.plan, Toggles())
        fwd, bwd = compute_times(cfg, self.plan, traffic, Toggles(verify=False))
        per = s.layers * cfg.micro_batches
        # one layer's forward on a micro-batch (compute_times' count), backward 2x or 3x
        fwd_flops = 2.0 * s.params / s.layers * cfg.tokens_mb
        fwd_flops += 2.0 * cfg.tokens_mb * cfg.seq_len * s.hidden
        flops = per * fwd_flops * (1.0 + (3.0 if cfg.recompute else 2.0))
        dev = self.cluster.device(self.accel_name)
        roof = compute_roof_flops(dev.spec, self.params.dtype, cap_ratio(dev.spec))
        cpu = self.cluster.device(self.cpu_name)
        cpu_roof = compute_roof_flops(cpu.spec, "fp32")
        adam = self.params.adam_flops_per_param * s.params
        return [
            (dev.energy, per * (fwd + bwd), flops / roof if roof > 0 else 0.0),
            (cpu.energy, s.layers * row[3], adam / cpu_roof if cpu_roof > 0 else 0.0),
        ]

    # ---- running ------------------------------------------------------------------
    def start(self) -> None:
        """Allocate memory and start the step process."""
        self._allocate()
        self.sim.env.process(self._run())

    def _allocate(self) -> None:
        cfg, s = self.cfg, self.shape
        acc = self.cluster.memory(self.accel_name)
        data, meta = accel_footprint(cfg, self.plan, cfg.tokens_mb)
        acc.allocate("tee.model_state", int(4 * s.params))
        acc.allocate("tee.activations", int(data - 4 * s.params))
        acc.allocate("tee.metadata", int(meta))
        cpu = self.cluster.memory(self.cpu_name)
        spec = tee_preset(self.plan.cpu_enclave) if self.plan.cpu_enclave else None
        self.cpu_meta = stored_metadata_bytes(spec, 16 * s.params)
        cpu.allocate("tee.optimizer_state", int(16 * s.params))
        cpu.allocate("tee.metadata", int(self.cpu_meta))
        self.accel_meta = meta

    def _run(self) -> Any:
        """Each step's task graph as SimPy processes (spans for the first steps)."""

        def step_end(i: int, start: float, end: float) -> None:
            self._rows.append(i, start, end)
            self._steps_done += 1
            for meter, busy, compute in self._energy:
                meter.window(start, end, busy, compute)

        p = self.params
        yield from run_repeated(
            self.sim, self.result.tasks, self.result.step_s, p.steps, p.trace_steps, step_end
        )
        self.done.succeed()

    # ---- results ------------------------------------------------------------------
    def check_partial(self) -> None:
        """At any moment: the steps counted are those recorded, in order, none after
        now; one more in flight at most."""
        ends: Any = self._rows.column("end_s") if len(self._rows) else []
        check_steps("tee-collab steps", self.params.steps, self._steps_done, ends, self.sim.now)

    def check(self) -> None:
        """Every step ran; the attribution adds up to the stall."""
        if self._steps_done != self.params.steps:
            raise InvariantViolation(f"{self._steps_done} of {self.params.steps} steps ran")
        total = sum(self.parts.values())
        stall = self.result.step_s - self.plain.step_s
        if abs(total - stall) > 1e-9 * max(1.0, self.result.step_s):
            raise InvariantViolation(f"overhead parts {total} != stall {stall}")

    def horizon_s(self) -> float | None:
        """Steps x step time."""
        return self.params.steps * self.result.step_s

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """Per-step figures (see :attr:`metrics`)."""
        r, p = self.result, self.params
        return {
            "steps": self._steps_done,
            "step_s": r.step_s,
            "tokens_per_s": p.batch_sequences * p.seq_len / r.step_s,
            "plain_step_s": self.plain.step_s,
            "overhead_vs_plain": r.step_s / self.plain.step_s - 1.0,
            "stall_s": r.step_s - self.plain.step_s,
            **self.parts,
            "metadata_bytes": r.metadata_bytes,
            "reencrypt_bytes": r.crypto_bytes,
            "crypto_s": r.crypto_s,
            "accel_meta_capacity_bytes": self.accel_meta,
            "cpu_meta_capacity_bytes": self.cpu_meta,
            "micro_batches": self.cfg.micro_batches,
            "cpu_threads": self.cpu_threads,
            "accel_utilisation": (r.forward_s + r.backward_s) / r.step_s,
            "makespan_s": end_s,
            **metered_columns(
                self,
                end_s,
                (self.accel_name, self.cpu_name),
                {
                    "step": self._steps_done,
                    "token": self._steps_done * p.batch_sequences * p.seq_len,
                },
                "token",
            ),
        }


def _plain_plan(n: int) -> ProtectionPlan:
    """No enclave anywhere, plain transfers: the unprotected reference."""
    return ProtectionPlan(None, None, (None,) * n, "plain", "none")


def _first(cluster: Cluster, kinds: tuple[str, ...]) -> str:
    names = cluster.device_names(kinds=kinds)
    if not names:
        raise ValueError(f"the cluster has no {' or '.join(kinds)} device")
    return names[0]
