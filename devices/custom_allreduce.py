"""Time of the inference engines' own small-message all-reduce kernels (pure functions).

TensorRT-LLM, vLLM and SGLang reduce a tensor-parallel layer's output without NCCL when
the GPUs see each other over NVLink: each rank writes its buffer where its peers can read
it (CUDA IPC), a barrier flag is set, and one kernel sums the peers' copies (one-shot:
every rank reads all ``n`` buffers; two-shot: reduce-scatter then all-gather through the
same buffers, for larger messages). There is no ring, no protocol choice and no NCCL
proxy, so a few-KiB decode all-reduce costs a few microseconds where NCCL's costs tens
(:data:`hetsim.devices.calibration_points.VIDUR_PLATEAUS`). DeepSpeed-Inference and
LMDeploy TurboMind (through 2024) call NCCL.

Model (one call, ``n`` ranks, ``S`` bytes per rank)::

    t = latency_s + (n - 1) * per_peer_s + 2 (n - 1) / n * S / (fraction * B)

with ``B`` the fabric's per-rank bandwidth (``CollectiveFabric.bandwidth_Bps``): a
latency, a flag wait per peer, and the two-shot's bytes over a fitted share of the links.

Presets, each a least-squares fit (relative error) of that form to one measured table:
SGLang PR #2904 (sgl-project/sglang, "optimize custom allreduce kernel", 2025-01-15),
``sgl-kernel/tests/test_trt_reduce.py`` on H100 without CUDA graphs, TP 2/4/8, six sizes:

* ``trtllm``: the kernel SGLang adapted from TensorRT-LLM's ``customAllReduceKernels.cu``
  (input copied by the kernel itself): 3.23 us + 0.38 us per peer, 230 GB/s (0.511 of
  NVLink4's 450 GB/s); |error| median 7.9%, max 21% over the 18 points.
* ``vllm``: vLLM's custom all-reduce (PR #2192) on an unregistered input, so each call
  also launches a copy into the IPC buffer: 8.01 us + 0.30 us per peer, 197 GB/s (0.438);
  |error| median 6.0%, max 19%. Inside a captured CUDA graph vLLM registers the graph's
  buffers and skips that copy, so this preset is an upper bound for graph-mode decode.

Reading of the table (stated, not certain): ``data size`` is the element count of the
test's fp32 tensor (``torch.randint(..., dtype=torch.float32)`` in the file at sglang
commit 01fe99e), so 512..1,048,576 elements are 2 KiB..4 MiB; the printed "ms" are a
host loop of 5,000 calls timed with ``time.time()`` (launch-bound for the smallest
sizes). Measured on H100 only: on another fabric the bandwidth share is applied to that
fabric's ``bandwidth_Bps`` (a derivation, not a measurement).

Larger messages go to NCCL: vLLM sends a tensor through its kernel only below the IPC
buffer's size, 8 MiB by default (``CustomAllreduce(max_size=8192 * 1024)``), and hands
prefill-sized tensors to NCCL; TensorRT-LLM's automatic strategy does the same above its
own workspace, whose size is not read here, so the trtllm preset borrows vLLM's 8 MiB
(``max_bytes``). The fits stop at 4 MiB; 4-8 MiB is their extrapolation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hetsim.devices.collectives import CollectiveFabric


@dataclass(frozen=True)
class CustomAllReduce:
    """Fitted cost of one engine's custom (IPC, one-/two-shot) all-reduce kernel."""

    name: str
    latency_s: float
    per_peer_s: float
    bandwidth_fraction: float
    source: str = ""
    #: largest message (bytes per rank) the engine sends through this kernel; larger ones
    #: go to NCCL (:meth:`handles`)
    max_bytes: int = 8 * 2**20

    def __post_init__(self) -> None:
        for field_name in ("latency_s", "per_peer_s", "bandwidth_fraction"):
            value = getattr(self, field_name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{self.name}: {field_name} must be finite and >= 0")
        if self.bandwidth_fraction == 0:
            raise ValueError(f"{self.name}: bandwidth_fraction must be > 0")

    def handles(self, nbytes: int) -> bool:
        """Whether the engine reduces ``nbytes`` per rank with this kernel (else NCCL)."""
        return nbytes <= self.max_bytes

    def time_s(self, n: int, nbytes: int, fabric: CollectiveFabric) -> float:
        """Seconds of one all-reduce of ``nbytes`` per rank over ``n`` ranks (0 for one)."""
        if n < 1 or nbytes < 0:
            raise ValueError(f"custom all-reduce needs n >= 1 and nbytes >= 0, got {n}, {nbytes}")
        if n == 1:
            return 0.0
        wire = 2.0 * (n - 1) / n * nbytes
        bw = self.bandwidth_fraction * fabric.rank_bandwidth_Bps(n)
        return self.latency_s + (n - 1) * self.per_peer_s + wire / bw


_PR2904 = "sgl-project/sglang PR #2904, test_trt_reduce.py, H100, TP 2/4/8 (module doc)"

PRESETS: dict[str, CustomAllReduce] = {
    "trtllm": CustomAllReduce("trtllm", 3.23e-6, 0.38e-6, 0.511, _PR2904),
    "vllm": CustomAllReduce("vllm", 8.01e-6, 0.30e-6, 0.438, _PR2904),
}
"""The engines' custom all-reduce kernels by name (module doc)."""


def custom_allreduce(name: str) -> CustomAllReduce:
    """The preset ``name``; ValueError listing the valid ones."""
    if name not in PRESETS:
        raise ValueError(f"unknown custom all-reduce {name!r}; valid: {', '.join(PRESETS)}")
    return PRESETS[name]
