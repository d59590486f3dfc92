"""HybriMoE's intra-layer hybrid scheduling simulation (HSS), shared by the HybriMoE
placement and the impact-driven prefetch.

Reconstruction of the paper's greedy (papers/moe.md section 2.2), generalised from the
public decode-only ``KExpertsCache.HSS`` to any token loads: experts are queued as the
cached ones by load (descending) followed by the uncached ones by load (descending).
The GPU takes from the front (cached experts first, then uncached ones, each copied over
PCIe in that order), the CPU from the back (uncached experts by ascending load, then it
steals cached ones, low load first; its first expert pays the per-layer CPU intercept).
At each step the side that would finish its next
expert earlier takes it (ties go to the GPU). The costs are the mechanism's estimates.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, filterfalse
from typing import NamedTuple


class HssResult(NamedTuple):
    """Indices (into the input arrays) given to each side, in run order, and the makespan."""

    gpu: tuple[int, ...]
    cpu: tuple[int, ...]
    makespan_s: float


def hss(
    gpu_s: Sequence[float],
    cpu_s: Sequence[float],
    cached: Sequence[bool],
    ready_s: Sequence[float],
    loads: Sequence[int],
    copy_s: float,
    gpu_free_s: float = 0.0,
    cpu_free_s: float = 0.0,
    pcie_free_s: float = 0.0,
    cpu_first_s: float = 0.0,
) -> HssResult:
    """Greedy CPU/GPU/PCIe split of one layer's experts (see module docstring)."""
    n = len(gpu_s)
    # by load descending, ties by index (a reversed sort keeps equal keys in input order,
    # so where every load is the same, as in decode, the order is the input order)
    hot = list(compress(range(n), cached))  # the cached indices, ascending
    cold = list(filterfalse(cached.__getitem__, range(n)))  # the others
    if n and loads.count(loads[0]) != n:
        hot.sort(key=loads.__getitem__, reverse=True)
        cold.sort(key=loads.__getitem__, reverse=True)
    queue = hot + cold
    front, back = 0, n - 1  # the GPU takes queue[front], the CPU queue[back]
    g, c, p = gpu_free_s, cpu_free_s, pcie_free_s
    gpu: list[int] = []
    cpu: list[int] = []
    # when each side would finish its next expert (gf, cf): a side's figure changes only
    # when that side takes an expert, so only the side that took one is priced again
    if front <= back:
        f, b = queue[front], queue[back]
        if cached[f]:
            pf, r = p, ready_s[f]
        else:
            pf = r = p + copy_s
        gf = (g if g >= r else r) + gpu_s[f]  # max(g, r) without the call
        cf = c + cpu_s[b] + cpu_first_s  # the CPU's first expert pays the intercept
        while True:
            if gf <= cf:
                gpu.append(f)
                front += 1
                g, p = gf, pf
                if front > back:
                    break
                f = queue[front]  # the GPU's next expert
                if cached[f]:
                    pf, r = p, ready_s[f]
                else:
                    pf = r = p + copy_s
                gf = (g if g >= r else r) + gpu_s[f]
            else:
                cpu.append(b)
                back -= 1
                c = cf
                if front > back:
                    break
                b = queue[back]  # the CPU's next expert (+ 0.0: as the first's sum)
                cf = c + cpu_s[b] + 0.0
    return HssResult(tuple(gpu), tuple(cpu), c if c > g else g)  # max(g, c) without the call
