"""HybriMoE (DAC'25) impact-driven prefetch.

The current hidden state predicts the experts of the next ``lookahead_layers`` layers
(default 3, the paper). For each uncached predicted expert, its *impact* is the
reduction of its layer's simulated makespan (the HSS greedy of
:mod:`schedulers.moe.hss`, run on the mechanism's estimates) when that expert is
cached. The highest-impact expert is prefetched, the simulation updated, and so on
while the copy engine is idle: a copy is issued only if it would start before the
current layer's barrier. Ties go to the nearer layer, then the more probable expert.

Reconstruction: the paper gives no formula for the idle-PCIe test or for the state of
later layers. Here each later layer is simulated from idle resources with its other
predicted experts' residency as now, and a candidate counts only if its copy would
arrive before its layer starts, estimated as ``depth`` times the current layer's
duration from now (a late copy would leave the expert to the CPU anyway). Decode only by
default (in prefill the copy engine is busy with demand loads). The public code instead
prefetches by MRS score (``prefetch_size``, default 0).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from schedulers.moe.hss import hss
from schedulers.moe.view import LookaheadLayer, PrefetchView
from simulator.registry import policies

Best = tuple[float, int, float, int, int]  # impact, -depth, probability, layer pos, index
Key = tuple[tuple[float, ...], tuple[float, ...], tuple[bool, ...], tuple[int, ...]]


Costs = tuple[tuple[float, ...], tuple[float, ...], tuple[int, ...]]


def _costs(la: LookaheadLayer) -> Costs:
    return tuple(la.gpu_s.tolist()), tuple(la.cpu_s.tolist()), tuple(la.loads.tolist())


class ImpactPrefetchParams(BaseModel):
    """``lookahead_layers``: layers predicted ahead; ``max_per_layer``: copies issued at
    one layer at most; ``min_impact_s``: smallest makespan reduction worth a copy."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    lookahead_layers: int = Field(3, ge=1, le=8)
    max_per_layer: int = Field(4, ge=1)
    min_impact_s: float = Field(0.0, ge=0)
    decode_only: bool = True


@policies.register("moe.prefetch", "impact")
class ImpactPrefetch:
    """HybriMoE: prefetch the experts whose caching shortens later layers the most."""

    Params = ImpactPrefetchParams

    def __init__(self, params: ImpactPrefetchParams, rng: np.random.Generator) -> None:
        self.params = params
        self.lookahead_layers = params.lookahead_layers
        self._memo: dict[Key, float] = {}

    def makespan(self, la: LookaheadLayer, cached: list[bool], view: PrefetchView) -> float:
        """Simulated makespan of a later layer with ``cached`` residency (memoised)."""
        return self._makespan(_costs(la), cached, view)

    def _makespan(self, costs: Costs, cached: list[bool], view: PrefetchView) -> float:
        key: Key = (costs[0], costs[1], tuple(cached), costs[2])
        hit = self._memo.get(key)
        if hit is None:
            zeros = [0.0] * len(cached)
            hit = hss(list(key[0]), list(key[1]), cached, zeros, list(key[3]), view.copy_s,
                      cpu_first_s=view.cpu_first_s).makespan_s  # fmt: skip
            self._memo[key] = hit
        return hit

    def _best(self, view: PrefetchView, state: list[list[bool]], arrive_s: float) -> Best | None:
        best: Best | None = None
        for li, la in enumerate(view.lookahead):
            if arrive_s > la.depth * view.layer_end_s:
                continue  # would land after its layer starts: no impact counted
            costs = _costs(la)
            base = self._makespan(costs, state[li], view)
            for i, c in enumerate(state[li]):
                if c:
                    continue
                trial = state[li].copy()
                trial[i] = True
                gain = base - self._makespan(costs, trial, view)
                cand = (gain, -la.depth, float(la.probs[la.predicted[i]]), li, i)
                if best is None or cand[:3] > best[:3]:
                    best = cand
        return best

    def prefetch(self, view: PrefetchView) -> tuple[tuple[int, int], ...]:
        """Highest-impact experts while the copy engine would otherwise idle."""
        if self.params.decode_only and view.phase != "decode":
            return ()
        state = [la.cached.tolist() for la in view.lookahead]
        t = view.pcie_free_s
        out: list[tuple[int, int]] = []
        while t < view.layer_end_s and len(out) < self.params.max_per_layer:
            best = self._best(view, state, t + view.copy_s)
            if best is None or best[0] <= self.params.min_impact_s:
                break
            li, i = best[3], best[4]
            state[li][i] = True
            la = view.lookahead[li]
            out.append((la.layer, int(la.predicted[i])))
            t += view.copy_s
        return tuple(out)
