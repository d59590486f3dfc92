"""What an arbiter sees and returns (the ``arbiter`` decision point's contract)."""

from __future__ import annotations

from typing import Literal, NamedTuple

Estimator = Literal["last-window", "ewma"]
"""The serving-load estimators an arbiter may name (workloads/colocate/estimators.py)."""


class ArbiterView(NamedTuple):
    """One arbiter period: the serving load estimate (from past arrivals only), what
    serving holds and could use, and what the harvesting workloads hold."""

    now_s: float
    #: estimated serving arrival rate (req/s; the policy's named estimator), None: no serving
    serving_rate_per_s: float | None
    #: GPUs in serving instances (loading, serving or draining)
    serving_busy_gpus: int
    #: GPUs serving may scale out onto now (its free GPUs not lent)
    serving_free_gpus: int
    #: mean goodput per GPU of serving's instances (req/s per GPU; the sizing estimate)
    serving_rps_per_gpu: float
    #: serving GPUs lent to harvesting workloads (including ones being returned)
    lent_gpus: int
    #: lent GPUs on their way back (a checkpoint in progress)
    returning_gpus: int
    #: serving's free GPUs a harvesting workload could run on
    lendable_gpus: int
    #: harvesting jobs waiting for GPUs
    harvest_waiting_jobs: int
    #: GPUs of one harvesting job's gang (lent GPUs are used in these units)
    harvest_gang_gpus: int = 1
    #: predicted (re)start of a job on lent GPUs, from its workload's profile (s)
    harvest_restore_s: float = 0.0
    #: predicted checkpoint of a preempted job, from its workload's profile (s)
    harvest_checkpoint_s: float = 0.0
    #: GPUs serving shares with a harvesting workload (``sharing:``; never lent)
    shared_gpus: int = 0
    #: of those, the ones training computes on now (the rest: paused, deferral.py)
    shared_train_gpus: int = 0
    #: serving's slowdown on a shared GPU while training runs there (the sharing model)
    shared_slowdown: float = 1.0
    #: serving's slowdown on a shared GPU while training is paused there
    shared_paused_slowdown: float = 1.0


class ArbiterDecision(NamedTuple):
    """GPUs to lend from serving to the harvesting workloads, and to take back; and on
    how many of the shared GPUs training may compute (None: unchanged)."""

    lend: int = 0
    reclaim: int = 0
    shared_train_gpus: int | None = None
