"""First touch of freshly mapped host memory: the page faults that back a new allocation.

Linux maps anonymous memory lazily: the first write to each page of a fresh mapping
faults, and the kernel allocates a page, zeroes it and maps it before the write
proceeds. A runtime that allocates a large host tensor every step (and frees it) pays
this on every step, because large blocks never come back from the allocator's free
lists:

- PyTorch's default CPU allocator has no caching: ``c10::alloc_cpu`` calls
  ``posix_memalign`` and ``free``, i.e. glibc malloc.
- glibc serves a request at or above its mmap threshold with a fresh ``mmap`` and
  returns it with ``munmap`` on ``free``. The threshold is dynamic (128 KiB at start,
  raised to the size of a freed mmapped block) but never above
  ``DEFAULT_MMAP_THRESHOLD_MAX`` = 4 MiB x sizeof(long) = 32 MiB on 64-bit systems
  (mallopt(3), M_MMAP_THRESHOLD). So a block of 32 MiB or more is a fresh mapping on
  every allocation, whatever came before: :func:`fresh_every_allocation`.

The cost is priced per byte touched (:class:`FirstTouch`):

- ``thread_Bps``, one thread's first-touch rate on 4 KiB pages, default 3.29 GB/s:
  ``numpy.empty`` of 1 GiB plus one write per 4 KiB page took 0.3266 s on a GV100
  workstation (rapidsai/dask-cuda PR #98, 2019; 262,144 faults, 1.25 us each). A
  second figure brackets it: a fresh 5,000 x 5,000 fp32 tensor filled with ones ran at
  22 per second without THP (huggingface/candle issue #2149), 100 MB in 45 ms = 2.2 GB/s
  with the fill's own writes included. With 2 MiB transparent huge pages one thread
  demand-faults about 11.8 GB/s (``perf bench mem map -f demand -p 2MB -s 64GB`` on an
  AMD EPYC server before the change, Linux patch series "x86/mm: Add multi-page
  clearing" v4, 2025; 11.76 GB/s on AMD Genoa in the commit "mm: folio_zero_user: clear
  pages sequentially"): the ``thp`` rows of the robustness sweep.
- ``parallel_faulters``, how many threads faulting into one address space proceed at
  the full per-thread rate together (aggregate rate = ``thread_Bps x
  min(threads, parallel_faulters)``), default 6.60: mmtests ``pft-threads`` (one
  anonymous mapping of about 100 GB, faulted by N threads in parallel; 4 KiB pages, as
  898,782 faults/s of 2 MiB would be 1.9 TB/s) on a 2-socket Xeon 8336C (Ice Lake, run
  at 1-128 threads) under Linux 6.2-rc4 before per-VMA locks (Punit Agrawal, LKML,
  "Re: [External] [PATCH v2 00/33] Per-VMA locks", 2023-02-15, first column): 898,782
  faults/s on one thread, 5,814,379 on 21 and 6,153,685 on 30, so 5,927,481 on 24 by
  linear interpolation = 6.60 threads' worth.
  The same report's curve: 4 threads 3.30, 7: 4.61, 12: 5.53, 21: 6.47, 30: 6.85, 48:
  6.90, 128: 7.19 (so ``min`` overstates thread counts below about 20: 12 threads
  price at 6.60, measured 5.53). Its one-thread rate, 898,782 x 4 KiB = 3.68 GB/s,
  agrees with ``thread_Bps``. Cross-checks at 24 threads: with per-VMA locks (the same
  report's second column) 6.85; the same benchmark with per-VMA locks, 1-56 threads on
  a machine the cover letter does not name (the thread it follows ran on Broadwell;
  Suren Baghdasaryan, "[PATCH v9 00/17] reimplement per-vma lock as a refcount",
  2025-01-10, first column): 3,988,619 / 507,566 = 7.86 at 21 threads, 7.70 at 30;
  will-it-scale ``page_fault1`` (each task maps, faults and unmaps 128 MiB; mmap and
  munmap interleave with the other threads' faults) on 2 x 12-core Xeon E5-2650 v4,
  Linux 5.13 (Zi Yan, linux-mm, "Re: [RFC PATCH 0/7] Memory hotplug/hotremove at
  subsection size", 2021-06-02): 24 threads of one process 2,138,067 pages/s against
  335,502 per process for 24 processes = 6.37. A remark without figures that several
  threads faulting one buffer were no faster than one (ikawrakow/ik_llama.cpp PR
  #2010, 2026) is the low end of ``scenarios/first-touch-robustness.yaml``, which
  sweeps 1-24; headlines depending on it are ranges.

Who faults in ZeRO-Inference's run: PyTorch's CPU copies (a dtype conversion such as
``.float()``, or a copy into a tensor) go through ``TensorIteratorBase::for_each``,
which splits any copy over ``at::internal::GRAIN_SIZE`` (32,768) elements into one
contiguous range per intra-op thread (``at::parallel_for``), so every intra-op thread
first-touches its own share of the new pages. The intra-op thread count is
``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` or else the physical core count
(``ATen/ParallelCommon.cpp`` ``intraop_default_num_threads``,
``c10/core/thread_pool.cpp``); DeepSpeed's launcher sets ``OMP_NUM_THREADS`` only with
``--bind_cores_to_rank``, and ``run_bloom175b_a6000.sh`` / ``run_model.py`` set neither,
so it is all physical cores. A device-to-host copy into pageable memory is modelled as
written by one thread (the driver's copy out of its pinned staging buffer, not an
intra-op loop): one faulter, whatever ``parallel_faulters`` is.

Not priced: ``munmap`` of the freed block (page freeing, TLB shoot-downs).
"""

from __future__ import annotations

from dataclasses import dataclass

MMAP_THRESHOLD_MAX_BYTES = 32 * 1024 * 1024  # glibc DEFAULT_MMAP_THRESHOLD_MAX, 64-bit
THREAD_FIRST_TOUCH_BPS = 1_073_741_824 / 0.3266  # dask-cuda PR #98: 1 GiB in 0.3266 s
# mmtests pft-threads faults/s on a 2-socket Xeon 8336C, Linux 6.2-rc4 (Punit
# Agrawal, LKML 2023-02-15): 1 thread, 21 and 30 threads; 24 threads interpolated
PFT_FAULTS_PER_S = {1: 898_781.7694, 21: 5_814_379.4789, 30: 6_153_685.3709}
PARALLEL_FAULTERS = (
    PFT_FAULTS_PER_S[21] + (PFT_FAULTS_PER_S[30] - PFT_FAULTS_PER_S[21]) * (24 - 21) / (30 - 21)
) / PFT_FAULTS_PER_S[1]  # 6.595: 24 threads fault 6.6 threads' worth


def fresh_every_allocation(nbytes: float) -> bool:
    """Whether glibc malloc serves a block of ``nbytes`` with a fresh mapping on every
    allocation (at or above the highest mmap threshold it ever sets)."""
    return nbytes >= MMAP_THRESHOLD_MAX_BYTES


@dataclass(frozen=True)
class FirstTouch:
    """Seconds to fault in (allocate, zero, map) freshly mapped host memory on first write."""

    thread_Bps: float = THREAD_FIRST_TOUCH_BPS
    parallel_faulters: float = PARALLEL_FAULTERS

    def __post_init__(self) -> None:
        if self.thread_Bps <= 0:
            raise ValueError(f"first_touch_thread_Bps: must be > 0, got {self.thread_Bps}")
        if self.parallel_faulters < 1:
            raise ValueError(
                f"first_touch_parallel_faulters: must be >= 1, got {self.parallel_faulters}"
            )

    def rate_Bps(self, threads: int = 1) -> float:
        """Aggregate first-touch rate of ``threads`` threads writing one fresh block."""
        return self.thread_Bps * min(float(max(threads, 1)), self.parallel_faulters)

    def time_s(self, nbytes: float, threads: int = 1) -> float:
        """First touch of ``nbytes`` of fresh pages by ``threads`` threads."""
        return max(nbytes, 0.0) / self.rate_Bps(threads)

    def block_s(self, nbytes: float, threads: int = 1) -> float:
        """A block of ``nbytes`` allocated and written once: faulted in only when glibc
        maps it fresh (:func:`fresh_every_allocation`), else reused from the heap."""
        return self.time_s(nbytes, threads) if fresh_every_allocation(nbytes) else 0.0
