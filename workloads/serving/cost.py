"""Cost of one continuous-batching iteration of an LLM on a TP group, kernel by kernel.

An iteration runs a batch of sequences; sequence ``i`` adds ``q_i`` new positions on top
of ``c_i`` cached context tokens (a prefill chunk: ``q_i`` prompt tokens; a decode step:
``q_i = 1``, or the look-ahead width K under LUD). :class:`IterationCost` prices it with
the shared transformer cost model
(:class:`hetsim.workloads.models.transformer_cost.TransformerCost`): per layer the
norms, QKV/output projections, rotary, prefill and decode attention, MLP (or routed
experts), residual adds and TP all-reduces, per iteration the embedding, LM head and
sampling, each kernel at its class's fitted efficiency on the device
(:mod:`hetsim.devices.kernels`), plus the engine's launch and per-iteration overheads.
Weights, activations and the KV cache each have their format
(:class:`~hetsim.devices.precision.Precision`): fp16/bf16, fp8, int8 or int4
weight-only; memory footprints and KV capacity follow.

Mixture-of-experts models (:class:`workloads.serving.models.MoEServingSpec`, e.g.
Mixtral-8x7B) run the expected distinct experts of the iteration's tokens (uniform
routing); the memory footprint (KV capacity) uses the total parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from hetsim.devices.collectives import AlgorithmFit, CollectiveFabric
from hetsim.devices.precision import Precision
from hetsim.devices.spec import DeviceSpec, LinkSpec
from hetsim.workloads.models.dense import ModelSpec
from hetsim.workloads.models.transformer_cost import (
    Batch,
    EngineOverheads,
    TransformerCost,
    decode_batch,
    prefill_batch,
)


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
    precision: Precision
    fabric: CollectiveFabric | None
    overheads: EngineOverheads = field(default_factory=EngineOverheads)

    @cached_property
    def transformer(self) -> TransformerCost:
        """The kernel-level cost model behind this config."""
        return TransformerCost(
            self.model, self.spec, self.tp, self.precision, self.fabric, self.overheads
        )

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights (all TP ranks together), scales of quantised weights
        included."""
        return int(self.precision.weight_bytes(self.model.params))

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token (all TP ranks together)."""
        return self.model.kv_bytes_per_token(self.precision.kv_cache)

    def step_s(
        self, tokens: int, sampled: int, prefill_tokens: int, prefill_ctx: int,
        cross_units: float, self_units: float, decode_seqs: int, decode_ctx: int,
    ) -> float:  # fmt: skip
        """Seconds of one iteration (see :meth:`TransformerCost.step_s`)."""
        return self.transformer.step_s(
            tokens, sampled, prefill_tokens, prefill_ctx, cross_units, self_units,
            decode_seqs, decode_ctx,
        )  # fmt: skip

    def iteration_s(self, batch: Batch) -> float:
        """Seconds of one iteration of ``batch``."""
        return self.transformer.iteration_s(batch)

    def prefill_s(self, prompt_tokens: int) -> float:
        """One whole prompt alone in an iteration (its TTFT on an idle instance)."""
        return self.transformer.iteration_s(prefill_batch(prompt_tokens))

    def decode_s(self, batch: int, mean_ctx: float) -> float:
        """One decode step of ``batch`` sequences of ``mean_ctx`` cached tokens each."""
        return self.transformer.iteration_s(decode_batch(batch, mean_ctx))

    def kv_capacity_tokens(self, memory_bytes: int, mem_fraction: float) -> int:
        """KV tokens that fit: ``tp * memory * mem_fraction - weights``, over KV bytes.

        ValueError naming the bytes short when the weights alone do not fit."""
        budget = int(self.tp * memory_bytes * mem_fraction) - self.weight_bytes
        if budget <= 0:
            raise ValueError(
                f"model {self.model.name} ({self.weight_bytes} B of {self.precision.weights} "
                f"weights) does not fit on {self.tp} x {self.spec.name} at mem_fraction "
                f"{mem_fraction}: {-budget} bytes short"
            )
        return budget // self.kv_bytes_per_token
