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
duration from now (a late copy would leave the expert to the CPU anyway). PCIe counts as
idle up to the current layer's barrier: a copy that would still be on the wire when the
next layer's router runs (the copy engine does not pre-empt a started copy) delays that
layer's demand copies, so with ``pcie_contention`` (default) its impact must exceed the
growth of the next layer's simulated makespan with the copy engine busy for the
overrun (the same HSS on the next layer's predicted experts and residency). Decode only
by default (in prefill the copy engine is busy with demand loads). The public code
instead prefetches by MRS score (``prefetch_size``, default 0).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from hetsim.schedulers.moe.hss import hss
from hetsim.simulator.limits import Seconds
from hetsim.simulator.registry import policies
from hetsim.workloads.moe.view import LookaheadLayer, PrefetchView

Best = tuple[float, int, float, int, int]  # impact, -depth, probability, layer pos, index
# a later layer's cost inputs: GPU s, CPU s, loads of its predicted experts, copy s, CPU intercept
CostKey = tuple[tuple[float, ...], tuple[float, ...], tuple[int, ...], float, float]


_BITS: dict[tuple[bool, ...], int] = {}


def _bits(cached: Sequence[bool]) -> int:
    """Residency of a layer's predicted experts as a bit set (bit i: expert i cached);
    remembered per residency tuple of up to 16 experts (a pure function of it)."""
    key = cached if type(cached) is tuple else tuple(cached)
    bits = _BITS.get(key)
    if bits is None:
        bits = 0
        for i, c in enumerate(key):
            if c:
                bits |= 1 << i
        if len(key) <= 16:
            _BITS[key] = bits
    return bits


class ImpactPrefetchParams(BaseModel):
    """``lookahead_layers``: layers predicted ahead; ``max_per_layer``: copies issued at
    one layer at most; ``min_impact_s``: smallest makespan reduction worth a copy;
    ``pcie_contention``: charge a copy that overruns the layer's barrier the delay it
    causes the next layer's demand copies (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    lookahead_layers: int = Field(
        3, ge=1, le=8, description="Layers ahead whose experts are predicted (the paper: 3)."
    )
    max_per_layer: int = Field(4, ge=1, description="Most prefetch copies issued at one layer.")
    min_impact_s: Seconds = Field(
        0.0, ge=0, description="Smallest simulated makespan reduction, in seconds, worth a copy."
    )
    decode_only: bool = Field(
        default=True,
        description="Prefetch in decode steps only (in prefill the "
        "copy engine is busy with demand loads).",
    )
    pcie_contention: bool = Field(
        default=True,
        description="Charge a copy that overruns the layer's barrier the delay it "
        "causes the next layer's demand copies (reconstruction).",
    )


@policies.register("moe.prefetch", "impact")
class ImpactPrefetch:
    """HybriMoE: prefetch the experts whose caching shortens later layers the most."""

    Params = ImpactPrefetchParams

    def __init__(self, params: ImpactPrefetchParams, rng: np.random.Generator) -> None:
        self.params = params
        self.lookahead_layers = params.lookahead_layers
        self._memo: list[dict[int, float]] = []  # [cost id][cached bits] -> makespan
        # [cost id][cached bits] -> (largest gain, experts reaching it), see _top_gain
        self._top_gains: list[dict[int, tuple[float, tuple[int, ...]]]] = []
        self._cost_ids: dict[CostKey, int] = {}
        self._inputs: list[CostKey] = []
        self._last: tuple[object, object, object, float, float, int] | None = None

    def makespan(self, la: LookaheadLayer, cached: Sequence[bool], view: PrefetchView) -> float:
        """Simulated makespan of a later layer with ``cached`` residency (memoised)."""
        return self._span(self._cost_id(la, view), _bits(cached))

    def _cost_id(self, la: LookaheadLayer, view: PrefetchView) -> int:
        """A small id for the layer's cost inputs. The mechanism hands the same tuples
        for every decode layer, so the last id is reused when they are the same objects."""
        last = self._last
        if (
            last is not None
            and last[0] is la.gpu_s and last[1] is la.cpu_s and last[2] is la.loads
            and last[3] == view.copy_s and last[4] == view.cpu_first_s
        ):  # fmt: skip
            return last[5]
        key: CostKey = (
            tuple(la.gpu_s),
            tuple(la.cpu_s),
            tuple(la.loads),
            view.copy_s,
            view.cpu_first_s,
        )
        cid = self._cost_ids.get(key)
        if cid is None:
            cid = self._cost_ids[key] = len(self._inputs)
            self._inputs.append(key)
            self._memo.append({})
            self._top_gains.append({})
        self._last = (la.gpu_s, la.cpu_s, la.loads, view.copy_s, view.cpu_first_s, cid)
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

    def _span_busy(self, cid: int, bits: int, pcie_busy_s: float) -> float:
        """:meth:`_span` with the copy engine busy for ``pcie_busy_s`` at the layer's start."""
        gpu_s, cpu_s, loads, copy_s, cpu_first_s = self._inputs[cid]
        n = len(gpu_s)
        cached = [bool(bits >> i & 1) for i in range(n)]
        return hss(list(gpu_s), list(cpu_s), cached, [0.0] * n, list(loads), copy_s,
                   pcie_free_s=pcie_busy_s, cpu_first_s=cpu_first_s).makespan_s  # fmt: skip

    def _best(
        self,
        view: PrefetchView,
        layers: list[tuple[int, tuple[float, ...]]],
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
            top = self._top_gains[cid].get(bits)
            gain, tied = self._top_gain(cid, bits) if top is None else top
            if not tied:
                continue  # every predicted expert of the layer is cached
            # the layer's best: the most probable of them (max keeps the first on ties)
            i = tied[0] if len(tied) == 1 else max(tied, key=probs.__getitem__)
            # (gain, -depth, probability) compared as a tuple, lexicographically; on a
            # tie the earlier layer stays
            if best is None or (gain, -la.depth, probs[i]) > best[:3]:
                best = (gain, -la.depth, probs[i], li, i)
        return best

    def _top_gain(self, cid: int, bits: int) -> tuple[float, tuple[int, ...]]:
        """The largest impact of caching one more predicted expert of a layer with
        residency ``bits``, and the experts (indices, ascending) that reach it (none if
        all are cached). A function of the layer's cost inputs and ``bits`` (memoised)."""
        base = self._span(cid, bits)
        n = len(self._inputs[cid][0])
        gains = [(i, base - self._span(cid, bits | 1 << i)) for i in range(n) if not bits >> i & 1]
        top: tuple[float, tuple[int, ...]] = (0.0, ())
        if gains:
            g = max(x for _, x in gains)
            top = (g, tuple([i for i, x in gains if x == g]))
        self._top_gains[cid][bits] = top
        return top

    def prefetch(self, view: PrefetchView) -> tuple[tuple[int, int], ...]:
        """Highest-impact experts while the copy engine would otherwise idle."""
        if self.params.decode_only and view.phase != "decode":
            return ()
        t = view.pcie_free_s
        out: list[tuple[int, int]] = []
        if t >= view.layer_end_s:
            return ()
        state: list[int] = []
        layers: list[tuple[int, tuple[float, ...]]] = []
        for la in view.lookahead:
            bits = _BITS.get(la.cached)  # (_bits, its memo read first)
            state.append(_bits(la.cached) if bits is None else bits)
            layers.append((self._cost_id(la, view), la.predicted_probs))
        while t < view.layer_end_s and len(out) < self.params.max_per_layer:
            best = self._best(view, layers, state, t + view.copy_s)
            if best is None or best[0] <= self.params.min_impact_s:
                break
            overrun = t + view.copy_s - view.layer_end_s
            if overrun > 0 and self.params.pcie_contention and view.lookahead[0].depth == 1:
                cid, bits = layers[0][0], state[0]
                delay = self._span_busy(cid, bits, overrun) - self._span(cid, bits)
                if best[0] - delay <= self.params.min_impact_s:
                    break
            li, i = best[3], best[4]
            state[li] |= 1 << i
            la = view.lookahead[li]
            out.append((la.layer, la.predicted[i]))
            t += view.copy_s
        return tuple(out)
