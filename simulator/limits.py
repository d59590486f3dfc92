"""Sane maxima for the sizes a scenario may ask for, used as bounds in the schemas.

Each is roughly ten times the largest instance of its kind in public reports, so no
real experiment meets it, while a typo (an extra three zeros, a 2^64) is refused at
validation instead of allocating memory until the machine gives up.

* ``MAX_DEVICES``: 10^7 accelerators. The largest reported training clusters hold
  about 10^5 GPUs (Meta's two 24,576-GPU Llama 3 clusters, xAI's 100,000-GPU Colossus);
  a scenario modelling a whole fleet stays below 10^6.
* ``MAX_NODES``: 10^6 machines (10^7 GPUs at 8 per node, with headroom).
* ``MAX_GPUS_PER_NODE``: 1,024 (an NVL72 rack is 72; a 576-GPU NVLink domain is the
  largest announced single-fabric unit).
* ``MAX_REQUESTS``: 10^9 requests (Azure's LLM inference trace holds ~10^7 a week).
* ``MAX_JOBS``: 10^7 jobs (Alibaba's 2023 GPU trace ~10^4 pods, Philly ~10^5 jobs).
* ``MAX_STEPS``: 10^7 fixed time steps of a stepped model (a year at 3 s steps).
* ``MAX_SEQ_TOKENS``: 2^24 = 16.8 M tokens per sequence (the longest announced context
  windows are 10^7 tokens).
* ``MAX_DURATION_S``: 10^9 s (32 years) for any duration, delay, period or time a
  scenario gives (``*_s``; ``*_h`` and ``*_days`` fields scale it). The longest studies
  replay a few months of trace (Alibaba 2023: two months; Philly: 75 days); the
  simulated clock stops at 10^12 s (:data:`simulator.engine.MAX_TIME_S`), so a thousand
  maximal delays still fit before it.
* ``MAX_LOG_SIGMA``: 10 for the sigma of a log-normal (job lengths, estimate noise):
  published job-length spreads are sigma 1-3 (Philly, Helios); at 10 the 3-sigma range
  is already 10^13 x the median.
* ``MAX_SCALE``: 10^6 for a dimensionless multiplier of a time (a trace's time scale, a
  relative estimate bias).
"""

from __future__ import annotations

from typing import Annotated

from annotated_types import Ge, Gt, Le

MAX_DEVICES = 10**7
MAX_NODES = 10**6
MAX_GPUS_PER_NODE = 1024
MAX_REQUESTS = 10**9
MAX_JOBS = 10**7
MAX_SEQ_TOKENS = 2**24
MAX_STEPS = 10**7
MAX_DURATION_S = 1e9
MAX_DURATION_H = MAX_DURATION_S / 3600
MAX_DURATION_DAYS = MAX_DURATION_S / 86400
MAX_LOG_SIGMA = 10.0
MAX_SCALE = 1e6

Seconds = Annotated[float, Ge(0), Le(MAX_DURATION_S)]
"""A duration or time in seconds: finite, >= 0, at most :data:`MAX_DURATION_S`."""
PositiveSeconds = Annotated[float, Gt(0), Le(MAX_DURATION_S)]
"""A duration in seconds that must be > 0 (a period, a window, a step)."""
PositiveDays = Annotated[float, Gt(0), Le(MAX_DURATION_DAYS)]
"""A duration in days, > 0, at most :data:`MAX_DURATION_DAYS`."""
