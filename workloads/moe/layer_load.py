"""kt-kernel's layerwise GPU prefill: the stages that load one layer's INT4 experts.

Read from kvcache-ai/sglang ``python/sglang/srt/layers/moe/kt_full_context.py``
(``SharedFullContext._prepare_weight_int4``, the RAWINT4 / compressed-tensors WNA16
path) and kt-kernel's ``write_weights_to_buffer`` (AMX K2 MoE). One Python thread,
pinned to the last core, walks the layer's experts ``e = 0..n-1``:

1. **write** (CPU threads): ``sync_write_weight_scale_to_buffer`` waits for expert
   ``e``'s write, then ``submit_write_weight_scale_to_buffer(e + 1)`` starts the next:
   each NUMA node's thread pool copies its share of the expert's packed INT4 weights
   (``fast_memcpy``, streaming stores) and converts its fp32 scales to bf16 into a pinned
   double buffer (two experts' worth, ``cudaHostRegister``-ed shared memory). Priced as a
   CPU stream of ``2 x expert bytes`` (read + write) on the CPU model.
2. **copy** (copy engine): expert ``e``'s four tensors host-to-device on a copy stream
   (``non_blocking``, pinned): the workload's expert copy time on the PCIe queue.
3. **repack** (GPU, a post-processing stream after the copy's event): per tensor a
   transpose through a temporary (two copies), ``gptq_marlin_repack`` of the two weight
   tensors into a new tensor copied back, ``marlin_permute_scales`` of the two scale
   tensors copied back: about eight passes over the expert's bytes (read + write:
   ``REPACK_TRAFFIC_FACTOR``) at the GPU's memory roofline, plus one launch per kernel
   (``REPACK_KERNELS``; transposes priced at full bandwidth: optimistic).
4. **host** (the Python thread): the iteration issues ``HOST_OPS_PER_EXPERT`` plain
   PyTorch ops (4 copies; 8 transpose copies, 2 repacks and 2 copy-backs; the 2 scale
   copy-backs), each at ``host_op_s``, and ``PERMUTE_SCALES_PER_EXPERT`` calls of
   ``marlin_permute_scales`` at ``permute_scales_s`` each: the function rebuilds its
   permutation as a Python list and indexes the scales with it (a list-to-tensor
   conversion, a blocking index upload and the gather). Measured: ModelCloud/GPTQModel
   PR #2988 (2026-07-27; the same function body, copied from vLLM's marlin_utils like
   sglang's) reports that these per-call list rebuilds added ~4.4 s over 36,432 quant
   modules while loading a MoE model: 121 us per call if each module made one call,
   60 us if it also permuted a bias (both swept). Expert
   ``e``'s copy is issued only after its write is synced, and the iteration cannot end
   before expert ``e - 1``'s repack has run: ``marlin_permute_scales`` indexes with a
   Python list, whose upload to the GPU is a blocking copy that synchronises the
   post-processing stream.

After the loop the compute stream waits for the last repack, then the fused MoE runs
(``experts_after_layer_copies``). A stage with no measurement of its own uses catalogue
quantities (CPU bandwidth, GPU memory bandwidth and launch overhead) or the named
``host_op_s`` (default 20 us: a PyTorch op's call to its kernel's start in the Nsight
Systems user guide's V100 trace, the serving workload's ``cpu_launch_s``); both host
constants are swept in ``scenarios/kt-layer-load-robustness.yaml``. Reconstruction: the
stage split is read from the code; only ``permute_scales_s`` is measured (on another
machine, in another program calling the same function), the other per-stage rates are
catalogue rates, not measurements on the rows' machines. Searched for kt-kernel's own
figures (query terms as sent: "layerwise prefill GPU expert weights write buffer H2D
copy time per layer kt-gpu-prefill-token-threshold", "write_weight_scale_to_buffer
bandwidth GB/s optimization kt-kernel PR fast_memcpy", "gptq_marlin_repack time per
expert slow repack weights loading", "kvcache-ai sglang kt-gpu-prefill-token-threshold
full GPU fallback layer weight loading time ms per layer Kimi K2 RAWINT4"): kt-kernel
ships write-buffer benchmarks (kt-kernel/bench/bench_k2_write_buffer.py) with no
published output; kvcache-ai/sglang PR #41 says the per-chunk reload of DeepSeek-V4-Flash
MXFP4 layers "floors prefill throughput at ~430 tok/s" on 8x RTX 5090 (a different
format and path, no per-stage split); ktransformers issue #2023 (a maintainer: the load
is a three-stage CPU RAM -> GPU pipeline) is qualitative.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HOST_OPS_PER_EXPERT = 18
"""Plain PyTorch ops the Python loop issues per expert (module doc, step 4)."""
PERMUTE_SCALES_PER_EXPERT = 2
"""``marlin_permute_scales`` calls per expert (w13 and w2 scales; module doc, step 4)."""
PERMUTE_SCALES_S = 121e-6
"""Host seconds per ``marlin_permute_scales`` call (GPTQModel PR #2988: ~4.4 s / 36,432
modules; 60 us if each module also permuted a bias)."""
REPACK_TRAFFIC_FACTOR = 8.0
"""GPU bytes moved per expert byte by the transposes and repacks (module doc, step 3)."""
REPACK_KERNELS = 16
"""GPU kernels of one expert's post-processing (8 transpose copies, 2 repacks, 2
copy-backs, 2 scale gathers, 2 scale copy-backs)."""


@dataclass(frozen=True)
class LayerLoadStages:
    """Seconds per expert of the stages around each expert copy (module doc)."""

    host_s: float
    write_s: float
    repack_s: float

    def __post_init__(self) -> None:
        if min(self.host_s, self.write_s, self.repack_s) < 0:
            raise ValueError(f"layer load stages must be >= 0, got {self}")


def load_layer(
    res: Any, start_s: float, n: int, st: LayerLoadStages
) -> tuple[float, list[tuple[float, float]]]:
    """Load ``n`` experts from ``start_s`` through write, copy (``res.copy``: the PCIe
    queue) and repack; returns when the last repack ends and each copy's (start, end)."""
    copies: list[tuple[float, float]] = []
    if n <= 0:
        return start_s, copies
    it_start = start_s  # the Python loop's iteration start
    write_end = start_s + st.write_s  # expert 0's write is submitted before the loop
    repack_end = start_s
    for _ in range(n):
        synced = max(it_start, write_end)  # sync_write(e), then submit write(e + 1)
        c0, c1 = res.copy(synced)
        copies.append((c0, c1))
        it_end = max(synced + st.host_s, repack_end)  # blocks on repack(e - 1)
        repack_end = max(repack_end, c1) + st.repack_s
        write_end = synced + st.write_s
        it_start = it_end
    return max(repack_end, it_start), copies
