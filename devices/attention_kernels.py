"""Attention kernels by implementation: efficiencies from published kernel microbenchmarks.

The ``attention_prefill`` kernel class of :mod:`hetsim.devices.kernels` is fitted on
Vidur's A100 serving profiles, and the Hopper devices borrow that fit. Which attention
kernel a framework runs (FlashAttention-2, FlashAttention-3, cuDNN's fused attention, or
unfused "eager" attention) changes its speed on Hopper by up to ~1.8x at the same shape.
This module prices attention by the kernel a run names (``attention_kernel``), from the
published kernel benchmarks in ``devices/attention_kernels.yaml`` (each with its paper,
figure, GPU, head dim and sequence lengths).

**Efficiency.** A published point is ``TFLOP/s / peak`` of the measured device (its
catalogue BF16 peak), FLOPs counted the papers' way (causal forward
``2 s^2 d h b``; backward 2.5x the forward). Between the measured sequence lengths the
efficiency is interpolated linearly in ``log2(seq_len)``; outside them it is held at the
end value (:func:`KernelProfile.efficiency` reports when a length is outside). A device
without a profile of its own uses the profile of the device its kernel fits borrow
(``kernels.yaml`` ``borrow:``), at its own peak, and says so.

**The length.** The benchmarks vary the sequence length with the batch x length fixed at
16k tokens, so every point has ample thread blocks; the efficiency is a function of the
key length each query tile runs over (the tile loop's length and the share of masked
diagonal tiles). A training kernel is looked up at its own key length: the sequence for a
whole-sequence kernel, ``s / cp`` for a ring-attention step, the slice's end for a slice.

**Causal backward.** Where a profile has a measured causal backward panel
(``backward_causal``: the A100 FlashAttention-2 profile, FlashAttention-2 paper Fig. 6(d))
it is used as published. Otherwise (named assumption; the H100 profiles, whose published
backward panel is non-causal) the causal backward efficiency is the non-causal panel's
value times the forward's causal / non-causal ratio at the same length
(:data:`CAUSAL_BACKWARD`): the masked tiles cost the backward what they cost the forward.
On A100 FA2 the assumption would give 196 x 197 / 223 = 173 TFLOP/s at 16k against the
measured 186 (7% slow).

**Profiles.** ``h100-sxm``: FA2, cuDNN, FA3 and eager from the FlashAttention-3 paper;
``a100-80gb``: FA2 only, from the FlashAttention-2 paper (no A100 eager, FA3 or cuDNN
profile; ``a100-40gb`` borrows it, same silicon and peak).

**Head dim.** Only head dim 128 is transcribed; other head dims use it (reported by
:attr:`KernelProfile.head_dim`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml

from hetsim.devices.catalogue import device_spec
from hetsim.devices.kernels import kernel_table
from hetsim.devices.spec import DeviceSpec

ATTENTION_KERNELS_FILE = Path(__file__).resolve().parent / "attention_kernels.yaml"
#: ``fitted``: the ``attention_prefill`` class fit of ``kernels.yaml`` (the default);
#: the others: a published kernel profile.
AttentionKernel = Literal["fitted", "fa2", "fa3", "cudnn", "eager"]
ATTENTION_KERNELS: tuple[str, ...] = ("fitted", "fa2", "fa3", "cudnn", "eager")
#: How the causal backward efficiency is derived from the non-causal backward panel
#: (module doc): scaled by the forward's causal / non-causal ratio at the same length.
CAUSAL_BACKWARD = "scaled by the forward's causal/non-causal ratio"
#: FLOPs of a backward pass over its forward (five matmuls to two), the papers' count.
BACKWARD_FLOPS_RATIO = 2.5


@dataclass(frozen=True)
class KernelProfile:
    """Efficiencies (fractions of the measured device's peak) of one attention kernel on
    one device, per measured sequence length, forward and backward, causal."""

    device: str
    kernel: str
    head_dim: int
    seq_lens: tuple[int, ...]
    forward: tuple[float, ...]
    backward: tuple[float, ...]
    source: str

    def efficiency(self, direction: Literal["forward", "backward"], seq_len: float) -> float:
        """Causal efficiency at key length ``seq_len`` (module doc: interpolated in
        ``log2``, held at the ends)."""
        eff = self.forward if direction == "forward" else self.backward
        x = math.log2(max(float(seq_len), 1.0))
        xs = [math.log2(s) for s in self.seq_lens]
        return float(np.interp(x, xs, eff))

    def in_range(self, seq_len: float) -> bool:
        """Whether ``seq_len`` lies within the measured lengths."""
        return self.seq_lens[0] <= seq_len <= self.seq_lens[-1]


@dataclass(frozen=True)
class KernelProfileRef:
    """The profile a device uses and whether it was measured on that device."""

    profile: KernelProfile
    borrowed: bool


def _fill(values: list[Any], where: str) -> list[float]:
    """Hold the last measured value over trailing gaps (out of memory)."""
    out: list[float] = []
    for i, v in enumerate(values):
        if v is None:
            if not out:
                raise ValueError(f"attention_kernels.yaml: {where}[{i}] has no value before it")
            out.append(out[-1])
        else:
            out.append(float(v))
    return out


@functools.cache
def _raw() -> dict[str, Any]:
    raw = yaml.safe_load(ATTENTION_KERNELS_FILE.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or "kernels" not in raw or "seq_lens" not in raw:
        raise ValueError("attention_kernels.yaml: needs seq_lens and kernels")
    return raw


@functools.cache
def _profile(device: str, kernel: str, peak_flops: float) -> KernelProfile:
    raw = _raw()
    lens = tuple(int(s) for s in raw["seq_lens"])
    entry = raw["kernels"][device]
    k = entry[kernel]
    where = f"kernels.{device}.{kernel}"
    fc, fn, bn = (
        _fill(list(k[key]), f"{where}.{key}")
        for key in ("forward_causal", "forward_noncausal", "backward_noncausal")
    )
    for key, vals in (("forward_causal", fc), ("forward_noncausal", fn),
                      ("backward_noncausal", bn)):  # fmt: skip
        if len(vals) != len(lens):
            raise ValueError(f"attention_kernels.yaml: {where}.{key}: {len(vals)} values "
                             f"for {len(lens)} seq_lens")  # fmt: skip
    fwd = tuple(v * 1e12 / peak_flops for v in fc)
    if "backward_causal" in k:  # a measured causal backward panel: used as published
        bc = _fill(list(k["backward_causal"]), f"{where}.backward_causal")
        if len(bc) != len(lens):
            raise ValueError(f"attention_kernels.yaml: {where}.backward_causal: {len(bc)} "
                             f"values for {len(lens)} seq_lens")  # fmt: skip
        bwd = tuple(v * 1e12 / peak_flops for v in bc)
    else:
        bwd = tuple(b * (c / n) * 1e12 / peak_flops for b, c, n in zip(bn, fc, fn, strict=True))
    return KernelProfile(device, kernel, int(entry["head_dim"]), lens, fwd, bwd,
                         str(entry.get("source", "")))  # fmt: skip


def kernel_profile(spec: DeviceSpec, kernel: str, measured_peak_flops: float | None = None
                   ) -> KernelProfileRef:  # fmt: skip
    """The published profile of ``kernel`` for ``spec``: its own, or that of the device its
    kernel fits borrow (``kernels.yaml``). ``measured_peak_flops`` is the BF16 peak of the
    measured device (looked up in the catalogue when not given). ValueError naming the
    file and the kernels available when there is none."""
    if kernel not in ATTENTION_KERNELS or kernel == "fitted":
        raise ValueError(f"attention_kernel: {kernel!r} has no profile; "
                         f"valid: {', '.join(ATTENTION_KERNELS)}")  # fmt: skip
    table = _raw()["kernels"]
    device = spec.name
    if device in (_raw().get("unsupported") or {}).get(kernel, []):
        raise ValueError(f"attention_kernel: {kernel!r} does not run on {device} "
                         f"(devices/attention_kernels.yaml unsupported:); use another "
                         f"kernel or attention_kernel: fitted")  # fmt: skip
    borrowed = False
    if device not in table:
        lender = kernel_table()[1].get(device)
        if lender is None or lender not in table:
            raise ValueError(
                f"attention_kernel: {kernel!r}: devices/attention_kernels.yaml has no "
                f"published {kernel} benchmark for {device} (nor for the device its kernel "
                f"fits borrow); devices with profiles: {', '.join(sorted(table))}; use "
                f"attention_kernel: fitted"
            )
        device, borrowed = lender, True
    if kernel not in table[device]:
        have = sorted(k for k in table[device] if isinstance(table[device][k], dict))
        raise ValueError(f"attention_kernel: {kernel!r}: no profile for {device} in "
                         f"devices/attention_kernels.yaml; it has {', '.join(have)}")  # fmt: skip
    if measured_peak_flops is None:
        measured_peak_flops = device_spec(device).peak("bf16")
    return KernelProfileRef(_profile(device, kernel, float(measured_peak_flops)), borrowed)


def attention_kernel_time_s(spec: DeviceSpec, profile: KernelProfile,
                            direction: Literal["forward", "backward"], flops: float,
                            seq_len: float) -> float:  # fmt: skip
    """GPU seconds of a causal attention kernel doing ``flops`` (the papers' count: the
    causal half; backward 2.5x the forward) at key length ``seq_len``, at ``spec``'s BF16
    peak times the profile's efficiency."""
    if flops <= 0:
        return 0.0
    return flops / (spec.peak("bf16") * profile.efficiency(direction, seq_len))
