"""SlimPipe's workload redistribution over uniform sequence slices (**reconstruction**).

Under a causal mask, slice ``j`` of ``n`` uniform slices (0-based) does ``(2j + 1) / n^2``
of the sequence's attention; the mean is ``1 / n``. SlimPipe (Li et al., arXiv 2504.14519)
evens this out by moving attention work between devices, exchanging the attention context
(queries, the keys and values of the earlier slices, outputs) so that every slice costs
the same. The notes give the idea from summaries only, not the pairing or the split, so
this module reconstructs it; every choice below is a stated assumption:

* **Pairing**: slice ``j`` with its mirror ``n - 1 - j`` (their work ``(2j + 1) + (2(n - j)
  - 1) = 2n`` always sums to twice the mean), on the device running the mirror slice at
  the same time (another pipeline stage: the attention core holds no weights, so any
  device can compute it given the context). That device's timing is not simulated
  separately: each side of a pair ends at the mean.
* **Split by heads**: the heavy slice hands over the fraction ``e_j = (w_j - w) / w_j`` of
  its query heads (and the matching share of K/V heads) so both sides do ``w``.
* **Traffic** per layer and rank, ``t`` tokens per slice, ``d`` head size, ``a`` bytes,
  ``hq`` and ``hkv`` query and K/V heads per rank, ``c = j + 1`` slices of context:
  forward sends Q and the context's K and V and returns O,
  ``e t d a (2 hq + 2 hkv c)``; backward sends Q, O and dO with the context's K and V and
  returns dQ and the context's dK and dV, ``e t d a (4 hq + 4 hkv c)``. Both sides of the
  pair wait for it (the heavy for the results, the light for the inputs).
* **Overlap** (SlimPipe policy parameter ``exchange_overlap``): ``attention`` (default)
  hides the exchange behind the slice's own (evened) attention kernels, as this model
  prices the ring K/V exchange of context parallelism, exposing ``max(0, exchange -
  attention)``; ``none`` exposes all of it. No measurement says which is nearer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SliceExchange:
    """Attention share and exchanged bytes of one slice after redistribution."""

    #: fraction of the heavy side's attention heads that move (0 for a balanced slice)
    moved: float
    #: slices of context (keys and values) the heavy side of the pair attends to
    context_slices: int
    #: whether this slice is the heavy side (count a pair's bytes once, on that side)
    heavy: bool = False

    def bytes(self, tokens: float, head_dim: int, q_heads: float, kv_heads: float,
              nbytes: float) -> tuple[float, float]:  # fmt: skip
        """(forward, backward) bytes exchanged per layer for this slice's pair."""
        unit = self.moved * tokens * head_dim * nbytes
        c = self.context_slices
        return (unit * (2 * q_heads + 2 * kv_heads * c),
                unit * (4 * q_heads + 4 * kv_heads * c))  # fmt: skip


def exposed_s(exchange_s: float, attention_s: float, overlap: str) -> float:
    """Seconds of an exchange left on the critical path (module doc, *Overlap*)."""
    if overlap == "none":
        return exchange_s
    return max(0.0, exchange_s - attention_s)


def redistribution(n: int) -> list[SliceExchange]:
    """Per uniform slice ``j`` of ``n``: the exchange of its pair (module doc)."""
    out = []
    for j in range(n):
        heavy = max(j, n - 1 - j)
        w = 2 * heavy + 1  # the heavy side's work in units of 1 / n^2
        out.append(SliceExchange((w - n) / w if w > n else 0.0, heavy + 1, j == heavy))
    return out
