"""Prices of one dense-model step, per layer, on the GPU, the CPU and the copy paths.

Shapes come from the model's published config (``workloads/models/dense.yaml``): per
layer ``P = (params - 2 V h) / L`` weights (embeddings and LM head excluded),
attention width ``h``, KV ``2 kv_heads head_dim`` values per token. A micro-batch of
``m`` sequences advancing ``n`` tokens each after ``c`` tokens of context does

- weight GEMMs: ``2 P m n`` FLOPs over the layer's weights (``P bits / 8`` bytes);
- attention: ``4 m n c_mean h`` FLOPs over the KV of ``m (c + n)`` tokens.

GPU ops are priced by :func:`devices.roofline.op_time_s` (the GPU-side kernel model is
issue 15's); weights held at fewer than 16 bits are dequantised on the fly at
``gpu_dequant_s_per_gb`` seconds per GB of weights (a named parameter, default 0: the
dequantisation fused into the GEMV/GEMM). CPU ops use :class:`devices.cpu.CpuModel`.
Copies: pinned host memory moves at the link rate; pageable memory is staged through a
pinned bounce buffer by a CPU memcpy pipelined with the DMA, and moves at the measured
pageable / pinned ratio of its direction times the link rate (:mod:`devices.host_copy`,
fitted to copy microbenchmarks by size; without them, the prior ``min(link,
core_bandwidth / 2)``: one memcpy thread's read + write); device-to-host
copies at ``d2h_bandwidth_ratio`` of the host-to-device rate; SSD reads at
``ssd_bandwidth_Bps`` pipelined with the PCIe copy when no disk tier is named; with one
(:class:`DiskPath`, the drive's measured curve) reads and writes of weights and KV go
through host memory on the drive's own resource. Host-resident KV is priced in its
host format (``host_kv_bits``: ZeRO-Inference's OPT path allocates its host KV buffer in
fp32), and a CPU attention that converts it to a wider tensor first
(``cpu_kv_upcast_bits``: its BLOOM path calls ``.float()`` on the fp16 KV every step)
moves the extra bytes. With a :class:`devices.first_touch.FirstTouch` model, host memory
written for the first time is faulted in: the new tensors of the upcast (fresh every
step when glibc maps them, at 32 MiB and more), and the host KV buffer that the runtime
allocates at the prompt step and fills token by token, together with the contiguous
staging tensor PyTorch makes for a device-to-host copy into a non-contiguous slice of it
(``aten/src/ATen/native/cuda/Copy.cu``: ``at::empty_like(dst)`` when the destination is
not contiguous). Under H100 confidential computing
every host<->GPU copy goes through an encrypted bounce buffer (:mod:`devices.secure_copy`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from hetsim.devices.cpu import CpuModel
from hetsim.devices.first_touch import FirstTouch
from hetsim.devices.roofline import op_time_s
from hetsim.devices.secure_copy import SecureCopy
from hetsim.devices.spec import DeviceSpec, LinkSpec
from hetsim.devices.storage import StorageSpec
from hetsim.workloads.models.dense import ModelSpec


@dataclass(frozen=True)
class CopyPaths:
    """Host<->GPU and SSD copy rates and per-copy latency."""

    link: LinkSpec
    pageable_Bps: float
    d2h_bandwidth_ratio: float
    ssd_bandwidth_Bps: float
    secure: SecureCopy | None
    pageable_h2d_ratio: float | None = None  # pageable / pinned (devices/host_copy.py)
    pageable_d2h_ratio: float | None = None

    def _pageable(self, rate: float, ratio: float | None) -> float:
        return rate * ratio if ratio is not None else min(rate, self.pageable_Bps)

    def h2d_s(self, nbytes: float, pinned: bool, ssd_bytes: float = 0.0) -> float:
        """Host (and SSD) to GPU: one copy of ``nbytes`` from host memory plus
        ``ssd_bytes`` read from SSD through host memory (pipelined)."""
        total = nbytes + ssd_bytes
        if total <= 0:
            return 0.0
        rate = self.link.effective_bandwidth_Bps(total)
        if not pinned:
            rate = self._pageable(rate, self.pageable_h2d_ratio)
        t = self.link.latency_s + total / rate
        if ssd_bytes > 0:
            t = max(t, ssd_bytes / self.ssd_bandwidth_Bps)
        if self.secure is not None:
            t = self.secure.copy_time_s(t, int(total))
        return t

    def d2h_s(self, nbytes: float, pinned: bool = True) -> float:
        """GPU to host at the direction's rate (pageable: through the bounce buffer)."""
        if nbytes <= 0:
            return 0.0
        rate = self.link.effective_bandwidth_Bps(nbytes) * self.d2h_bandwidth_ratio
        if not pinned:
            rate = self._pageable(rate, self.pageable_d2h_ratio)
        t = self.link.latency_s + nbytes / rate
        if self.secure is not None:
            t = self.secure.copy_time_s(t, int(nbytes))
        return t


F = TypeVar("F", bound=Callable[..., float])


def _memo(method: F) -> F:
    """Keep a price per argument tuple on the instance: a placement search prices the
    same (sequences, tokens, context) layer-step for each of its ~300 plans, and the
    prices are pure functions of the arguments and of the (unchanging) instance."""
    slot = f"_memo_{method.__name__}"

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any) -> float:
        memo: dict[tuple[Any, ...], float] = self.__dict__.setdefault(slot, {})
        try:
            return memo[args]
        except KeyError:
            value = memo[args] = method(self, *args)
            return value

    return wrapper  # type: ignore[return-value]


class DenseCosts:
    """Per-layer prices of a dense model on one GPU, one CPU model and the copy paths."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: DeviceSpec,
        cpu: CpuModel,
        *,
        weight_bits: float,
        kv_bits: float,
        gpu_dtype: str,
        cpu_format: str,
        gpu_dequant_s_per_gb: float,
        cpu_calls_per_layer: int,
        host_kv_bits: float | None = None,
        cpu_kv_upcast_bits: float | None = None,
        first_touch: FirstTouch | None = None,
    ) -> None:
        self.model, self.gpu, self.cpu = model, gpu, cpu
        self.gpu_dtype, self.cpu_format = gpu_dtype, cpu_format
        self.layer_params = (model.params - 2 * model.vocab * model.hidden) / model.layers
        if self.layer_params <= 0:
            raise ValueError(f"model: {model.name} has no weights left per layer")
        self.layer_weight_bytes = int(self.layer_params * weight_bits / 8)
        self.kv_bytes_per_token_layer = int(2 * model.kv_heads * model.head_dim * kv_bits / 8)
        kv_values = 2 * model.kv_heads * model.head_dim
        # the KV as held in host memory (a runtime may keep it wider than on the GPU)
        self.host_kv_bytes_per_token_layer = int(
            kv_values * (kv_bits if host_kv_bits is None else host_kv_bits) / 8
        )
        # a CPU attention that first converts the host KV to a new, wider tensor
        self.cpu_kv_upcast_bytes_per_token_layer = (
            0 if cpu_kv_upcast_bits is None else int(kv_values * cpu_kv_upcast_bits / 8)
        )
        self.lm_params = model.vocab * model.hidden
        self.weight_bits = weight_bits
        self.gpu_dequant_s_per_gb = gpu_dequant_s_per_gb
        self.cpu_calls_per_layer = cpu_calls_per_layer
        self.first_touch = first_touch

    # ---- GPU ----------------------------------------------------------------------
    @_memo
    def gpu_linear_s(self, tokens: int) -> float:
        """GPU weight GEMMs of one layer over ``tokens`` tokens (weights read once)."""
        flops = 2.0 * self.layer_params * tokens
        act = 4.0 * self.model.hidden * tokens
        t = op_time_s(self.gpu, flops, self.layer_weight_bytes + act, self.gpu_dtype)
        return t + self.gpu_dequant_s_per_gb * self.layer_weight_bytes / 1e9

    def _attention_work(self, seqs: int, new: int, context: int) -> tuple[float, float]:
        mean_ctx = context + (new + 1) / 2.0
        flops = 4.0 * seqs * new * mean_ctx * self.model.hidden
        kv = float(seqs * (context + new) * self.kv_bytes_per_token_layer)
        return flops, kv

    def linear_flops(self, tokens: int) -> float:
        """FLOPs of one layer's weight GEMMs over ``tokens`` tokens (the energy
        accounting's compute utilisation; :mod:`hetsim.devices.power`)."""
        return 2.0 * self.layer_params * tokens

    def attention_flops(self, seqs: int, new: int, context: int) -> float:
        """FLOPs of one layer's attention over ``seqs`` sequences (as the prices)."""
        return self._attention_work(seqs, new, context)[0]

    @_memo
    def gpu_attention_s(self, seqs: int, new: int, context: int) -> float:
        """GPU attention of one layer over ``seqs`` sequences."""
        flops, kv = self._attention_work(seqs, new, context)
        return op_time_s(self.gpu, flops, kv, self.gpu_dtype)

    def lm_head_gpu_s(self, tokens: int) -> float:
        """LM head on the GPU for ``tokens`` positions (fp16 weights)."""
        return op_time_s(self.gpu, 2.0 * self.lm_params * tokens, 2.0 * self.lm_params,
                         self.gpu_dtype)  # fmt: skip

    # ---- CPU ----------------------------------------------------------------------
    @_memo
    def cpu_linear_s(self, tokens: int) -> float:
        """CPU weight matmuls of one layer over ``tokens`` tokens, with the per-call
        overheads of the layer's other kernels (norms, rope, softmax, adds)."""
        t = self.cpu.matmul_time_s(self.layer_params, tokens, self.layer_weight_bytes,
                                   self.cpu_format, 4.0 * self.model.hidden)  # fmt: skip
        return t + (self.cpu_calls_per_layer - 1) * self.cpu.call_overhead_s

    @_memo
    def cpu_attention_s(self, seqs: int, new: int, context: int) -> float:
        """CPU attention of one layer over host-resident KV (in its host format). With an
        upcast the KV is first converted into new tensors, one for K and one for V (read
        host bytes, write the wide bytes), that the attention then reads: ``host + 2 x
        wide`` bytes per token; with a first-touch model, each new tensor that glibc maps
        fresh is faulted in by the CPU threads that write it."""
        flops, _ = self._attention_work(seqs, new, context)
        tokens = float(seqs * (context + new))
        up = self.cpu_kv_upcast_bytes_per_token_layer
        per_token = self.host_kv_bytes_per_token_layer + 2 * up
        t = self.cpu.stream_time_s(tokens * per_token, flops)
        if up > 0 and self.first_touch is not None:
            t += 2 * self.first_touch.block_s(tokens * up / 2, self.cpu.threads)
        return t

    def host_kv_first_touch_s(self, tokens: int, staged: bool, share: float = 1.0) -> float:
        """First touch of ``tokens`` tokens' KV (``share`` of it host-resident) written
        into the host KV buffer of one layer (fresh pages: the buffer is mapped at the
        prompt step and written once per position), by the CPU threads of PyTorch's copy;
        with ``staged`` (a non-blocking copy into a non-contiguous slice) the K and V
        staging tensors of the same size are faulted in first by the one thread that
        receives the device-to-host copy, when glibc maps them fresh. 0 without a
        first-touch model."""
        if self.first_touch is None or tokens <= 0 or share <= 0:
            return 0.0
        nbytes = float(tokens * self.host_kv_bytes_per_token_layer) * share
        t = self.first_touch.time_s(nbytes, self.cpu.threads)
        if staged:
            t += 2 * self.first_touch.block_s(nbytes / 2, 1)
        return t

    def lm_head_cpu_s(self, tokens: int) -> float:
        """LM head on the CPU (held in the CPU weight format at the layers' bits)."""
        nbytes = self.lm_params * self.weight_bits / 8
        return self.cpu.matmul_time_s(self.lm_params, tokens, nbytes, self.cpu_format)


@dataclass(frozen=True)
class DiskPath:
    """The disk tier's path to host memory and on to the GPU (:mod:`devices.storage`).

    A read or write of ``n`` bytes moves in requests of ``request_bytes`` with
    ``queue_depth`` in flight at the drive's curve. ``io: page_cache`` goes through the
    kernel page cache: one extra CPU memcpy between the page cache and the user buffer,
    pipelined with the drive, at ``memcpy_Bps`` (half one core's bandwidth: read +
    write); ``o_direct`` moves the drive's DMA straight into the user buffer. A disk to
    GPU transfer is pipelined through a host staging buffer, ``staging_pinned`` or
    pageable (staged once more by the CUDA runtime's bounce buffer at the pageable rate).
    """

    spec: StorageSpec
    request_bytes: float
    queue_depth: float
    io: str
    memcpy_Bps: float
    staging_pinned: bool

    def _host_rate_s(self, nbytes: float) -> float:
        return nbytes / self.memcpy_Bps if self.io == "page_cache" else 0.0

    def read_s(self, nbytes: float) -> float:
        """Disk to host memory: the drive's read time, or the page-cache copy if slower."""
        if nbytes <= 0:
            return 0.0
        t = self.spec.read.transfer_s(nbytes, self.request_bytes, self.queue_depth)
        return max(t, self._host_rate_s(nbytes))

    def write_s(self, nbytes: float) -> float:
        """Host memory to disk: the drive's write time, or the page-cache copy if slower."""
        if nbytes <= 0:
            return 0.0
        t = self.spec.write.transfer_s(nbytes, self.request_bytes, self.queue_depth)
        return max(t, self._host_rate_s(nbytes))

    def to_gpu_s(self, nbytes: float, copies: CopyPaths) -> float:
        """Disk to GPU through the host staging buffer (drive, host and PCIe pipelined)."""
        if nbytes <= 0:
            return 0.0
        return max(self.read_s(nbytes), copies.h2d_s(nbytes, self.staging_pinned))
