"""What the runtime does when an allocation does not fit and the plan allows a forced swap.

An eager-mode framework has no plan at the moment an allocation fails: its allocator knows
what it has seen so far, not the rest of the iteration. PyTorch's caching allocator, on a
failed ``cudaMalloc``, frees its cached blocks (``cudaFree`` synchronises the device) and
retries once before raising (PyTorch CUDA memory-management notes; the CUDA runtime
documents ``cudaFree`` as implicitly synchronising). An OOM-intercepting swap allocator
(MindSpeed ``smart_swap``'s pluggable allocator, the warm-up of Chameleon/SmartSwap)
then copies resident tensors out synchronously until the request fits. This module names
that fallback's unknowns (:class:`OomFallback`) and orders its victims (:func:`victims`):

* ``victims``: ``lru`` (default: least recently touched by an op so far), ``largest``
  (size first, ties by least recent), ``fail`` (the allocation fails: the run ends with
  ``oom = 1``, what plain eager PyTorch does), or ``oracle-farthest-next-use`` (Belady:
  reads the rest of the iteration; an **oracle**, kept as the labelled upper bound).
* ``sync_s``: seconds the compute stream stops per failed allocation (cache release,
  device synchronisation, retry) besides the copies themselves. Default 1 ms: a
  ``cudaMalloc`` costs 30-200 us per call and ``torch.cuda.empty_cache`` 1-50 ms as
  practitioners report them (no controlled measurement found); swept 0.1-20 ms in
  ``scenarios/chameleon-robustness.yaml``.
* ``fragmentation``: share of the evicted bytes the allocator cannot use for the failed
  request (freed blocks that are not contiguous with the free space), so the fallback
  evicts ``need / (1 - fragmentation)`` bytes. Default 0.15: GMLake (Guo et al.,
  ASPLOS'24, arXiv 2401.08156) measured 15% average (up to 33%) fragmentation of
  PyTorch's caching allocator over eight LLMs trained with memory-reduction techniques on
  A100-80GB; swept 0-0.33. Simplified: the extra bytes are then ordinary free memory
  (the pool is bookkeeping without addresses), so the cost is the extra copies.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hetsim.simulator.limits import Seconds

Victims = Literal["lru", "largest", "fail", "oracle-farthest-next-use"]


class OomFallback(BaseModel):
    """The runtime's forced-swap fallback on an allocation that does not fit (module doc)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    victims: Victims = Field(
        default="lru",
        description="lru: least recently used first; largest: biggest first; fail: the "
        "allocation fails (OOM); oracle-farthest-next-use: Belady, reads the rest of the "
        "iteration (an oracle)",
    )
    sync_s: Seconds = Field(
        default=1e-3,
        description="stall per failed allocation besides the copies (cache release, device "
        "synchronisation, retry); cudaMalloc 30-200 us, empty_cache 1-50 ms as reported",
    )
    fragmentation: float = Field(
        default=0.15,
        ge=0,
        lt=1,
        description="share of evicted bytes unusable for the request (GMLake, ASPLOS'24: "
        "15% average, up to 33%, PyTorch caching allocator on LLM training)",
    )

    def bytes_to_evict(self, need: int) -> int:
        """Bytes the fallback must evict so that ``need`` become usable."""
        return -(-need * 1_000_000 // round((1 - self.fragmentation) * 1_000_000))


def victims(
    kind: Victims,
    candidates: Iterable[int],
    i: int,
    uses: list[list[int]],
    producer: list[int],
    size: list[int],
) -> list[int]:
    """``candidates`` in eviction order at op ``i`` (``uses``: each tensor's consumer ops,
    ``producer``: its producing op). ``lru`` and ``largest`` read only ops ``<= i``."""
    cands = list(candidates)

    def last_touch(t: int) -> int:
        k = bisect_right(uses[t], i)
        return max(producer[t], uses[t][k - 1] if k else -1)

    if kind == "lru":
        return sorted(cands, key=lambda t: (last_touch(t), t))
    if kind == "largest":
        return sorted(cands, key=lambda t: (-size[t], last_touch(t), t))
    if kind == "oracle-farthest-next-use":
        return sorted(cands, key=lambda t: (-uses[t][bisect_right(uses[t], i)], t))
    return []
