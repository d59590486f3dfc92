"""Mixture-of-experts models for the serving workload (Mixtral-8x7B).

A serving MoE spec is a :class:`workloads.models.ModelSpec` (so every dense formula,
the KV cache and the memory footprint apply unchanged) with the routed-expert shape
added. Its architecture comes from the MoE catalogue (``workloads/models/moe.yaml``,
``mistralai/Mixtral-8x7B-v0.1`` config.json fields); the few fields a dense spec needs
and the MoE catalogue does not hold (attention heads, KV heads, context length) are
the same config.json's ``num_attention_heads = 32``, ``num_key_value_heads = 8`` and
``max_position_embeddings = 32768``.

Parameter count, by formula from the config (no quoted total is used):

* routed experts: ``layers x E x 3 x hidden x expert_ffn`` = 32 x 8 x 176,160,768;
* attention: ``layers x attention_params`` (moe_models.yaml), router
  ``layers x hidden x E``, RMSNorm ``(2 layers + 1) x hidden``;
* embeddings and LM head, untied: ``2 x vocab x hidden``.

This gives 46.70e9 total and 12.88e9 active (top-2) parameters, the "46.7B total,
12.9B per token" of Mistral AI's Mixtral announcement (Dec 2023) and Jiang et al.
2024 (arXiv 2401.04088), which the tests check.

Work of one iteration over ``T`` new tokens (used by :mod:`workloads.serving_cost`):

* FLOPs from the ACTIVE parameters: ``2 x active x T`` (each token runs top-k experts);
* weight bytes read: the non-expert weights plus, per MoE layer, the expected number of
  DISTINCT experts the batch's tokens touch, ``E (1 - (1 - k/E)^T)``. Assumption:
  uniform, independent routing (each token's k experts are a uniform k-subset, so an
  expert is missed by one token with probability ``1 - k/E``). Real routers are
  skewed, which touches fewer experts at moderate T; at T = 1 the formula gives k and
  for large T it tends to E (all experts read), the two limits the tests check;
* memory footprint from the TOTAL parameters (every expert stays resident).
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsim.simulator import registry
from hetsim.workloads.models.dense import BYTES_PER_PARAM, ModelSpec
from hetsim.workloads.models.moe import moe_models

# Fields of the config.json a dense spec needs and moe_models.yaml does not hold.
_EXTRA: dict[str, dict[str, int | str]] = {
    "mixtral-8x7b": {
        "heads": 32,
        "kv_heads": 8,
        "max_context": 32768,
        "source": "mistralai/Mixtral-8x7B-v0.1 config.json (via workloads/models/moe.yaml); "
        "Jiang et al. 2024, arXiv 2401.04088",
    }
}


@dataclass(frozen=True)
class MoEServingSpec(ModelSpec):
    """A decoder with routed experts: ``params`` is the TOTAL count (memory); the
    iteration cost uses :attr:`active_params` and :meth:`expert_bytes_read`."""

    routed_experts: int = 1
    top_k: int = 1
    moe_layers: int = 0
    expert_params: float = 0.0  # one routed expert of one layer: 3 x hidden x expert_ffn

    @property
    def active_params(self) -> float:
        """Parameters one token runs through: total minus the (E - k) unused experts."""
        unused = self.routed_experts - self.top_k
        return self.params - self.moe_layers * unused * self.expert_params

    @property
    def non_expert_params(self) -> float:
        """Parameters outside the routed experts (attention, router, norms, embeddings)."""
        return self.params - self.moe_layers * self.routed_experts * self.expert_params

    def expected_experts(self, tokens: float) -> float:
        """Expected distinct experts one MoE layer reads for ``tokens`` tokens under
        uniform independent top-k routing: ``E (1 - (1 - k/E)^T)``."""
        e = self.routed_experts
        return e * (1.0 - (1.0 - self.top_k / e) ** tokens)

    def expert_bytes_read(self, tokens: float, dtype: str = "fp16") -> float:
        """Routed-expert weight bytes one iteration over ``tokens`` tokens reads."""
        per_layer = self.expected_experts(tokens) * self.expert_params
        return self.moe_layers * per_layer * BYTES_PER_PARAM[dtype]

    def prefill_flops(self, tokens: int) -> float:
        """As the dense formula with the active parameters in the GEMM term."""
        return 2.0 * self.active_params * tokens + 2.0 * self.layers * tokens**2 * self.hidden


def mixtral_spec(name: str = "mixtral-8x7b") -> MoEServingSpec:
    """The serving spec of a MoE model of ``workloads/models/moe.yaml`` (see module doc)."""
    m = moe_models()[name]
    extra = _EXTRA[name]
    expert = float(m.expert_params())
    params = (
        m.moe_layers * m.routed_experts * expert
        + m.layers * (m.attention_params + m.hidden * m.routed_experts)
        + (2 * m.layers + 1) * m.hidden
        + 2 * m.vocab * m.hidden
    )
    spec = MoEServingSpec(
        name=name, display_name=m.display_name, params=float(params), layers=m.layers,
        hidden=m.hidden, heads=int(extra["heads"]), kv_heads=int(extra["kv_heads"]),
        ffn=m.expert_ffn, vocab=m.vocab, max_context=int(extra["max_context"]),
        source=str(extra["source"]), routed_experts=m.routed_experts, top_k=m.top_k,
        moe_layers=m.moe_layers, expert_params=expert,
    )  # fmt: skip
    if spec.kv_bytes_per_token("fp16") != m.kv_bytes_per_token:
        raise ValueError(f"{name}: heads/kv_heads disagree with moe_models.yaml's KV bytes")
    return spec


def register_moe_serving_models() -> None:
    """Add the serving MoE specs to ``simulator.registry.models`` (idempotent)."""
    for name in _EXTRA:
        if not registry.models.registered(name):
            spec = mixtral_spec(name)
            doc = (
                f"{spec.display_name}: {spec.params / 1e9:.1f}B params "
                f"({spec.active_params / 1e9:.1f}B active), {spec.layers} layers, MoE"
            )
            registry.models.add(name, spec, doc=doc, params={})


register_moe_serving_models()
