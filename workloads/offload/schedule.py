"""The zig-zag block schedule of one layer over GPU micro-batches (FlexGen).

A block is ``B`` GPU micro-batches. Layer by layer, every micro-batch runs the layer
before the next layer starts, so a layer's weights are copied once per block instead of
once per micro-batch; the micro-batch order reverses from one layer to the next (the
zig-zag), so the last micro-batch of a layer is the first of the next and its
activations stay on the GPU. Three resources run concurrently: the host-to-device copy
engine (FIFO), the GPU, and the CPU (attention over host-resident KV). Per layer ``l``:

1. the copy engine takes the KV of each micro-batch (when attention runs on the GPU over
   host KV) in schedule order, then, with ``overlap``, the weights of layer ``l + 1``;
2. each micro-batch's GPU work starts when the GPU is free, the layer's weights have
   arrived and its KV has arrived; with CPU attention, the GPU runs the projections
   (``pre``), the CPU the attention, and the GPU the rest (``post``) once the CPU is
   done, pipelined across micro-batches;
3. without ``overlap`` the next layer's weights are copied only when this layer ends;
4. with ``host_shared`` (pageable copies issued by the thread that also runs the CPU
   kernels, as in PyTorch eager runtimes) the host-to-device copy and the CPU attention
   are one resource: a pageable copy holds its issuing thread until its data are staged
   (CUDA runtime API, "API synchronization behavior"), so neither starts while the
   other runs.

5. with a disk tier, the disk is one FIFO resource shared by reads and writes: each
   micro-batch's disk-resident KV is read into host memory (in schedule order) before
   its attention (and before its host-to-GPU copy when the GPU attends); the next
   layer's disk-resident weights hold the disk for their disk time while their pipelined
   disk -> host -> GPU copy holds the copy engine; new KV written to disk (by the
   workload, after the layer) queues behind them.

All times are absolute seconds; the function returns the layer's end and the new clock
of each resource, so a step is a fold over its layers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Clocks:
    """Free times of the resources (copy engines, GPU, CPU, disk) and the arrival time of
    the next weights."""

    h2d_s: float = 0.0
    d2h_s: float = 0.0
    gpu_s: float = 0.0
    cpu_s: float = 0.0
    weights_ready_s: float = 0.0
    h2d_busy_s: float = 0.0
    gpu_busy_s: float = 0.0
    cpu_busy_s: float = 0.0
    disk_s: float = 0.0
    disk_busy_s: float = 0.0


@dataclass(frozen=True)
class LayerWork:
    """Seconds of one layer's work per micro-batch and its copies."""

    next_weights_copy_s: float  # weights of the following layer over H2D (0 if resident)
    kv_copy_s: float  # per micro-batch, host KV to GPU (0 with CPU attention / GPU KV)
    gpu_pre_s: (
        float  # per micro-batch: projections before attention (all GPU work if no CPU attention)
    )
    cpu_attention_s: float  # per micro-batch (0 if attention on the GPU)
    gpu_post_s: float  # per micro-batch: after attention (0 if no CPU attention)
    weights_disk_s: float = 0.0  # disk time of the following layer's disk-resident weights
    kv_disk_read_s: float = 0.0  # per micro-batch, disk-resident KV read into host memory
    gpu_flops: float = 0.0  # per micro-batch, FLOPs of gpu_pre_s + gpu_post_s (energy)
    cpu_flops: float = 0.0  # per micro-batch, FLOPs of cpu_attention_s (energy)


def zigzag_order(layer: int, batches: int) -> list[int]:
    """Micro-batch order of ``layer``: ascending on even layers, descending on odd ones."""
    order = list(range(batches))
    return order if layer % 2 == 0 else order[::-1]


def run_layer(
    c: Clocks, layer: int, batches: int, w: LayerWork, start_s: float, overlap: bool,
    trace: list[tuple[str, int, int, float, float]] | None = None,
    host_shared: bool = False,
) -> float:  # fmt: skip
    """Advance ``c`` through one layer starting at ``start_s``; returns the layer's end.

    ``trace`` (optional) collects ``(resource, layer, batch, start, end)`` records;
    ``host_shared``: copies and CPU attention serialise on one host thread (step 4)."""
    order = zigzag_order(layer, batches)
    kv_ready: dict[int, float] = {}
    on_disk: dict[int, float] = {}
    for b in order:
        on_disk[b] = start_s
        if w.kv_disk_read_s > 0:
            s = max(c.disk_s, start_s)
            c.disk_s = s + w.kv_disk_read_s
            c.disk_busy_s += w.kv_disk_read_s
            on_disk[b] = c.disk_s
            if trace is not None:
                trace.append(("disk-kv", layer, b, s, c.disk_s))
    for b in order:
        if w.kv_copy_s > 0:
            s = max(c.h2d_s, start_s, on_disk[b])
            c.h2d_s = s + w.kv_copy_s
            c.h2d_busy_s += w.kv_copy_s
            kv_ready[b] = c.h2d_s
            if trace is not None:
                trace.append(("h2d-kv", layer, b, s, c.h2d_s))
        else:
            kv_ready[b] = on_disk[b]
    next_ready = None
    if overlap and w.next_weights_copy_s > 0:
        s = max(c.h2d_s, start_s, c.cpu_s if host_shared else start_s)
        if w.weights_disk_s > 0:
            s = max(s, c.disk_s)
            c.disk_s = s + w.weights_disk_s
            c.disk_busy_s += w.weights_disk_s
        c.h2d_s = s + w.next_weights_copy_s
        c.h2d_busy_s += w.next_weights_copy_s
        next_ready = c.h2d_s
        if trace is not None:
            trace.append(("h2d-w", layer + 1, -1, s, c.h2d_s))
    gpu = max(c.gpu_s, start_s)
    end = start_s
    cpu_done: dict[int, float] = {}
    for b in order:  # GPU projections (or the whole layer) per micro-batch
        s = max(gpu, c.weights_ready_s, kv_ready[b] if w.cpu_attention_s <= 0 else gpu)
        gpu = s + w.gpu_pre_s
        c.gpu_busy_s += w.gpu_pre_s
        if trace is not None:
            trace.append(("gpu", layer, b, s, gpu))
        if w.cpu_attention_s > 0:
            cs = max(c.cpu_s, gpu, c.h2d_s if host_shared else gpu, on_disk[b])
            c.cpu_s = cs + w.cpu_attention_s
            c.cpu_busy_s += w.cpu_attention_s
            cpu_done[b] = c.cpu_s
            if trace is not None:
                trace.append(("cpu", layer, b, cs, c.cpu_s))
        end = gpu
    if w.cpu_attention_s > 0 or w.gpu_post_s > 0:
        for b in order:
            s = max(gpu, cpu_done.get(b, gpu))
            gpu = s + w.gpu_post_s
            c.gpu_busy_s += w.gpu_post_s
            if trace is not None:
                trace.append(("gpu-post", layer, b, s, gpu))
        end = gpu
    c.gpu_s = gpu
    if next_ready is not None:
        c.weights_ready_s = next_ready
    elif w.next_weights_copy_s > 0:  # no overlap: copy after the layer
        s = max(c.h2d_s, end, c.cpu_s if host_shared else end)
        if w.weights_disk_s > 0:
            s = max(s, c.disk_s)
            c.disk_s = s + w.weights_disk_s
            c.disk_busy_s += w.weights_disk_s
        c.h2d_s = s + w.next_weights_copy_s
        c.h2d_busy_s += w.next_weights_copy_s
        c.weights_ready_s = c.h2d_s
        if trace is not None:
            trace.append(("h2d-w", layer + 1, -1, s, c.h2d_s))
    return end
