"""Several workloads on one cluster: the ``workloads:`` form of a scenario.

``workloads:`` maps a name to a workload block of any kind, each with its own
``policies:`` and ``devices:`` (fnmatch patterns over device names, e.g.
``h100*/gpu*``; omitted: the accelerators no other workload names). Every workload is
built on one :class:`~devices.cluster.Cluster` in one SimPy environment, through a
:class:`~workloads.colocate.cluster_view.ClusterView` (its own accelerators; the links
and memory pools are shared). ``policies.arbiter`` (decision point
``colocate.arbiter``, ``schedulers/arbiter/``) may move GPUs between a serving workload
and ``training-jobs`` workloads over time (:mod:`workloads.colocate.arbitration`).
The run ends when every workload is done (or at ``until_s``); the summary has one row
per workload (column ``workload``) and a ``cluster`` row (:mod:`workloads.colocate.report`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ACCELERATORS = ("gpu", "npu")
ARBITER_POINT = "colocate.arbiter"


class SharingConfig(BaseModel):
    """How a GPU that two or more workloads name in ``devices:`` is shared
    (workloads.colocate.sharing). ``exclusive``: never (such a device is an error; at
    most one owner at any time, checked at run end). ``partition`` (MIG/MPS-style):
    each owner gets ``fractions[name]`` of the compute and memory (default an equal
    split). ``time-sliced``: turns of ``slice_s`` on the whole GPU, each switch costing
    ``context_switch_s``; memory is limited per owner by the same fractions (as an
    operator caps each process: vLLM's gpu_memory_utilization, PyTorch's per-process
    memory fraction), not isolated by hardware.

    * ``slice_s`` 2 ms: NVIDIA's short compute time slice (``nvidia-smi compute-policy
      --set-timeslice``; Red Hat AI services, "GPU Timeslicing", etx-serving-at-scale
      module 2);
    * ``context_switch_s`` 40 us: a labelled reconstruction, the time to save and
      restore the on-chip state of an H100 (132 SMs x (256 KiB registers + 228 KiB
      shared memory) = 62 MiB, each way at 3.35 TB/s HBM); swept in
      ``scenarios/colocate-robustness.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: Literal["exclusive", "time-sliced", "partition"] = Field(
        default="exclusive", description="sharing model of a GPU several workloads hold"
    )
    fractions: dict[str, float] = Field(
        default_factory=dict,
        description="workload name -> its fraction of a shared GPU (0-1]: compute and "
        "memory under partition, memory under time-sliced; the owners not named split the "
        "rest equally",
    )
    slice_s: float = Field(default=0.002, gt=0.0, description="time-sliced: slice length (s)")
    context_switch_s: float = Field(
        default=40e-6, ge=0.0, description="time-sliced: cost of one context switch (s)"
    )

    @model_validator(mode="after")
    def _check(self) -> SharingConfig:
        if self.context_switch_s >= self.slice_s:
            raise ValueError("context_switch_s must be shorter than slice_s")
        bad = {k: v for k, v in self.fractions.items() if not 0.0 < v <= 1.0}
        if bad:
            raise ValueError(f"fractions must be in (0, 1]: {bad}")
        return self


@dataclass(frozen=True)
class Member:
    """One workload of a multi-workload scenario, validated."""

    name: str
    cls: Any
    params: Any
    policies: dict[str, Any]
    devices: tuple[str, ...]
    patterns: tuple[str, ...] | None


@dataclass(frozen=True)
class Colocation:
    """The validated ``workloads:``, ``sharing:`` and ``policies.arbiter``."""

    members: tuple[Member, ...]
    arbiter: Any
    sharing: SharingConfig
    #: device -> the workloads naming it (only devices with two or more)
    shared: dict[str, tuple[str, ...]]
    #: the validated ``faults:`` block (workloads.colocate.faults.FaultsConfig); None: none
    faults: Any = None

    @property
    def kind(self) -> str:
        """The members' kinds, ``+``-joined (what ``hetsim validate`` prints)."""
        return "+".join(m.params.kind for m in self.members)


class ColocatedWorkloads:
    """Stands where a single-form scenario has its workload class (``workload_cls``): the
    flattened metric names (``<workload>.<metric>``) a sweep and the CLI read, and the
    summed work estimate the budget check reads; its ``workload`` is the
    :class:`Colocation`. Built per scenario by :func:`_stand_in`."""

    metrics: ClassVar[dict[str, str]] = {}

    @classmethod
    def estimate_work(cls, col: Colocation) -> Any:
        """The members' estimates summed (None when no member has one)."""
        from hetsim.simulator.budget import WorkEstimate

        parts = [m.cls.estimate_work(m.params) for m in col.members]
        parts = [e for e in parts if e is not None]
        if not parts:
            return None
        mem = sum(e.memory_bytes or 0 for e in parts) or None
        return WorkEstimate(sum(e.events for e in parts), mem, "; ".join(e.basis for e in parts))


def _stand_in(members: list[Member], faults: bool = False) -> type[ColocatedWorkloads]:
    from hetsim.workloads.colocate.report import CLUSTER_METRICS

    metrics = {f"{m.name}.{k}": v for m in members for k, v in m.cls.metrics.items()}
    metrics.update({f"cluster.{k}": v for k, v in CLUSTER_METRICS.items()})
    if faults:  # the fault columns (workloads.colocate.faults)
        from hetsim.workloads.colocate import faults as f

        for m in members:
            more = f.SERVING_METRICS if m.params.kind == "serving" else f.TRAINING_METRICS
            metrics.update({f"{m.name}.{k}": v for k, v in more.items()})
        metrics.update({f"cluster.{k}": v for k, v in f.CLUSTER_METRICS.items()})
    return type("ColocatedWorkloads", (ColocatedWorkloads,), {"metrics": metrics})


def resolved_colocation(col: Colocation) -> dict[str, Any]:
    """The ``workloads:``, ``sharing:`` and ``policies:`` blocks with defaults filled."""
    wl = {}
    for m in col.members:
        wl[m.name] = {
            **m.params.model_dump(mode="json"),
            "devices": list(m.devices),
            "policies": {p: {"name": c.name, **c.params.model_dump(mode="json")}
                         for p, c in sorted(m.policies.items())},
        }  # fmt: skip
    a = col.arbiter
    arbiter = {"name": a.name, **a.params.model_dump(mode="json")}
    out = {"workloads": wl, "sharing": col.sharing.model_dump(mode="json"),
           "policies": {"arbiter": arbiter}}  # fmt: skip
    if col.faults is not None:
        out["faults"] = col.faults.model_dump(mode="json")
    return out
