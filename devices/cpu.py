"""CPU compute model: quantised GEMV/GEMM, thread scaling, NUMA, per-call overhead.

A CPU matrix op over ``n`` tokens with ``P`` weights stored as ``weight_bytes`` in a
format ``f`` (``q4_0``, ``q8_0``, ``bf16``...) takes

    time = max(memory, compute) + call_overhead_s
    memory  = (weight_bytes + activation_bytes) / bandwidth(threads, sockets, numa)
    compute = min(GEMV, GEMM)
    GEMV    = P n / (T clock dequant_weights_per_cycle[f])          (decode path)
    GEMM    = 2 P n / (T clock matrix_flops_per_cycle e_gemm(t) s_f)
              + P / (T clock dequant_weights_per_cycle[f])           (dequantise once)

with ``e_gemm(t)`` the GEMM efficiency at ``t`` threads per socket: ``gemm_efficiency``
up to 4 threads, ``gemm_efficiency_full_socket`` on every core of a socket (``C``), and
log-linear in ``t`` between (``e4 (e_C / e4) ** (ln(t / 4) / ln(C / 4))``; the AMX
measurements of ``devices/data/cpu_amx_points.csv``, fitted by
``devices/cpu_amx_calibration.py``), and ``s_f = int8_gemm_speedup`` for the int8 matrix
path's weight formats (``int4``, ``int8``: kt-kernel's AMXINT4/AMXINT8), else 1.

with ``T`` threads. Bandwidth: each socket draws ``min(threads on it x
core_bandwidth_Bps, active dies x die read ceiling, achievable socket bandwidth)``, the
achievable socket bandwidth being the catalogue's DRAM peak times its memory efficiency
(fitted to STREAM, K05). On chiplet CPUs whose cores sit on dies linked to a separate I/O
die (AMD CCDs, ``dies`` > 0) a die's reads cross one fabric link of
``die_read_bytes_per_cycle`` at ``fabric_clock_hz`` (``die_links`` links per die), reaching
``die_link_efficiency`` of that rate (measured: one Zen 2 CCD saturates at ~37 GB/s whatever
its DIMMs, ``devices/cpu_kernels.yaml`` B7); threads spread over the dies (the scheduler
balances busy threads across L3 domains), so ``min(threads, dies)`` dies are active. Two
sockets: with weights interleaved across both memories (``numa: interleave``, what a
NUMA-unaware runtime gets), half of each socket's reads are remote at
``remote_bandwidth_ratio`` of the local rate, so a socket streams at the harmonic rate
``2 r / (1 + r)`` of local and two sockets give ``4 r / (1 + r)`` (1.22x at the H02 ratio
0.438), not 2x. ``numa: replicate`` (a copy of the weights per socket, kTransformers'
NUMA mode) reads only locally: 2x bandwidth for 2x host memory. ``traffic_ratio``
(>= 1, e.g. a TEE's data + metadata over data) divides the useful bandwidth.

Kernel path: ``min(GEMV, GEMM)`` assumes the engine runs whichever is faster at each
token count. An engine with its own rule forces one (``path``): kt-kernel's AMX MoE
operator (AMXINT4/AMXINT8) runs every expert of a forward call on its AVX-512 VNNI
vector kernel unless the call routes more than 4 tokens per expert on average over the
layer's experts (``qlen > 4 E / k``: ``kt-kernel/operators/amx/moe.hpp`` do_gate_up_gemm /
do_down_gemm; ``doc/en/AMX.md`` section 3), and that vector kernel re-unpacks the int4
weights for each token row (``GemmKernel224Int4::avx_kernel``, ``la/amx_kernels.hpp``), so
its compute grows as the GEMV term, ``n`` x one row, even at 2-32 tokens per expert.

Weight streaming of a matrix op reaches ``gemv_bandwidth_efficiency`` of that bandwidth
(1.0: the STREAM-fitted rate; no CPU GEMV bandwidth microbenchmark is in the calibration
data, so the default is 1 and the constant is swept in scenarios/cpu-robustness.yaml).

Synchronisation (measured, ``devices/cpu_kernels.yaml``): every kernel call ends in a
thread-pool barrier of ``call_overhead_s`` at up to 4 threads, growing by
``call_overhead_per_doubling_s`` per doubling of the threads beyond 4 (ggml
``test-barrier``). A CPU graph launched from another backend (a CPU split between GPU
splits) either wakes a resident pool (``launch: pool``: one barrier) or, in engines that
start their threads per graph (ggml before its thread pool, 2024-08), creates and joins
``threads - 1`` threads at ``thread_spawn_s`` each (``launch: spawn``).

Constants per CPU: ``devices/cpu_kernels.yaml`` (each with its source or marked as a
reconstruction); a scenario overrides any of them by name.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml

from hetsim.devices import fit_overrides
from hetsim.devices.spec import DeviceSpec


def _yaml_load(text: str) -> Any:
    """``yaml.safe_load`` with libyaml's parser when present (same objects, ~10x faster)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


KERNEL_FILE = Path(__file__).resolve().parent / "cpu_kernels.yaml"
NumaMode = Literal["interleave", "replicate"]
LaunchMode = Literal["pool", "spawn"]
MatrixPath = Literal["auto", "vector", "matrix"]
BARRIER_REFERENCE_THREADS = 4  # call_overhead_s is measured at up to this many threads
GEMM_FEW_THREADS = 4  # gemm_efficiency holds up to this many threads per socket
INT8_PATH_FORMATS = frozenset({"int4", "int8"})  # weights on the int8 matrix path (AMX)


@dataclass(frozen=True)
class CpuKernels:
    """Kernel constants of one CPU type (see ``devices/cpu_kernels.yaml`` for each)."""

    clock_hz: float
    vector_flops_per_cycle: float
    matrix_flops_per_cycle: float
    core_bandwidth_Bps: float
    dequant_weights_per_cycle: dict[str, float]
    remote_bandwidth_ratio: float
    gemm_efficiency: float
    call_overhead_s: float
    call_overhead_per_doubling_s: float = 0.0
    thread_spawn_s: float = 0.0
    gemm_efficiency_full_socket: float = 0.0  # 0: gemm_efficiency at every thread count
    int8_gemm_speedup: float = 1.0  # int8 matrix path (formats INT8_PATH_FORMATS) over bf16
    gemv_bandwidth_efficiency: float = 1.0
    dies: float = 0.0  # core dies behind fabric links per socket (0: monolithic, no ceiling)
    die_read_bytes_per_cycle: float = 32.0
    fabric_clock_hz: float = 0.0
    die_links: float = 1.0
    die_link_efficiency: float = 1.0

    def __post_init__(self) -> None:
        for key in ("clock_hz", "vector_flops_per_cycle", "matrix_flops_per_cycle",
                    "core_bandwidth_Bps"):  # fmt: skip
            if not getattr(self, key) > 0:
                raise ValueError(f"{key}: must be > 0")
        if not 0 < self.remote_bandwidth_ratio <= 1:
            raise ValueError("remote_bandwidth_ratio: must be in (0, 1]")
        if not 0 < self.gemm_efficiency <= 1:
            raise ValueError("gemm_efficiency: must be in (0, 1]")
        if not 0 <= self.gemm_efficiency_full_socket <= 1:
            raise ValueError("gemm_efficiency_full_socket: must be in [0, 1] (0: unset)")
        if not self.int8_gemm_speedup > 0:
            raise ValueError("int8_gemm_speedup: must be > 0")
        for key in ("call_overhead_s", "call_overhead_per_doubling_s", "thread_spawn_s"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key}: must be >= 0")
        if not 0 < self.gemv_bandwidth_efficiency <= 1:
            raise ValueError("gemv_bandwidth_efficiency: must be in (0, 1]")
        if self.dies < 0 or self.dies != int(self.dies):
            raise ValueError("dies: must be a whole number >= 0 (0: no per-die ceiling)")
        if self.dies > 0:
            for key in ("die_read_bytes_per_cycle", "fabric_clock_hz", "die_links"):
                if not getattr(self, key) > 0:
                    raise ValueError(f"{key}: must be > 0 when dies > 0")
            if not 0 < self.die_link_efficiency <= 1:
                raise ValueError("die_link_efficiency: must be in (0, 1]")
        for fmt, rate in self.dequant_weights_per_cycle.items():
            if not rate > 0:
                raise ValueError(f"dequant_weights_per_cycle.{fmt}: must be > 0")

    @property
    def die_bandwidth_Bps(self) -> float:
        """Read ceiling of one core die's fabric link(s); ``inf`` on a monolithic CPU."""
        if self.dies <= 0:
            return math.inf
        return (
            self.die_read_bytes_per_cycle
            * self.fabric_clock_hz
            * self.die_links
            * self.die_link_efficiency
        )

    def gemm_efficiency_at(self, threads_per_socket: float, cores_per_socket: float) -> float:
        """GEMM efficiency at ``threads_per_socket`` busy cores of a ``cores_per_socket``
        socket: ``gemm_efficiency`` up to 4 threads, ``gemm_efficiency_full_socket`` on
        every core, log-linear in the thread count between (module doc)."""
        e4, full = self.gemm_efficiency, self.gemm_efficiency_full_socket
        if full <= 0 or threads_per_socket <= GEMM_FEW_THREADS:
            return e4
        if threads_per_socket >= cores_per_socket:
            return full
        x = math.log(threads_per_socket / GEMM_FEW_THREADS) / math.log(
            cores_per_socket / GEMM_FEW_THREADS
        )
        return float(e4 * (full / e4) ** x)

    def dequant_rate(self, fmt: str) -> float:
        """Weights per cycle per core of a GEMV in ``fmt`` (ValueError lists the formats)."""
        try:
            return self.dequant_weights_per_cycle[fmt]
        except KeyError:
            known = ", ".join(sorted(self.dequant_weights_per_cycle))
            raise ValueError(f"cpu weight format {fmt!r} unknown; known: {known}") from None


_FIELDS = {f.name for f in dataclasses.fields(CpuKernels)}


@cache
def _table() -> dict[str, Any]:
    data: dict[str, Any] = _yaml_load(KERNEL_FILE.read_text())
    return data


def cpu_kernels(name: str, overrides: dict[str, Any] | None = None) -> CpuKernels:
    """Kernel constants of the CPU type ``name`` with ``overrides`` applied on top.

    ValueError names the field (``cpu_kernels.gemm_efficiency: must be in (0, 1]``)."""
    table = _table()
    if name not in table["cpus"]:
        known = ", ".join(sorted(table["cpus"]))
        raise ValueError(f"cpu: no kernel constants for CPU type {name!r}; known: {known}")
    merged: dict[str, Any] = dict(table["defaults"])
    merged["dequant_weights_per_cycle"] = dict(table["defaults"]["dequant_weights_per_cycle"])
    # the CPU's entry, refitted constants under cross-validation (devices/fit_overrides.py),
    # then the scenario's own overrides
    for source in (table["cpus"][name], fit_overrides.cpu_fields(name), overrides or {}):
        for key, value in source.items():
            if key not in _FIELDS:
                raise ValueError(f"cpu_kernels.{key}: unknown field; valid: {sorted(_FIELDS)}")
            try:
                if key == "dequant_weights_per_cycle":
                    merged[key].update({k: float(v) for k, v in dict(value).items()})
                else:
                    merged[key] = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"cpu_kernels.{key}: must be a number (or a map)") from None
    try:
        return CpuKernels(**merged)
    except ValueError as e:
        raise ValueError(f"cpu_kernels.{e}") from None


class CpuModel:
    """Times of matrix ops and memory streams on ``threads`` threads of 1-2 sockets."""

    def __init__(
        self,
        spec: DeviceSpec,
        kernels: CpuKernels,
        *,
        threads: int | None = None,
        sockets: int = 1,
        numa: NumaMode = "interleave",
        socket_bandwidth_Bps: float | None = None,
        traffic_ratio: float = 1.0,
    ) -> None:
        if sockets not in (1, 2):
            raise ValueError(f"cpu_sockets: 1 or 2, got {sockets}")
        total = spec.cores * sockets
        self.threads = total if threads is None else threads
        if not 1 <= self.threads <= total:
            raise ValueError(
                f"cpu_threads: {self.threads} not in 1..{total} ({spec.name} x {sockets})"
            )
        self.spec, self.k, self.sockets, self.numa = spec, kernels, sockets, numa
        peak = (
            socket_bandwidth_Bps if socket_bandwidth_Bps is not None else spec.memory_bandwidth_Bps
        )
        self.socket_bandwidth_Bps = peak * spec.memory_efficiency.max_eff
        if traffic_ratio < 1.0:
            raise ValueError(f"traffic_ratio: must be >= 1, got {traffic_ratio}")
        self.traffic_ratio = traffic_ratio  # bytes moved per useful byte (TEE metadata)
        self.bandwidth_Bps = self._bandwidth(self.threads, sockets) / traffic_ratio
        self.weight_bandwidth_Bps = self.bandwidth_Bps * kernels.gemv_bandwidth_efficiency
        self.cycles_per_s = self.threads * kernels.clock_hz
        self.gemm_efficiency = kernels.gemm_efficiency_at(
            math.ceil(self.threads / sockets), spec.cores
        )
        doublings = max(0.0, math.log2(self.threads / BARRIER_REFERENCE_THREADS))
        self.call_overhead_s = (
            kernels.call_overhead_s + kernels.call_overhead_per_doubling_s * doublings
        )

    def launch_s(self, mode: LaunchMode) -> float:
        """Start of one CPU graph from another backend: wake the resident pool (one
        barrier) or create and join ``threads - 1`` worker threads."""
        if mode == "spawn":
            return (self.threads - 1) * self.k.thread_spawn_s
        return self.call_overhead_s

    def _bandwidth(self, threads: int, sockets: int) -> float:
        per_socket = math.ceil(threads / sockets)
        dies = min(self.k.dies, per_socket) if self.k.dies > 0 else 1
        local = min(
            per_socket * self.k.core_bandwidth_Bps,
            dies * self.k.die_bandwidth_Bps,
            self.socket_bandwidth_Bps,
        )
        if sockets == 1 or self.numa == "replicate":
            return sockets * local
        r = self.k.remote_bandwidth_ratio
        return sockets * local * 2.0 * r / (1.0 + r)

    def two_socket_speedup(self) -> float:
        """Bandwidth of two sockets over one at the same threads per socket."""
        per_socket = math.ceil(self.threads / self.sockets)
        return self._bandwidth(2 * per_socket, 2) / self._bandwidth(per_socket, 1)

    def matmul_times_s(
        self, params: float, tokens: np.ndarray, weight_bytes: float, fmt: str,
        act_bytes_per_token: float = 0.0, path: MatrixPath = "auto",
    ) -> np.ndarray:  # fmt: skip
        """Seconds of one weight matrix op (``params`` weights) at each token count.

        ``path``: ``auto`` takes the faster of the GEMV and GEMM compute terms at each
        token count; ``vector`` / ``matrix`` force one of them, for an engine that
        chooses its kernel by a rule of its own (kt-kernel: module doc)."""
        n = np.asarray(tokens, dtype=float)
        memory = weight_bytes / self.weight_bandwidth_Bps + act_bytes_per_token * n / (
            self.bandwidth_Bps
        )
        dq = params / (self.cycles_per_s * self.k.dequant_rate(fmt))
        gemv = dq * n
        speedup = self.k.int8_gemm_speedup if fmt in INT8_PATH_FORMATS else 1.0
        matrix = self.cycles_per_s * self.k.matrix_flops_per_cycle * self.gemm_efficiency
        gemm = 2.0 * params * n / (matrix * speedup) + dq
        compute = gemv if path == "vector" else gemm if path == "matrix" else np.minimum(gemv, gemm)
        t = np.maximum(memory, compute) + self.call_overhead_s
        return np.where(n > 0, t, 0.0)

    def matmul_time_s(
        self, params: float, tokens: int, weight_bytes: float, fmt: str,
        act_bytes_per_token: float = 0.0,
    ) -> float:  # fmt: skip
        """:meth:`matmul_times_s` at one token count."""
        arr = np.array([tokens])
        return float(self.matmul_times_s(params, arr, weight_bytes, fmt, act_bytes_per_token)[0])

    def stream_time_s(self, nbytes: float, flops: float = 0.0) -> float:
        """An op that reads ``nbytes`` (KV cache, activations) and does ``flops`` of fp32
        vector math (attention): the slower of the two, plus one call overhead."""
        if nbytes <= 0 and flops <= 0:
            return 0.0
        vector = self.cycles_per_s * self.k.vector_flops_per_cycle * self.k.gemm_efficiency
        return max(nbytes / self.bandwidth_Bps, flops / vector) + self.call_overhead_s
