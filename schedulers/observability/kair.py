"""Kair (ASE'25 Industry Showcase; Beihang, Kuaishou, Leeds): hierarchical straggler
localisation: KS test per rank, operator z-scores, causal tracing to compute or network.

Only the abstracts are public; this is a reconstruction of the three steps they name
(``shared/papers/elastic-observability.md`` section 3.2), every constant a parameter:

1. Worker test: the two-sample KS statistic D_w of rank w's per-iteration self time
   (dataload + forward + backward + own link time) against the pooled other ranks; flag
   when ``D_w > c(alpha') sqrt((n + m)/(n m))`` and the rank's median exceeds the pool's
   by ``min_effect`` (one-sided: slow, not fast). ``alpha' = alpha / N`` with
   ``bonferroni`` (reconstruction: N tests per window would otherwise raise about
   alpha x N false alarms each window).
2. Operator test: ``z_{w,o}`` of each operator's window mean across ranks; the flagged
   rank's top operator is reported if ``|z| > op_z``.
3. Causal tracing: the flagged rank's lateness at the collective (median over
   iterations of its entry time minus the median rank's) against its excess link time
   (its send time minus the median rank's). Skewed entries (lateness larger) point to
   the rank's own computation; aligned entries with a slow collective point to the
   network.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.schedulers.observability.stats import ks_critical, ks_vs_pooled_others, zscore
from hetsim.simulator.registry import policies
from hetsim.workloads.observability.view import Cause, Finding, WindowView


class KairParams(BaseModel):
    """KS level, multiple-test correction, minimum effect, operator z threshold."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    alpha: float = Field(default=0.01, gt=0, lt=1)
    bonferroni: bool = True
    min_effect: float = Field(default=0.02, ge=0)  # rank median >= (1 + e) x pooled median
    op_z: float = Field(default=3.0, gt=0)
    max_findings: int = Field(default=16, ge=1)


@policies.register("observability.detector", "kair")
class KairDetector:
    """Kair (reconstruction): KS per rank vs pooled others, operator z, causal tracing."""

    Params = KairParams

    def __init__(self, params: KairParams, rng: np.random.Generator) -> None:
        self.params = params

    def detect(self, view: WindowView) -> tuple[Finding, ...]:
        """Divergent slow ranks, largest D first, each with its cause and operator."""
        flagged, d = self.divergent_ranks(view)
        if len(flagged) == 0:
            return ()
        z_op = zscore(view.op_s.mean(axis=2), axis=1)  # ops x ranks
        entry = view.entry_s
        send = view.op_s[view.ops.index("send")]
        typical = (np.median(entry, axis=0), np.median(send, axis=0))  # per iteration
        out = []
        for r in flagged[: self.params.max_findings]:
            cause = self.trace_cause(entry[r], send[r], *typical)
            out.append(Finding(int(r), cause, self._operator(view, z_op[:, r], cause), float(d[r])))
        return tuple(out)

    def divergent_ranks(self, view: WindowView) -> tuple[np.ndarray, np.ndarray]:
        """Step 1: ranks whose self-time distribution differs (slow side), by D descending."""
        self_s = view.op_s.sum(axis=0)
        n, w = self_s.shape
        d = ks_vs_pooled_others(self_s)
        alpha = self.params.alpha / n if self.params.bonferroni else self.params.alpha
        crit = ks_critical(alpha, w, (n - 1) * w)
        med = np.median(self_s, axis=1)
        slow = med > (1.0 + self.params.min_effect) * np.median(self_s)
        flagged = np.flatnonzero((d > crit) & slow)
        return flagged[np.argsort(-d[flagged], kind="stable")], d

    def _operator(self, view: WindowView, z: np.ndarray, cause: Cause) -> str:
        """Step 2: the operator with the largest z among those of the traced cause."""
        allowed = [
            i for i, op in enumerate(view.ops) if (op in view.compute_ops) == (cause == "compute")
        ]
        best = max(allowed, key=lambda i: z[i])
        return view.ops[best] if abs(z[best]) > self.params.op_z else "unclear"

    @staticmethod
    def trace_cause(entry_s: np.ndarray, send_s: np.ndarray, median_entry_s: np.ndarray,
                    median_send_s: np.ndarray) -> Cause:  # fmt: skip
        """Step 3: late entry at the collective -> compute; aligned entry -> communication.
        One rank's entry and link times per iteration against the window's per-iteration
        medians over ranks (computed once per window by :meth:`detect`)."""
        lateness = np.median(entry_s - median_entry_s)
        excess = np.median(send_s - median_send_s)
        return "compute" if lateness >= excess else "communication"
