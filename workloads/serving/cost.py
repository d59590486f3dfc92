"""Roofline cost of one continuous-batching iteration of a dense LLM on a TP group.

An iteration runs a batch of sequences; sequence ``i`` adds ``q_i`` new positions on top
of ``c_i`` cached context tokens (a prefill chunk: ``q_i`` prompt tokens; a decode step:
``q_i = 1``, or the look-ahead width K under LUD). With ``T = sum q_i`` new tokens:

* FLOPs ``= 2 * params * T + 4 * layers * hidden * sum q_i * (c_i + q_i / 2)``: the weight
  GEMMs plus causal attention (QK^T and AV over ``c_i`` cached keys and, on average,
  half of the ``q_i`` new ones). With ``c = 0`` this is ``ModelSpec.prefill_flops``.
* bytes ``= weights + kv_bytes_per_token * (sum c_i + T)``: weights read once, cached KV
  read, new KV written (``ModelSpec.prefill_bytes`` for one prefill).
* Tensor parallelism over ``t`` GPUs splits both evenly (weights and KV heads sharded);
  each GPU's time is the device roofline ``devices.roofline.op_time_s(flops/t, bytes/t)``
  and every layer adds two all-reduces of ``T * hidden * dtype`` bytes
  (Megatron-style TP: after attention and after the MLP) priced by
  :func:`devices.collectives.collective_time_s` on the TP fabric.

The whole iteration is one roofline op (lumped, as BLIS and DistServe's roofline mode do):
prefill-heavy iterations come out compute-bound and decode iterations memory-bound.

Mixture-of-experts models (:class:`workloads.serving_models.MoEServingSpec`, e.g.
Mixtral-8x7B): ``params`` in the FLOPs is the ACTIVE count (top-k experts), and the
weight bytes are the non-expert weights plus the expected distinct experts the
iteration's ``T`` tokens touch, ``moe_layers x E (1 - (1 - k/E)^T) x expert bytes``
(uniform routing; see that module). Experts are sharded over the TP ranks like dense
weights (Megatron-style TP inside each expert), so both terms divide by ``t``. The
memory footprint (KV capacity) uses the total parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from hetsim.devices.collectives import AlgorithmFit, CollectiveFabric, collective_time_s
from hetsim.devices.roofline import op_time_s
from hetsim.devices.spec import DeviceSpec, LinkSpec
from hetsim.workloads.models.dense import BYTES_PER_PARAM, ModelSpec
from hetsim.workloads.serving.models import MoEServingSpec


def pcie_fabric(link: LinkSpec) -> CollectiveFabric:
    """A ring over PCIe for GPUs without NVLink (L4, L40S): the link's bandwidth,
    latency and efficiency as the ring's bus bandwidth, alpha and curve (a derivation,
    not a fit: no PCIe all-reduce measurement is in the calibration data)."""
    fit = AlgorithmFit(alpha_s=link.latency_s, efficiency=link.efficiency, basis="pcie link")
    return CollectiveFabric(
        name=f"{link.name}-ring",
        display_name=f"ring over {link.display_name}",
        bandwidth_Bps=link.bandwidth_Bps,
        algorithms={"ring": fit},
    )


@dataclass(frozen=True)
class IterationCost:
    """Prices iterations of ``model`` on ``tp`` GPUs of type ``spec`` (see module doc)."""

    model: ModelSpec
    spec: DeviceSpec
    tp: int
    dtype: str
    fabric: CollectiveFabric | None

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights (all TP ranks together)."""
        return self.model.weight_bytes(self.dtype)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token (all TP ranks together)."""
        return self.model.kv_bytes_per_token(self.dtype)

    @cached_property
    def _terms(self) -> tuple[float, float, int, int, bool]:
        """Constants of :meth:`time_s` (hot path): FLOPs per new token, FLOPs per
        attention unit, weight bytes read by every iteration (MoE: non-expert only),
        KV bytes per token, whether TP communicates."""
        m = self.model
        per_token, weights = 2.0 * m.params, self.weight_bytes
        if isinstance(m, MoEServingSpec):
            per_token = 2.0 * m.active_params
            weights = int(m.non_expert_params * BYTES_PER_PARAM[self.dtype])
        return (
            per_token, 4.0 * m.layers * m.hidden, weights,
            self.kv_bytes_per_token, self.tp > 1 and self.fabric is not None,
        )  # fmt: skip

    def weight_bytes_read(self, new_tokens: int) -> float:
        """Weight bytes one iteration over ``new_tokens`` tokens reads (all ranks):
        every weight for a dense model; non-expert weights plus the expected distinct
        experts for a MoE model."""
        weights = float(self._terms[2])
        if isinstance(self.model, MoEServingSpec):
            weights += self.model.expert_bytes_read(new_tokens, self.dtype)
        return weights

    def time_s(self, new_tokens: int, ctx_tokens: int, attn_units: float) -> float:
        """Seconds of one iteration: ``new_tokens = T``, ``ctx_tokens = sum c_i``,
        ``attn_units = sum q_i * (c_i + q_i / 2)``; 0 for an empty batch."""
        if new_tokens <= 0:
            return 0.0
        per_token, per_attn, weights, kv, comm = self._terms
        flops = per_token * new_tokens + per_attn * attn_units
        if self._moe:
            nbytes = self.weight_bytes_read(new_tokens) + kv * (ctx_tokens + new_tokens)
        else:
            nbytes = weights + kv * (ctx_tokens + new_tokens)
        t = op_time_s(self.spec, flops / self.tp, nbytes / self.tp, self.dtype)
        return t + self.allreduce_s(new_tokens) if comm else t

    @cached_property
    def _moe(self) -> bool:
        return isinstance(self.model, MoEServingSpec)

    def allreduce_s(self, new_tokens: int) -> float:
        """TP communication of one iteration: 2 all-reduces per layer of T x hidden."""
        if self.tp == 1 or self.fabric is None:
            return 0.0
        msg = int(new_tokens * self.model.hidden * BYTES_PER_PARAM[self.dtype])
        return 2 * self.model.layers * collective_time_s("all_reduce", self.tp, msg, self.fabric)

    def prefill_s(self, prompt_tokens: int) -> float:
        """One whole prompt alone in an iteration (its TTFT on an idle instance)."""
        s = prompt_tokens
        return self.time_s(s, 0, s * s / 2.0)

    def decode_s(self, batch: int, mean_ctx: float) -> float:
        """One decode step of ``batch`` sequences of ``mean_ctx`` cached tokens each."""
        ctx = batch * mean_ctx
        return self.time_s(batch, int(ctx), ctx + batch / 2.0)

    def kv_capacity_tokens(self, memory_bytes: int, mem_fraction: float) -> int:
        """KV tokens that fit: ``tp * memory * mem_fraction - weights``, over KV bytes.

        ValueError naming the bytes short when the weights alone do not fit."""
        budget = int(self.tp * memory_bytes * mem_fraction) - self.weight_bytes
        if budget <= 0:
            raise ValueError(
                f"model {self.model.name} ({self.weight_bytes} B of {self.dtype} weights) "
                f"does not fit on {self.tp} x {self.spec.name} at mem_fraction "
                f"{mem_fraction}: {-budget} bytes short"
            )
        return budget // self.kv_bytes_per_token
