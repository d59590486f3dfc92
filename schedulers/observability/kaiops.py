"""KAIOPS-style detector (Kuaishou; abstract only): a black-box model of detection quality.

KAIOPS detects anomalies with temporal context encoding and a class-weighted loss and
roots causes with a knowledge graph and LLMs, at over 10,000 GPUs; no accuracy figures
are public. As the notes (section 4.2) suggest, it is modelled here, not reimplemented:
each fault class has a probability of ever being detected (``tpr``), a delay after its
start, and the root cause is right with probability ``rca_accuracy`` (otherwise the other
cause is reported); false alarms arrive at ``false_alarms_per_gpu_day`` on random GPUs.
Every number is a reconstruction; the defaults sit near Alibaba KAT's published 0.884
precision / 0.936 recall, a yardstick for such detectors. It reads the view's ground
truth, which only a black-box model may do: it declares ``oracle = True``, gets the
``Oracle*`` views, and is an upper bound reported apart from the simulated detectors.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from hetsim.simulator.limits import Seconds
from hetsim.simulator.registry import policies
from hetsim.workloads.observability.view import (
    Detection,
    Finding,
    JobView,
    OracleEventView,
    OracleWindowView,
)

SECONDS_PER_DAY = 86_400.0
OTHER_CAUSE = {"compute": "communication", "communication": "compute"}


DEFAULT_TPR = {"fail-stop": 0.99, "fail-slow": 0.9}
DEFAULT_DELAY_S = {"fail-stop": 30.0, "fail-slow": 300.0}


class KaiopsParams(BaseModel):
    """Per-class detection probability and delay; RCA accuracy; false-alarm rate.

    ``tpr`` and ``delay_s`` are keyed by a fault kind or, as a fallback, its category
    (``fail-stop``, ``fail-slow``); entries given in a scenario are laid over the
    defaults, so both category fallbacks always exist.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    tpr: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_TPR),
        description="Probability that a fault is ever detected, by fault kind or "
        "category (fail-stop 0.99, fail-slow 0.9; reconstruction).",
    )
    delay_s: dict[str, Seconds] = Field(
        default_factory=lambda: dict(DEFAULT_DELAY_S),
        description="Seconds from a fault's start to its detection, by fault kind or "
        "category (fail-stop 30, fail-slow 300; reconstruction).",
    )
    rca_accuracy: float = Field(
        default=0.9,
        ge=0,
        le=1,
        description="Probability that the reported root cause is right (else "
        "the other cause is reported; reconstruction).",
    )
    false_alarms_per_gpu_day: float = Field(
        default=1e-4,
        ge=0,
        description="False alarms per GPU-day, at random GPUs and times (reconstruction).",
    )

    @field_validator("tpr")
    @classmethod
    def _tpr(cls, v: dict[str, float]) -> dict[str, float]:
        bad = sorted(k for k, p in v.items() if not 0.0 <= p <= 1.0)
        if bad:
            raise ValueError(f"tpr must be in [0, 1]; not for {bad}")
        return {**DEFAULT_TPR, **v}

    @field_validator("delay_s")
    @classmethod
    def _delay(cls, v: dict[str, float]) -> dict[str, float]:
        bad = sorted(k for k, d in v.items() if not 0.0 <= d < math.inf)
        if bad:
            raise ValueError(f"delay_s must be finite and >= 0; not for {bad}")
        return {**DEFAULT_DELAY_S, **v}


@policies.register("observability.detector", "kaiops")
class KaiopsDetector:
    """KAIOPS-style black box: per-class true-positive rate, delay, RCA accuracy, false alarms."""

    Params = KaiopsParams
    #: reads the injected faults (ground truth): an oracle upper bound, labelled
    oracle = True

    def __init__(self, params: KaiopsParams, rng: np.random.Generator) -> None:
        self.params = params
        self.rng = rng
        self._fate: dict[int, Detection] = {}

    def _lookup(self, table: dict[str, float], kind: str, category: str) -> float:
        if kind in table:
            return table[kind]
        if category in table:
            return table[category]
        raise KeyError(f"kaiops: no entry for fault kind {kind!r} or category {category!r}")

    def classify(self, view: OracleEventView) -> Detection:
        """Decide once per fault: found (after its class delay) or missed, and as what."""
        f = view.fault
        if f.fault_id not in self._fate:
            p = self._lookup(self.params.tpr, f.kind, f.category)
            delay = self._lookup(self.params.delay_s, f.kind, f.category)
            found = bool(self.rng.random() < p)
            right = bool(self.rng.random() < self.params.rca_accuracy)
            cause = f.cause if right else OTHER_CAUSE.get(f.cause, "unknown")
            self._fate[f.fault_id] = Detection(found, delay, cause)
        return self._fate[f.fault_id]

    def false_alarms(self, view: JobView) -> np.ndarray:
        """Poisson false-alarm times over the horizon."""
        rate = self.params.false_alarms_per_gpu_day * view.gpus / SECONDS_PER_DAY
        n = int(self.rng.poisson(rate * view.horizon_s))
        return np.sort(self.rng.uniform(0.0, view.horizon_s, n))

    def detect(self, oracle: OracleWindowView) -> tuple[Finding, ...]:
        """Window form: report faults whose delay has passed, plus sampled false alarms."""
        view, out = oracle.window, []
        for f in oracle.faults:
            d = self.classify(OracleEventView(view.now_s, f))
            if d.detected and f.age_s >= d.delay_s:
                out.append(Finding(f.rank, d.cause, "model", 1.0))  # type: ignore[arg-type]
        rate = self.params.false_alarms_per_gpu_day * view.ranks / SECONDS_PER_DAY
        for _ in range(int(self.rng.poisson(rate * view.window_s))):
            out.append(Finding(int(self.rng.integers(view.ranks)), "compute", "model", 0.5))
        return tuple(out)
