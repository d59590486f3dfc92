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

from hetsim.schedulers.moe.hss import hss
from hetsim.simulator.limits import Seconds
from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import LookaheadLayer, PrefetchView

Best = tuple[float, int, float, int, int]  # impact, -depth, probability, layer pos, index
# a later layer's cost inputs: GPU s, CPU s, loads of its predicted experts, copy s, CPU intercept
CostKey = tuple[tuple[float, ...], tuple[float, ...], tuple[int, ...], float, float]


def _bits(cached: list[bool]) -> int:
    """Residency of a layer's predicted experts as a bit set (bit i: expert i cached)."""
    bits = 0
    for i, c in enumerate(cached):
        if c:
            bits |= 1 << i
    return bits


class ImpactPrefetchParams(BaseModel):
    """``lookahead_layers``: layers predicted ahead; ``max_per_layer``: copies issued at
    one layer at most; ``min_impact_s``: smallest makespan reduction worth a copy."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    lookahead_layers: int = Field(3, ge=1, le=8)
    max_per_layer: int = Field(4, ge=1)
    min_impact_s: Seconds = Field(0.0, ge=0)
    decode_only: bool = True


@policies.register("moe.prefetch", "impact")
class ImpactPrefetch:
    """HybriMoE: prefetch the experts whose caching shortens later layers the most."""

    Params = ImpactPrefetchParams

    def __init__(self, params: ImpactPrefetchParams, rng: np.random.Generator) -> None:
        self.params = params
        self.lookahead_layers = params.lookahead_layers
        self._memo: list[dict[int, float]] = []  # [cost id][cached bits] -> makespan
        self._cost_ids: dict[CostKey, int] = {}
        self._inputs: list[CostKey] = []
        self._last: tuple[object, object, object, float, float, int] | None = None

    def makespan(self, la: LookaheadLayer, cached: list[bool], view: PrefetchView) -> float:
        """Simulated makespan of a later layer with ``cached`` residency (memoised)."""
        return self._span(self._cost_id(la, view), _bits(cached))

    def _cost_id(self, la: LookaheadLayer, view: PrefetchView) -> int:
        """A small id for the layer's cost inputs. The mechanism hands the same read-only
        arrays for every decode layer, so the last id is reused when they are the same
        objects (and not writeable, hence unchanged)."""
        last, arrays = self._last, (la.gpu_s, la.cpu_s, la.loads)
        if (
            last is not None
            and last[0] is arrays[0] and last[1] is arrays[1] and last[2] is arrays[2]
            and last[3] == view.copy_s and last[4] == view.cpu_first_s
            and not (
                arrays[0].flags.writeable or arrays[1].flags.writeable
                or arrays[2].flags.writeable
            )
        ):  # fmt: skip
            return last[5]
        key: CostKey = (
            tuple(la.gpu_s.tolist()), tuple(la.cpu_s.tolist()), tuple(la.loads.tolist()),
            view.copy_s, view.cpu_first_s,
        )  # fmt: skip
        cid = self._cost_ids.get(key)
        if cid is None:
            cid = self._cost_ids[key] = len(self._inputs)
            self._inputs.append(key)
            self._memo.append({})
        self._last = (*arrays, view.copy_s, view.cpu_first_s, cid)
        return cid

    def _span(self, cid: int, bits: int) -> float:
        memo = self._memo[cid]
        hit = memo.get(bits)
        if hit is None:
            gpu_s, cpu_s, loads, copy_s, cpu_first_s = self._inputs[cid]
            n = len(gpu_s)
            cached = [bool(bits >> i & 1) for i in range(n)]
            hit = hss(list(gpu_s), list(cpu_s), cached, [0.0] * n, list(loads), copy_s,
                      cpu_first_s=cpu_first_s).makespan_s  # fmt: skip
            memo[bits] = hit
        return hit

    def _best(
        self,
        view: PrefetchView,
        layers: list[tuple[int, list[float]]],
        state: list[int],
        arrive_s: float,
    ) -> Best | None:
        """The best candidate for a copy arriving at ``arrive_s``; ``layers``: each lookahead
        layer's (cost id, probabilities of its predicted experts), built once per call."""
        best: Best | None = None
        for li, la in enumerate(view.lookahead):
            if arrive_s > la.depth * view.layer_end_s:
                continue  # would land after its layer starts: no impact counted
            (cid, probs), bits = layers[li], state[li]
            memo = self._memo[cid]
            base = memo.get(bits)
            if base is None:
                base = self._span(cid, bits)
            neg_depth = -la.depth
            for i in range(len(probs)):
                if bits >> i & 1:
                    continue
                span = memo.get(bits | 1 << i)
                if span is None:
                    span = self._span(cid, bits | 1 << i)
                gain = base - span
                # (gain, -depth, probability) compared as a tuple, lexicographically
                if best is None or (gain, neg_depth, probs[i]) > best[:3]:
                    best = (gain, neg_depth, probs[i], li, i)
        return best

    def prefetch(self, view: PrefetchView) -> tuple[tuple[int, int], ...]:
        """Highest-impact experts while the copy engine would otherwise idle."""
        if self.params.decode_only and view.phase != "decode":
            return ()
        t = view.pcie_free_s
        out: list[tuple[int, int]] = []
        if t >= view.layer_end_s:
            return ()
        state = [_bits(la.cached.tolist()) for la in view.lookahead]
        layers = [
            (self._cost_id(la, view), la.probs[la.predicted].tolist()) for la in view.lookahead
        ]
        while t < view.layer_end_s and len(out) < self.params.max_per_layer:
            best = self._best(view, layers, state, t + view.copy_s)
            if best is None or best[0] <= self.params.min_impact_s:
                break
            li, i = best[3], best[4]
            state[li] |= 1 << i
            la = view.lookahead[li]
            out.append((la.layer, int(la.predicted[i])))
            t += view.copy_s
        return tuple(out)
