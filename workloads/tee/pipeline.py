"""Closed-form schedules of layer-by-layer pipelines (numpy, no SimPy process per layer).

Two shapes occur in the TEE domain:

- :func:`flow_shop`: jobs (one per layer) pass through stages in a fixed order, each
  stage one resource serving jobs FIFO (a PCIe direction, a CPU, a crypto engine). The
  recurrence ``end[s, j] = max(end[s-1, j], end[s, j-1]) + t[s, j]`` is what a
  discrete-event run of the same resources would produce; it is evaluated per stage with
  a running maximum.
- :func:`buffered_pipeline`: a producer (the TEE preparing meta-keys and masked inputs)
  feeds a consumer (transfer + NNA compute) through a buffer of ``depth`` layers: the
  producer may run at most ``depth`` layers ahead of the consumer (DAC'23's prefetch
  distance). ``depth = 0`` is the unpipelined chain, every layer's two parts in series.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Schedule(NamedTuple):
    """Start and end times per (stage, job), seconds from the pipeline's start."""

    start_s: np.ndarray
    end_s: np.ndarray

    @property
    def makespan_s(self) -> float:
        """End of the last job on the last stage (0 when there is no job)."""
        return float(self.end_s.max()) if self.end_s.size else 0.0


def flow_shop(times_s: np.ndarray, release_s: float = 0.0) -> Schedule:
    """FIFO flow shop: ``times_s[s, j]`` is job j's time on stage s (module doc)."""
    t = np.asarray(times_s, dtype=float)
    if t.ndim != 2:
        raise ValueError("times_s must be a (stages, jobs) array")
    if (t < 0).any():
        raise ValueError("negative stage time")
    start = np.empty_like(t)
    end = np.empty_like(t)
    ready = np.full(t.shape[1], release_s)  # when each job may enter the stage
    for s in range(t.shape[0]):
        c = np.cumsum(t[s])
        # end[j] = c[j] + max_{k<=j}(ready[k] - c[k-1]) (c[-1] = 0)
        end[s] = c + np.maximum.accumulate(ready - (c - t[s]))
        start[s] = end[s] - t[s]
        ready = end[s]
    return Schedule(start, end)


def buffered_pipeline(producer_s: np.ndarray, consumer_s: np.ndarray, depth: int) -> Schedule:
    """Producer/consumer chain with a ``depth``-layer buffer (module doc).

    Returns a 2-row schedule (row 0 producer, row 1 consumer). With ``depth >= 1`` the
    producer starts layer j once it finished layer j-1 and the consumer has started
    layer j-depth; the consumer starts layer j once the producer finished it and the
    consumer finished layer j-1. ``depth = 0``: layer j's producer part waits for
    layer j-1's consumer part (no overlap at all).
    """
    p = np.asarray(producer_s, dtype=float)
    c = np.asarray(consumer_s, dtype=float)
    if p.shape != c.shape or p.ndim != 1:
        raise ValueError("producer and consumer times must be 1-d arrays of one length")
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    n = len(p)
    ps, pe, cs, ce = (np.zeros(n) for _ in range(4))
    prev_pe = prev_ce = 0.0
    for j in range(n):
        gate = prev_ce if depth == 0 else (cs[j - depth] if j >= depth else 0.0)
        ps[j] = max(prev_pe, gate)
        pe[j] = prev_pe = ps[j] + p[j]
        cs[j] = max(pe[j], prev_ce)
        ce[j] = prev_ce = cs[j] + c[j]
    return Schedule(np.vstack([ps, cs]), np.vstack([pe, ce]))
