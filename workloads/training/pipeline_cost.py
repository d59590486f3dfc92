"""Seconds of one pipeline chunk (``k`` layers, one slice of a micro-batch) on one TP rank.

Two pricings (``PipelineParams.cost_model``):

- ``kernel`` (default; issue 15): each layer is the kernels of
  :class:`hetsim.workloads.training.step_cost.MicroBatchCost`, the pricing of the
  ``training-parallel`` kind, on the rank's ``1/tp`` of the heads and FFN columns: norms,
  QKV, rotary, causal flash attention on the slice's queries against its context (the
  slices before it plus its own causal block), output projection, MLP GEMMs, activation,
  residual adds; backward as dgrad + wgrad GEMMs, attention backward and the elementwise
  backward bytes. The kind's model is the GPT structure of
  :class:`hetsim.workloads.training.model.TransformerSpec` (as many K/V heads as query
  heads, a two-matrix MLP of width ``ffn``), so the GEMM FLOPs equal the roofline's. TP
  communication stays out, as everywhere in this kind (its module doc); norms and adds
  run on ``1/tp`` of the tokens (sequence parallel). ``attention_kernel`` picks the
  attention pricing as in ``training-parallel``: the fitted ``attention_prefill`` class
  (default; fitted on chunks of at most 4,096 tokens, so long contexts extrapolate it) or a
  published kernel profile (``fa2``, ``fa3``, ``cudnn``, ``eager``;
  :mod:`hetsim.devices.attention_kernels`). ``gpu_clocks`` sets the compute roofs' clock
  regime as in every domain (:mod:`hetsim.devices.sustained`).
- ``roofline``: the former pricing, one roofline op per chunk at the device's large-GEMM
  efficiency, on the chunk's GEMM plus causal-attention FLOPs and its weight bytes;
  backward twice both.

SlimPipe's workload redistribution (every slice does the mean attention work) gives every
slice, under ``kernel``, the mean of the slices' attention kernel seconds (forward and
backward apart): the moved work is priced at the efficiency of the slices it came from
(reconstruction; the paper's kernels are not published).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

import numpy as np

from hetsim.devices.attention_kernels import AttentionKernel
from hetsim.devices.catalogue import fabric_spec
from hetsim.devices.precision import Precision
from hetsim.devices.roofline import op_times_s
from hetsim.devices.spec import DeviceSpec
from hetsim.devices.sustained import DEFAULT_GPU_CLOCKS, GpuClocks
from hetsim.workloads.training.model import TransformerSpec
from hetsim.workloads.training.parallel_comm import Fabrics, Layout
from hetsim.workloads.training.step_cost import DenseModel, MicroBatchCost, StepKnobs
from hetsim.workloads.training.step_cost import fit_trust as layer_fit_trust
from hetsim.workloads.training.view import PipelineView

CostModel = Literal["kernel", "roofline"]

#: the kernel classes a chunk is priced with (TP/CP/EP traffic is not part of this kind)
KERNEL_KEYS = ("gemm", "attention", "elementwise")
#: fabrics MicroBatchCost needs to be built; only the TP keys use them, and those are
#: left out of a chunk's price
_FABRICS = ("h100-nvswitch", "h100-ib-ndr-multinode")


@dataclass(frozen=True)
class ChunkPrices:
    """Seconds of each slice's forward and backward unit (one chunk of ``k`` layers),
    and the attention part of each (what the SlimPipe exchange may hide behind)."""

    fwd_s: np.ndarray
    bwd_s: np.ndarray
    fwd_attn_s: np.ndarray
    bwd_attn_s: np.ndarray
    #: the first slice's layer pricing (None: the roofline), for :func:`fit_trust`
    cost: MicroBatchCost | None = None


def dense_model(m: TransformerSpec) -> DenseModel:
    """The kind's GPT-structured model as the training kernel pricing sees it."""
    return DenseModel("training-pipeline", m.layers, m.hidden, m.heads, m.heads, m.ffn,
                      m.vocab, gated_mlp=False)  # fmt: skip


def layer_costs(spec: DeviceSpec, m: TransformerSpec, tp: int, dtype: str,
                bounds: np.ndarray, attention_kernel: AttentionKernel = "fitted",
                gpu_clocks: GpuClocks = DEFAULT_GPU_CLOCKS) -> list[MicroBatchCost]:  # fmt: skip
    """One :class:`MicroBatchCost` per slice ``[bounds[j], bounds[j+1])`` of a sequence,
    compute roofs at the clock regime ``gpu_clocks`` (:mod:`hetsim.devices.sustained`)."""
    if not m.causal:
        raise ValueError("workload.model.causal: cost_model kernel prices causal attention "
                         "only; use cost_model: roofline for a non-causal model")  # fmt: skip
    if m.heads % tp:
        raise ValueError(f"workload.tp: {tp} does not divide the model's {m.heads} heads")
    inter = fabric_spec(_FABRICS[1])
    fabrics = Fabrics(fabric_spec(_FABRICS[0]), inter, inter.bandwidth_Bps)
    knobs = StepKnobs(m.micro_batch, m.seq_len, attention_kernel=attention_kernel,
                      gpu_clocks=gpu_clocks)  # fmt: skip
    prec = Precision(dtype, dtype, dtype)  # type: ignore[arg-type]
    model, layout = dense_model(m), Layout(tp=tp)
    costs = [MicroBatchCost(spec, model, layout, fabrics, knobs, prec, float(lo), float(hi))
             for lo, hi in itertools.pairwise(bounds)]  # fmt: skip
    _ = costs[0].attention_profile  # no profile for this device: one clear error now
    return costs


def layer_kernel_s(cost: MicroBatchCost, phase: str) -> float:
    """One layer's ``fwd`` or ``bwd`` seconds over :data:`KERNEL_KEYS`."""
    return sum(cost.layer[f"{phase}_{c}"] for c in KERNEL_KEYS)


def kernel_prices(spec: DeviceSpec, m: TransformerSpec, tp: int, dtype: str,
                  bounds: np.ndarray, k: int, redistribute: bool,
                  attention_kernel: AttentionKernel = "fitted",
                  gpu_clocks: GpuClocks = DEFAULT_GPU_CLOCKS) -> ChunkPrices:  # fmt: skip
    """Chunk seconds from the per-layer kernels (module doc), ``k`` layers per chunk."""
    costs = layer_costs(spec, m, tp, dtype, bounds, attention_kernel, gpu_clocks)
    fwd = np.array([layer_kernel_s(c, "fwd") for c in costs]) * k
    bwd = np.array([layer_kernel_s(c, "bwd") for c in costs]) * k
    fa = np.array([c.layer["fwd_attention"] for c in costs]) * k
    ba = np.array([c.layer["bwd_attention"] for c in costs]) * k
    if redistribute:  # every slice runs the mean attention work
        fwd, bwd = fwd - fa + fa.mean(), bwd - ba + ba.mean()
        fa, ba = np.full_like(fa, fa.mean()), np.full_like(ba, ba.mean())
    return ChunkPrices(fwd, bwd, fa, ba, costs[0])


def roofline_prices(spec: DeviceSpec, view: PipelineView, f_flops: np.ndarray,
                    attn: np.ndarray, k: int, params_per_layer: int, tp: int,
                    dtype: str) -> ChunkPrices:  # fmt: skip
    """The former pricing: one roofline op per unit (module doc)."""
    wbytes = np.full(len(f_flops), 2.0 * k * params_per_layer / tp)
    fwd = op_times_s(spec, f_flops, wbytes, dtype)
    bwd = op_times_s(spec, 2 * f_flops, 2 * wbytes, dtype)
    share = view.causal_attn_flops * attn * k / f_flops
    return ChunkPrices(fwd, bwd, share * fwd, share * bwd)


def fit_trust(cost: MicroBatchCost | None) -> dict[str, str]:
    """Which kernel fits priced the chunks (``model_fits``, ``kernel_classes``,
    ``borrowed_fits``; the columns of ``training-parallel``); ``cost`` None: the roofline."""
    if cost is None:
        return {"model_fits": "roofline", "kernel_classes": "roofline", "borrowed_fits": ""}
    return layer_fit_trust(cost)
