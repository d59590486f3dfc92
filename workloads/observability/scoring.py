"""Scoring a detector against the injected ground truth.

A finding is *true* when its rank is the culprit of a fault active at some point of the
window it was made in; otherwise it is a false alarm. Rank precision is true findings
over all findings; rank recall is faults found at least once over faults injected.
For each cause c (compute, communication): precision is true findings that say c and
whose fault is of cause c over all findings that say c; recall is faults of cause c
whose first true finding said c over faults of cause c. F1 is 2PR / (P + R) (0 when
P + R = 0). Detection delay is the time of a fault's first true finding (the end of the
window that found it) minus the fault's start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

CAUSES = ("compute", "communication")


@dataclass
class Straggler:
    """One injected fail-slow fault of the telemetry workload, in iteration space."""

    fault_id: int
    kind: str
    cause: str
    rank: int
    start_iter: int
    end_iter: int  # exclusive; moved earlier when the rank is evicted
    factor: float
    start_s: float = math.nan
    detected_s: float = math.nan
    detected_cause: str = ""

    def active(self, first: int, last: int) -> bool:
        """Whether the fault overlaps iterations [first, last)."""
        return self.start_iter < last and self.end_iter > first


@dataclass
class Tally:
    """Running counts of findings (one per finding), by verdict and stated cause."""

    findings: int = 0
    true_findings: int = 0
    said: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0))
    said_right: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0))

    def add(self, cause: str, fault: Straggler | None) -> None:
        """Count one finding stating ``cause``; ``fault`` is the matched fault or None."""
        self.findings += 1
        if cause in self.said:
            self.said[cause] += 1
        if fault is None:
            return
        self.true_findings += 1
        if cause == fault.cause and cause in self.said_right:
            self.said_right[cause] += 1


def f1(p: float, r: float) -> float:
    """Harmonic mean of precision and recall (0 when both are 0)."""
    return 2.0 * p * r / (p + r) if p + r > 0 else 0.0


def _ratio(a: int, b: int) -> float:
    return a / b if b else 0.0


def score(faults: list[Straggler], tally: Tally, windows: int, ranks: int) -> dict[str, float]:
    """Precision, recall, F1 by rank and by cause; delays; false-alarm rates."""
    found = [f for f in faults if not math.isnan(f.detected_s)]
    p = _ratio(tally.true_findings, tally.findings)
    r = _ratio(len(found), len(faults))
    out = {
        "faults_injected": float(len(faults)),
        "faults_detected": float(len(found)),
        "findings": float(tally.findings),
        "false_findings": float(tally.findings - tally.true_findings),
        "rank_precision": p,
        "rank_recall": r,
        "rank_f1": f1(p, r),
        "false_alarms_per_window": _ratio(tally.findings - tally.true_findings, windows),
        "false_alarm_rank_rate": _ratio(tally.findings - tally.true_findings, windows * ranks),
    }
    for c in CAUSES:
        of_c = [f for f in faults if f.cause == c]
        pc = _ratio(tally.said_right[c], tally.said[c])
        rc = _ratio(sum(f.detected_cause == c for f in of_c), len(of_c))
        short = "comm" if c == "communication" else c
        out |= {f"{short}_precision": pc, f"{short}_recall": rc, f"{short}_f1": f1(pc, rc)}
    delays = np.array([f.detected_s - f.start_s for f in found])
    out["mean_delay_s"] = float(delays.mean()) if len(delays) else math.nan
    out["p50_delay_s"] = float(np.median(delays)) if len(delays) else math.nan
    return out
