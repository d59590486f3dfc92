"""Per-rank z-score baseline: flag ranks whose mean self time is an outlier among ranks.

The common statistical baseline of straggler detectors: z = (mean_r - mean) / std over
ranks of the window's mean self time, flagged one-sided above ``z``. The cause comes
from the operator with the largest per-operator z-score of the flagged rank (``send``
means communication, any other operator compute). Means are sensitive to one-off
hiccups, which is the weakness Kair's distribution test avoids.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.schedulers.observability.stats import zscore
from hetsim.simulator.registry import policies
from hetsim.workloads.observability.view import Finding, WindowView


class ZScoreParams(BaseModel):
    """``z``: one-sided threshold on the rank's z-score of mean self time."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    z: float = Field(
        default=3.0,
        gt=0,
        description="One-sided threshold on a rank's z-score of mean self time among ranks.",
    )
    max_findings: int = Field(
        default=16, ge=1, description="Most ranks reported per window, highest z first."
    )


@policies.register("observability.detector", "zscore")
class ZScoreDetector:
    """Baseline: per-rank z-score of mean self time; cause from the worst operator's z."""

    Params = ZScoreParams

    def __init__(self, params: ZScoreParams, rng: np.random.Generator) -> None:
        self.params = params

    def detect(self, view: WindowView) -> tuple[Finding, ...]:
        """Ranks with z above the threshold, highest z first."""
        z_rank = zscore(view.op_s.sum(axis=0).mean(axis=1))
        flagged = np.flatnonzero(z_rank > self.params.z)
        order = flagged[np.argsort(-z_rank[flagged], kind="stable")][: self.params.max_findings]
        if len(order) == 0:
            return ()
        z_op = zscore(view.op_s.mean(axis=2), axis=1)  # ops x ranks
        out = []
        for r in order:
            op = view.ops[int(np.argmax(z_op[:, r]))]
            out.append(Finding(int(r), view.cause_of(op), op, float(z_rank[r])))
        return tuple(out)
