"""KAIOPS-style detector on telemetry (Kuaishou; abstract only): temporal context per
rank and operator, a threshold set for rare anomalies, rule-based root cause.

The abstract names three parts: temporal context encoding of each component's metrics
(long-term trends and the context in which a fault evolves), a detector trained with a
dynamic class-weighted loss because anomalies are rare, and root-cause analysis over a
knowledge graph. Nothing else is public (``shared/papers/elastic-observability.md``
section 4). This policy reads the same per-rank, per-operator telemetry as Kair and
rebuilds each part from what the abstract says, every constant a parameter:

1. Temporal context: per rank and operator, the window's median operator time relative
   to the iteration's median rank (what all ranks share cancels), divided by the rank's
   own exponentially weighted history of that ratio (weight ``history_weight`` per
   window; windows in which the rank is flagged do not update it). Its log is the
   feature: 0 for a rank behaving as it always did, whatever its persistent speed.
   Medians make one-off hiccups invisible.
2. Rare-class detection: the feature's robust z-score over ranks (median and 1.4826 x
   MAD; a floor ``min_scale`` on the scale keeps a quiet window from amplifying noise),
   flagged above ``z`` for ``persistence`` consecutive windows. A high ``z`` is what a
   class-weighted loss does to a detector's operating point when faults are rare: it
   trades some recall for few false alarms (the threshold stands for the trained model).
3. Root cause: the operator with the largest z names the cause through a fixed map
   (``dataload``, ``forward``, ``backward``: compute; ``send``: communication), the role
   the knowledge graph plays.

A rank needs ``warmup_windows`` windows of history before it is scored. The oracle
model of KAIOPS (``kaiops``, reading the injected faults) stays as the labelled upper
bound of what such a detector could achieve.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from hetsim.simulator.registry import policies
from hetsim.workloads.observability.view import Finding, WindowView

MAD_TO_SIGMA = 1.4826
"""Scale of the median absolute deviation to a normal standard deviation."""


class KaiopsTelemetryParams(BaseModel):
    """History weight, warm-up, threshold, persistence (all reconstruction)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    history_weight: float = Field(
        default=0.2,
        gt=0,
        le=1,
        description="Weight of the newest unflagged window in each rank's "
        "exponentially weighted history (reconstruction).",
    )
    warmup_windows: PositiveInt = Field(
        default=1, description="Windows of history a rank needs before it is scored."
    )
    z: float = Field(
        default=6.0,
        gt=0,
        description="Robust z-score above which a rank's feature is anomalous (high: "
        "few false alarms when faults are rare; reconstruction).",
    )
    min_scale: float = Field(default=0.01, gt=0, description="floor of the robust scale (log)")
    persistence: PositiveInt = Field(
        default=1, description="Consecutive anomalous windows before a rank is reported."
    )
    max_findings: int = Field(
        default=16, ge=1, description="Most ranks reported per window, highest score first."
    )


@policies.register("observability.detector", "kaiops-telemetry")
class KaiopsTelemetryDetector:
    """KAIOPS-style (reconstruction): per-operator temporal context against each rank's
    own history, a rare-anomaly threshold, a fixed operator-to-cause map."""

    Params = KaiopsTelemetryParams

    def __init__(self, params: KaiopsTelemetryParams, rng: np.random.Generator) -> None:
        self.params = params
        self.history: np.ndarray | None = None  # ops x ranks: EWMA of the relative median
        self.seen: np.ndarray | None = None  # windows in each rank's history
        self.streak: np.ndarray | None = None  # consecutive anomalous windows per rank

    def features(self, view: WindowView) -> np.ndarray:
        """ops x ranks: the window's median operator time relative to the iteration's
        median rank (not yet against the history)."""
        op = view.op_s  # ops x ranks x iterations
        median_rank = np.median(op, axis=1, keepdims=True)
        rel = op / np.where(median_rank > 0, median_rank, 1.0)
        return np.asarray(np.median(rel, axis=2))

    def detect(self, view: WindowView) -> tuple[Finding, ...]:
        """Ranks anomalous for ``persistence`` windows, highest score first."""
        p = self.params
        rel = self.features(view)
        n = rel.shape[1]
        if self.history is None or self.history.shape != rel.shape:
            self.history = rel.copy()
            self.seen = np.zeros(n, dtype=int)
            self.streak = np.zeros(n, dtype=int)
            self.seen += 1
            return ()
        assert self.seen is not None and self.streak is not None
        dev = np.log(np.maximum(rel, 1e-12) / np.maximum(self.history, 1e-12))
        centre = np.median(dev, axis=1, keepdims=True)
        scale = MAD_TO_SIGMA * np.median(np.abs(dev - centre), axis=1, keepdims=True)
        z = (dev - centre) / np.maximum(scale, p.min_scale)  # ops x ranks
        score = z.max(axis=0)
        anomalous = (score > p.z) & (self.seen >= p.warmup_windows)
        self.streak = np.where(anomalous, self.streak + 1, 0)
        flagged = np.flatnonzero(self.streak >= p.persistence)
        calm = ~anomalous
        w = p.history_weight
        self.history[:, calm] = (1 - w) * self.history[:, calm] + w * rel[:, calm]
        self.seen[calm] += 1
        order = flagged[np.argsort(-score[flagged], kind="stable")][: p.max_findings]
        out = []
        for r in order:
            op = view.ops[int(np.argmax(z[:, r]))]
            out.append(Finding(int(r), view.cause_of(op), op, float(score[r])))
        return tuple(out)
