"""Read-only snapshots the MoE mechanism hands to its policies, and their decisions.

Four decision points (``moe.<point>``), each with one interface:

- ``gating``: how many experts each token activates (:class:`GatingView` -> bool mask;
  a stateless policy may also answer a decode token for all layers at once,
  :class:`TokenGatingView`, see :class:`TokenGatingPolicy`).
- ``placement``: where each activated expert of a layer runs: on the GPU (copied over
  PCIe first if not cached) or on the CPU (:class:`PlacementView` -> :class:`Placement`).
- ``prefetch``: which experts of later layers to copy ahead (:class:`PrefetchView` ->
  tuple of ``(layer, expert)``).
- ``cache``: slots per layer at start (:class:`AllocationView`), then admission and
  eviction within a layer (:class:`CacheView` -> :class:`CacheDecision`).

Times in views are seconds relative to the layer's router output ("now"); every cost
estimate comes from the mechanism's device cost model, never from the policy. A layer's
few activated or predicted experts come as tuples of Python numbers (index ``i`` of
every per-expert field is the same expert); router probabilities and whole-layer masks
come as read-only numpy arrays (the mechanism clears their ``writeable`` flag).
Layers are MoE-layer indices (0 = first layer with routed experts).
"""

from __future__ import annotations

from typing import Literal, NamedTuple, Protocol

import numpy as np

Phase = Literal["prefill", "decode"]


class GatingView(NamedTuple):
    """Router output of one layer for the tokens of one step."""

    layer: int
    phase: Phase
    top_k: int  # the model's experts per token
    probs: np.ndarray  # (tokens, experts) router probabilities
    sensitivity: float | None  # AdapMoE F_l of this layer if the model publishes it
    renormalize: bool  # the model renormalises its top-k weights


class TokenGatingView(NamedTuple):
    """Router output of one decode token (one sequence) at every MoE layer: the
    :class:`GatingView` of each layer stacked (row ``l`` is layer ``l``'s one-token
    ``probs``), for gating policies that decide a token from its router output alone."""

    phase: Phase
    top_k: int
    probs: np.ndarray  # (moe layers, experts) router probabilities of the token
    sensitivity: tuple[float, ...] | None  # AdapMoE F_l per layer if the model publishes it
    renormalize: bool


class PlacementView(NamedTuple):
    """One layer's activated experts with their loads, residency and cost estimates."""

    layer: int
    phase: Phase
    experts: tuple[int, ...]  # (n,) activated expert ids, ascending
    loads: tuple[int, ...]  # (n,) tokens routed to each
    cached: tuple[bool, ...]  # (n,) resident on the GPU or arriving by prefetch
    ready_s: tuple[float, ...]  # (n,) when a cached expert is usable (0 if resident)
    gpu_s: tuple[float, ...]  # (n,) GPU time of each expert at its load
    cpu_s: tuple[float, ...]  # (n,) CPU time of each expert at its load
    cpu_first_s: float  # extra CPU time once per layer in which the CPU runs experts
    copy_s: float  # PCIe time of one expert
    gpu_free_s: float  # when the GPU is free for routed experts (after shared experts)
    cpu_free_s: float  # when the CPU is free
    pcie_free_s: float  # when the copy engine is free (prefetches in flight)
    layer_resident: bool  # every expert of this layer is cached
    dense_gpu_s: float  # attention + shared experts of this layer on the GPU
    dense_cpu_s: float  # the same on the CPU (llama.cpp-style CPU layers)


class Placement(NamedTuple):
    """Where a layer's experts run: GPU ids in GPU order (uncached ones are copied over
    PCIe in this order), CPU ids in CPU order; ``dense_on_cpu`` also runs the layer's
    attention and shared experts on the CPU."""

    gpu: tuple[int, ...]
    cpu: tuple[int, ...]
    dense_on_cpu: bool = False


class LookaheadLayer(NamedTuple):
    """A later layer as predicted from the current hidden state (gate reuse)."""

    layer: int
    depth: int  # layers ahead of the current one
    probs: np.ndarray  # (experts,) predicted router probabilities (mean over tokens)
    predicted: tuple[int, ...]  # (m,) predicted activated expert ids, most probable first
    predicted_probs: tuple[float, ...]  # (m,) ``probs`` of the predicted experts
    loads: tuple[int, ...]  # (m,) predicted tokens per predicted expert
    cached: tuple[bool, ...]  # (m,) already resident or in flight
    gpu_s: tuple[float, ...]  # (m,) GPU time of each predicted expert at its predicted load
    cpu_s: tuple[float, ...]  # (m,) CPU time of each predicted expert at its predicted load


class PrefetchView(NamedTuple):
    """The copy engine's state after a layer's demand copies, and the next layers."""

    layer: int
    phase: Phase
    copy_s: float  # PCIe time of one expert
    cpu_first_s: float  # extra CPU time once per layer in which the CPU runs experts
    pcie_free_s: float  # when the copy engine is free (after this layer's demand copies)
    layer_end_s: float  # when this layer's barrier is expected
    lookahead: tuple[LookaheadLayer, ...]


class AllocationView(NamedTuple):
    """What a cache policy knows when it splits its slots across layers (warm-up profile)."""

    layers: int
    experts: int
    top_k: int
    total_slots: int
    top1_ratio: np.ndarray  # (layers,) share of profiled decode tokens using one expert
    prefetch_accuracy: np.ndarray  # (layers,) next-layer gate-reuse prediction accuracy
    frequency: np.ndarray  # (layers, experts) profiled activation share


class CacheView(NamedTuple):
    """One layer's cache when experts ask for slots (demand loads or prefetches)."""

    layer: int
    slots: int
    occupied: int  # slots in use: the number of cached experts
    cached: np.ndarray  # (experts,) bool: resident or in flight (the residency's own
    # row, read-only: it changes with later admissions, so read it during the call)
    evictable: np.ndarray  # (experts,) bool: cached and may be evicted now (landed, not
    # in use); the rest of ``cached`` is protected (in use or in flight)
    incoming: tuple[int, ...]  # ids asking for a slot, in arrival order
    prefetch: bool  # the request comes from the prefetcher


class CacheDecision(NamedTuple):
    """Which incoming experts to admit and which cached ones to evict for them."""

    admit: tuple[int, ...]
    evict: tuple[int, ...]


class GatingPolicy(Protocol):
    """Decision point ``moe.gating``."""

    def select(self, view: GatingView) -> np.ndarray:
        """Bool mask (tokens, experts) of the experts each token activates."""
        ...


class TokenGatingPolicy(GatingPolicy, Protocol):
    """A ``moe.gating`` policy that may also decide a decode token at every layer in one
    call. Only for a policy whose decision depends on nothing but the view (no state,
    no randomness): row ``l`` of :meth:`select_token` must equal
    ``select(GatingView(l, ...))[0]`` for the same token, as the mechanism then asks
    once per decode token (one sequence) instead of once per layer."""

    def select_token(self, view: TokenGatingView) -> np.ndarray:
        """Bool mask (moe layers, experts): the experts the token activates at each layer."""
        ...


class PlacementPolicy(Protocol):
    """Decision point ``moe.placement``."""

    def place(self, view: PlacementView) -> Placement:
        """Where each activated expert runs."""
        ...


class PrefetchPolicy(Protocol):
    """Decision point ``moe.prefetch``; ``lookahead_layers`` = how many layers it sees."""

    lookahead_layers: int

    def prefetch(self, view: PrefetchView) -> tuple[tuple[int, int], ...]:
        """``(layer, expert)`` pairs to copy, in issue order."""
        ...


class CachePolicy(Protocol):
    """Decision point ``moe.cache``."""

    def allocate(self, view: AllocationView) -> tuple[int, ...]:
        """GPU slots of each layer (sum at most ``total_slots``)."""
        ...

    def observe(self, layer: int, probs: np.ndarray, selected: np.ndarray, step: int) -> None:
        """Learn from one layer's routing of one step (recency, scores)."""
        ...

    def admit(self, view: CacheView) -> CacheDecision:
        """Admission and eviction when experts ask for slots."""
        ...


class TokenCachePolicy(CachePolicy, Protocol):
    """A ``moe.cache`` policy that is also shown a decode token's routing at every layer
    before that token's layer-by-layer :meth:`observe` calls (where the gating decides
    a token at once, :class:`TokenGatingPolicy`), to precompute from it. What
    :meth:`admit` reads must still change only in :meth:`observe`, layer by layer."""

    def observe_token(self, probs: np.ndarray, selected: np.ndarray, step: int) -> None:
        """``probs`` and ``selected``: (moe layers, experts) of the token at ``step``."""
        ...
