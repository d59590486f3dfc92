"""Read-only views the observability mechanisms hand to their policies, and the decisions.

Arrays in a view are numpy arrays with ``writeable = False``; everything else is an
immutable tuple. No view a detector gets carries ground truth, except the ``Oracle*``
views, which only a detector declaring ``oracle = True`` (a black-box model whose accuracy
is given rather than simulated, KAIOPS-style: an upper bound, reported in its own table)
receives: the injected faults a real detector would have to infer.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple, Protocol

import numpy as np

Cause = Literal["compute", "communication", "unknown"]
Action = Literal["evict", "restart", "ignore"]


class OracleFault(NamedTuple):
    """One injected fault active now (ground truth; only in ``Oracle*`` views)."""

    fault_id: int
    category: str  # fail-stop or fail-slow
    kind: str  # cause of a fail-stop fault or kind of a fail-slow one
    cause: str  # compute / communication (fail-slow); component (fail-stop)
    rank: int
    start_s: float
    age_s: float  # now - start_s


class WindowView(NamedTuple):
    """Telemetry of one analysis window: ``W`` iterations of ``N`` ranks.

    ``op_s[o, r, i]`` is operator ``ops[o]`` of rank r in iteration i (``send`` is the
    rank's own link time in the all-reduce); ``entry_s[r, i]`` is when rank r reached
    the all-reduce, from the iteration's start; ``comm_s[i]`` the collective's duration.
    """

    now_s: float
    window: int
    first_iteration: int
    window_s: float  # wall time the window's iterations took
    ops: tuple[str, ...]
    compute_ops: tuple[str, ...]
    op_s: np.ndarray
    entry_s: np.ndarray
    comm_s: np.ndarray
    iteration_s: np.ndarray

    @property
    def ranks(self) -> int:
        """Number of ranks N."""
        return int(self.op_s.shape[1])

    def cause_of(self, op: str) -> Cause:
        """The cause an operator's slowness points to: a compute operator's is compute,
        the all-reduce's (``send``) communication."""
        return "compute" if op in self.compute_ops else "communication"


class OracleWindowView(NamedTuple):
    """A window's telemetry plus the faults active in it (ground truth), for an oracle
    detector (``oracle = True``) only."""

    window: WindowView
    faults: tuple[OracleFault, ...]


class Finding(NamedTuple):
    """A detector's verdict: this rank straggles, because of this, in this operator."""

    rank: int
    cause: Cause
    operator: str
    score: float


class OracleEventView(NamedTuple):
    """A fault as a job-level mechanism shows it to a black-box detector model (ground
    truth: such a model is an oracle whose accuracy is given, not simulated)."""

    now_s: float
    fault: OracleFault


class Detection(NamedTuple):
    """A black-box detector's verdict on one fault: found after ``delay_s``, or missed."""

    detected: bool
    delay_s: float
    cause: str


class JobView(NamedTuple):
    """The job as a black-box detector sees it when sampling its false alarms."""

    gpus: int
    horizon_s: float


class MitigationView(NamedTuple):
    """A straggler finding and what each remedy would cost (mechanism's estimates)."""

    now_s: float
    finding: Finding
    slowdown: float  # iteration-time ratio now vs nominal (1 = healthy)
    since_checkpoint_s: float  # work lost by a restart from the last checkpoint
    restart_s: float  # time to restart the job from a checkpoint
    replace_s: float  # time to evict the rank and bring in a spare


class CheckpointView(NamedTuple):
    """What a checkpoint-interval policy knows: costs and the expected failure rate."""

    checkpoint_s: float  # time to write one checkpoint (training paused)
    recovery_s: float  # expected detection + restart time after a fail-stop fault
    mtbf_s: float  # expected job mean time between fail-stop faults
    iteration_s: float  # nominal iteration time


class WindowDetector(Protocol):
    """Decision point ``observability.detector`` on per-rank telemetry (a detector with
    ``oracle = True`` gets an :class:`OracleWindowView` instead)."""

    def detect(self, view: WindowView) -> tuple[Finding, ...]:
        """Ranks found straggling in this window, most certain first."""
        ...


class EventDetector(Protocol):
    """A detector modelled as a black box, usable by the job-level fault mechanism."""

    def classify(self, view: OracleEventView) -> Detection:
        """Whether, how fast and as what the fault is found."""
        ...

    def false_alarms(self, view: JobView) -> np.ndarray:
        """Times (s) of false alarms over the job's horizon."""
        ...


# ---- closed forms shared by checkpoint policies and the job's report ----------------


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young (1974): work between checkpoints ``sqrt(2 C M)``."""
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly (2006) higher-order optimum, valid for C < 2M (else M):
    ``sqrt(2CM) [1 + sqrt(C/2M)/3 + (C/2M)/9] - C``."""
    c, m = checkpoint_s, mtbf_s
    if c >= 2.0 * m:
        return m
    x = c / (2.0 * m)
    return math.sqrt(2.0 * c * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - c
