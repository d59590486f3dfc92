"""Kair (ASE'25 Industry Showcase; Beihang, Kuaishou, Leeds): hierarchical straggler
localisation: KS test per rank, operator z-scores, causal tracing to compute or network.

Only the abstracts are public; this is a reconstruction of the three steps they name
(``shared/papers/elastic-observability.md`` section 3.2), every constant a parameter:

1. Worker test: the two-sample KS statistic D_w of rank w's per-iteration self time
   (dataload + forward + backward + own link time) against a baseline; flag when
   ``D_w > c(alpha') sqrt((n + m)/(n m))`` and the rank's median exceeds the baseline's
   by ``min_effect`` (one-sided: slow, not fast). ``alpha' = alpha / N`` with
   ``bonferroni`` (reconstruction: N tests per window would otherwise raise about
   alpha x N false alarms each window). The baseline (``baseline``):

   * ``temporal`` (default): the rank's own history. Each iteration's self times are
     divided by that iteration's median over ranks (removing what all ranks share: the
     per-iteration noise, a job-wide change of pace), and rank w's window is tested
     against its own last ``history_windows`` windows in which it was not flagged. A
     healthy rank that is persistently a few percent slower or faster than the others
     (Alibaba PAI 2020 measures a per-worker spread of 0.091, std of logs, on shared
     GPUs) matches its own history and is not flagged; a rank that slows down does not.
     A rank needs one window of history before it can be tested, so a straggler
     present from the job's first iteration is not found.
   * ``pooled``: the other ranks of the same window, pooled (a spatial test: it needs
     no history, and it reads every persistent per-rank offset as a straggler).
2. Operator test: ``z_{w,o}`` of each operator's window mean across ranks; the flagged
   rank's top operator is reported if ``|z| > op_z``.
3. Causal tracing: the flagged rank's lateness at the collective (median over
   iterations of its entry time minus the median rank's) against its excess link time
   (its send time minus the median rank's). Skewed entries (lateness larger) point to
   the rank's own computation; aligned entries with a slow collective point to the
   network.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.schedulers.observability.stats import (
    ks_2samp_statistic,
    ks_critical,
    ks_vs_pooled_others,
    zscore,
)
from hetsim.simulator.registry import policies
from hetsim.workloads.observability.view import Cause, Finding, WindowView


class KairParams(BaseModel):
    """KS level, baseline, multiple-test correction, minimum effect, operator z threshold."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    baseline: Literal["temporal", "pooled"] = Field(
        default="temporal",
        description="what a rank's self times are tested against: its own history "
        "(relative to each iteration's median rank) or the pooled other ranks",
    )
    history_windows: int = Field(
        default=4, ge=1, description="temporal baseline: unflagged windows kept per rank"
    )
    alpha: float = Field(
        default=0.01,
        gt=0,
        lt=1,
        description="Significance level of each rank's one-sided KS test (reconstruction).",
    )
    bonferroni: bool = Field(
        default=True,
        description="Divide alpha by the number of ranks tested "
        "per window (Bonferroni correction).",
    )
    min_effect: float = Field(
        default=0.02,
        ge=0,
        description="A flagged rank's median self time must exceed the baseline's "
        "by this share: median >= (1 + e) x baseline median.",
    )
    op_z: float = Field(
        default=3.0,
        gt=0,
        description="Operator z-score a flagged rank's top operator "
        "must exceed to be named (else unclear).",
    )
    max_findings: int = Field(
        default=16, ge=1, description="Most ranks reported per window, largest KS statistic first."
    )


@policies.register("observability.detector", "kair")
class KairDetector:
    """Kair (ASE'25, reconstruction): KS per rank against its own history (or the pooled
    other ranks), operator z-scores, causal tracing."""

    Params = KairParams

    def __init__(self, params: KairParams, rng: np.random.Generator) -> None:
        self.params = params
        self.history: np.ndarray | None = None  # ranks x samples, newest last; NaN: empty
        self.history_n: np.ndarray | None = None  # valid samples per rank

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
        if self.params.baseline == "temporal":
            return self._divergent_from_history(view)
        return self._divergent_from_pool(view)

    def _divergent_from_history(self, view: WindowView) -> tuple[np.ndarray, np.ndarray]:
        """Each rank's window (relative to the iteration's median rank) against its own
        unflagged history; the window then joins the history of every unflagged rank."""
        self_s = view.op_s.sum(axis=0)
        n, w = self_s.shape
        rel = self_s / np.median(self_s, axis=0, keepdims=True)
        if self.history is None or self.history.shape[0] != n:
            self.history = np.full((n, self.params.history_windows * w), np.nan)
            self.history_n = np.zeros(n, dtype=int)
        assert self.history_n is not None
        cap = self.history.shape[1]  # set by the first window (the last may be shorter)
        d = np.zeros(n)
        alpha = self.params.alpha / n if self.params.bonferroni else self.params.alpha
        known = self.history_n > 0
        hist_med = np.full(n, np.inf)
        if known.any():
            hist_med[known] = np.nanmedian(self.history[known], axis=1)
        slow = np.median(rel, axis=1) > (1.0 + self.params.min_effect) * hist_med
        for r in np.flatnonzero(slow):  # the KS test only where the effect is there
            past = self.history[r, cap - self.history_n[r] :]
            d[r] = ks_2samp_statistic(rel[r], past)
            if d[r] <= ks_critical(alpha, w, len(past)):
                slow[r] = False
        flagged = np.flatnonzero(slow)
        keep = np.ones(n, dtype=bool)
        keep[flagged] = False
        self.history[keep] = np.concatenate([self.history[keep], rel[keep]], axis=1)[:, -cap:]
        self.history_n[keep] = np.minimum(self.history_n[keep] + w, cap)
        return flagged[np.argsort(-d[flagged], kind="stable")], d

    def _divergent_from_pool(self, view: WindowView) -> tuple[np.ndarray, np.ndarray]:
        """Each rank against the pooled other ranks of the same window."""
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
        allowed = [i for i, op in enumerate(view.ops) if view.cause_of(op) == cause]
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
