"""What every workload kind provides to the engine.

A workload kind is a class registered in ``simulator.registry.workloads`` by name. It
declares a pydantic ``Params`` model (the scenario's ``workload:`` block), its decision
points with their default policies, and its summary metrics with written definitions.
The runner builds the cluster, instantiates the policies the scenario names at those
decision points, constructs the workload, calls :meth:`Workload.start`, runs the
simulation until :attr:`Workload.done` fires (or ``until_s``), then asks for the summary.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import simpy
from pydantic import BaseModel, ConfigDict

from hetsim.devices.cluster import Cluster
from hetsim.simulator.budget import WorkEstimate
from hetsim.simulator.engine import InvariantViolation, Simulation


class WorkloadParams(BaseModel):
    """Base of every workload's parameter model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: str


class Workload(ABC):
    """The mechanism of one kind of study: it generates events and asks its policies."""

    Params: ClassVar[type[WorkloadParams]]
    #: decision point (short name) -> default policy name
    decision_points: ClassVar[dict[str, str]] = {}
    #: summary metric -> written definition (collected into the metrics page)
    metrics: ClassVar[dict[str, str]] = {}
    #: domain prefix of this kind's decision points in the policy registry
    domain: ClassVar[str] = ""

    def __init__(
        self,
        sim: Simulation,
        cluster: Cluster,
        params: Any,
        policies: Mapping[str, Any],
        base_dir: Path,
    ) -> None:
        self.sim = sim
        self.cluster = cluster
        self.params = params
        self.policies = dict(policies)
        self.base_dir = base_dir
        self.done: simpy.Event = sim.env.event()

    @abstractmethod
    def start(self) -> None:
        """Schedule the workload's first events (arrivals, set-up copies...)."""

    @abstractmethod
    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """One row of summary metrics (every key declared in :attr:`metrics`)."""

    @classmethod
    def estimate_work(cls, params: Any) -> WorkEstimate | None:
        """The run's work estimated from its parameters alone, before anything is built
        (:func:`simulator.budget.check_estimate` refuses one past the budget); None:
        small or unknown ahead of time."""
        return None

    def horizon_s(self) -> float | None:
        """A guess of the simulated end time, for progress bars (None if unknown)."""
        return None

    def request_times(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Arrival and completion times of every request (NaN: not completed), for the
        overload check of :mod:`simulator.overload`; None where requests do not arrive
        from outside (a training step, a job trace replayed to the end)."""
        return None

    def run_warnings(self, end_s: float) -> list[str]:
        """One-line warnings about how to read this run's figures (printed on stderr,
        kept in :attr:`Result.warnings`); none by default."""
        return []

    def warmup_problem(self, end_s: float) -> tuple[str, str] | None:
        """(field, message) when the run's warm-up cut left nothing to measure (the run
        ended, by ``until_s``, before any request past the warm-up completed); the
        runner turns it into a one-line error. None by default (no warm-up cut)."""
        return None

    def check(self) -> None:  # noqa: B027 - optional hook
        """Check the workload's own invariants at the end of a run (raise on violation)."""

    def check_partial(self) -> None:  # noqa: B027 - optional hook
        """Check the invariants that hold at any moment, when ``until_s`` ends a run
        before :attr:`done` (conservation with work in flight; raise on violation)."""


def conserve(
    what: str, total: int, completed: int, in_flight: int, waiting: int, dropped: int = 0
) -> None:
    """Conservation of ``what`` (requests, jobs, steps...): every one of ``total`` is
    completed, in flight, not yet arrived (``waiting``) or dropped with a reason; no
    count negative. Each count must come from its own source (a counter, a queue, a
    table), so that lost or doubled work shows as a mismatch; raises
    :class:`InvariantViolation` naming ``what`` and the counts."""
    counts = {"completed": completed, "in flight": in_flight, "not yet arrived": waiting,
              "dropped": dropped}  # fmt: skip
    negative = [k for k, v in counts.items() if v < 0]
    if negative or completed + in_flight + waiting + dropped != total:
        shown = ", ".join(f"{v} {k}" for k, v in counts.items())
        raise InvariantViolation(f"{what}: {shown} do not add up to {total}")


def check_steps(what: str, total: int, done: int, ends_s: Any, now_s: float) -> None:
    """Conservation of steps run one after another (iterations, decode steps,
    repetitions): ``done`` counted, one recorded end time each in ``ends_s``, in order,
    none after ``now_s``; at most one more in flight, the rest still to run."""
    ends = np.asarray(ends_s, dtype=float)
    if len(ends) != done:
        raise InvariantViolation(f"{what}: {done} counted done, {len(ends)} recorded")
    conserve(what, total, done, min(1, total - done), max(total - done - 1, 0))
    bad = ~((ends >= 0) & (ends <= now_s))  # NaN too
    bad[1:] |= ends[1:] < ends[:-1]
    if bad.any():
        k = int(np.argmax(bad))
        raise InvariantViolation(f"{what}: step {k} ends at {ends[k]} s, out of order or "
                                 f"outside [0, now = {now_s}] s")  # fmt: skip
