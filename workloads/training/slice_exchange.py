"""SlimPipe's workload redistribution over uniform sequence slices (**reconstruction**).

Under a causal mask, slice ``j`` of ``n`` uniform slices (0-based) does ``(2j + 1) / n^2``
of the sequence's attention; the mean is ``1 / n``. SlimPipe (Li et al., arXiv 2504.14519)
evens this out by moving attention work between devices, exchanging the attention context
(queries, the keys and values of the earlier slices, outputs) so that every slice costs
the same. The notes give the idea from summaries only, not the pairing or the split, so
this module reconstructs it; every choice below is a stated assumption:

* **Pairing**: slice ``j`` with its mirror ``n - 1 - j`` (their work ``(2j + 1) + (2(n - j)
  - 1) = 2n`` always sums to twice the mean). The heavy side hands work to the device that
  would run the mirror slice at the same moment in the slice-level 1F1B steady state:
  stage ``d + delta`` runs slice ``j - delta`` while stage ``d`` runs slice ``j``, so the
  mirror is ``delta = 2j + 1 - n`` stages on (:func:`partner`, taken modulo the stage
  count: past the last stage the partner is a device running other work). That device is
  **simulated**: the moved work is a :class:`~hetsim.workloads.training.pipeline_sim.Helper`
  that waits until the partner is free, delays the partner's own next unit, and holds the
  exchanged context in the partner's memory while it runs; the heavy unit ends only when
  the results are back. With one stage there is no partner and the work stays.
* **Split by heads**: the heavy slice hands over the fraction ``e_j = (w_j - w) / w_j`` of
  its query heads (and the matching share of K/V heads), so by FLOPs both sides of the pair
  do ``w``; in seconds the helper runs ``e_j`` of the heavy slice's attention kernel time
  and the heavy side keeps ``1 - e_j`` of it (a share of heads, same kernel shape). The
  partner's own slice is not shortened: it is the partner's own work.
* **Traffic** per layer and rank, ``t`` tokens per slice, ``d`` head size, ``a`` bytes,
  ``hq`` and ``hkv`` query and K/V heads per rank, ``c = j + 1`` slices of context:
  forward sends Q and the context's K and V (``e t d a (hq + 2 hkv c)``) and returns O
  (``e t d a hq``); backward sends Q, O and dO with the context's K and V
  (``e t d a (3 hq + 2 hkv c)``) and returns dQ and the context's dK and dV
  (``e t d a (hq + 2 hkv c)``): ``e t d a (2 hq + 2 hkv c)`` and ``(4 hq + 4 hkv c)`` in
  all. The partner holds one layer's exchange (what it received and what it returns)
  while the helper runs.
* **Overlap** (SlimPipe policy parameter ``exchange_overlap``): ``attention`` (default)
  pipelines the exchange with the helper over the unit's layers (per layer the slower of
  the partner's share and the link; the first layer's inputs and the last layer's results
  on the critical path); ``none`` puts every layer's transfers on the heavy device's
  stream, added to its own time. No measurement says which is nearer.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsim.workloads.training.pipeline_sim import Helper


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
        fs, fr, bs, br = self.directions(tokens, head_dim, q_heads, kv_heads, nbytes)
        return fs + fr, bs + br

    def directions(self, tokens: float, head_dim: int, q_heads: float, kv_heads: float,
                   nbytes: float) -> tuple[float, float, float, float]:  # fmt: skip
        """Per layer: forward bytes sent and returned, backward bytes sent and returned."""
        unit = self.moved * tokens * head_dim * nbytes
        ctx = 2 * kv_heads * self.context_slices
        return (unit * (q_heads + ctx), unit * q_heads,
                unit * (3 * q_heads + ctx), unit * (q_heads + ctx))  # fmt: skip


def exposed_s(exchange_s: float, attention_s: float, overlap: str) -> float:
    """Seconds of an exchange left on the critical path when it may hide behind
    ``attention_s`` (``attention``) or not (``none``)."""
    if overlap == "none":
        return exchange_s
    return max(0.0, exchange_s - attention_s)


def partner(device: int, j: int, n: int, stages: int) -> int:
    """The device that takes heavy slice ``j``'s moved work from ``device`` (module doc,
    *Pairing*): ``delta = 2j + 1 - n`` stages on, modulo ``stages``."""
    return (device + 2 * j + 1 - n) % stages


def helper(device: int, layers: int, work_layer_s: float, send_layer_s: float,
           return_layer_s: float, buffer_bytes: float, overlap: str) -> Helper:  # fmt: skip
    """The partner's part of ``layers`` layers of a heavy unit (module doc, *Overlap*):
    with ``attention`` each layer takes the slower of its share and its transfers."""
    per = work_layer_s
    if overlap != "none":
        per = max(work_layer_s, send_layer_s, return_layer_s)
    return Helper(device, send_layer_s, layers * per, return_layer_s, buffer_bytes)


def own_exchange_s(layers: int, send_layer_s: float, return_layer_s: float,
                   overlap: str) -> float:  # fmt: skip
    """Seconds the heavy device adds to its own time for the exchange: every layer's
    transfers under ``none``, nothing under ``attention`` (module doc, *Overlap*)."""
    return layers * (send_layer_s + return_layer_s) if overlap == "none" else 0.0


def redistribution(n: int) -> list[SliceExchange]:
    """Per uniform slice ``j`` of ``n``: the exchange of its pair (module doc)."""
    out = []
    for j in range(n):
        heavy = max(j, n - 1 - j)
        w = 2 * heavy + 1  # the heavy side's work in units of 1 / n^2
        out.append(SliceExchange((w - n) / w if w > n else 0.0, heavy + 1, j == heavy))
    return out
