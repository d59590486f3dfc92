"""MoE model architectures: sizes from published configs, work and bytes by formula.

Specs load from ``workloads/models/moe.yaml`` (each entry names its source) or from the
fields of a Hugging Face ``config.json`` (:func:`from_hf_config`). A scenario names a
shipped model (``model: mixtral-8x7b``) or gives one inline (``model: {name: ..., ...}``
or ``model: {name: ..., hf_config_path: config.json}``).

An expert is three ``hidden x expert_ffn`` matrices (gate, up, down), so its work on
``n`` tokens is ``6 * hidden * expert_ffn * n`` FLOPs and its weights are
``3 * hidden * expert_ffn * bits / 8`` bytes.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

from hetsim.workloads.paths import resolve_path


def _yaml_load(text: str) -> Any:
    """``yaml.safe_load`` with libyaml's parser when present (same objects, ~10x faster)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


class MoEModel(BaseModel):
    """One MoE decoder: layer counts, expert shapes, attention size, routing function."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(description="Model name (the catalogue key).")
    display_name: str = Field(default="", description="Name shown in tables and figures.")
    layers: PositiveInt = Field(description="Decoder layers.")
    dense_layers: NonNegativeInt = Field(
        default=0, description="Leading layers with a dense FFN instead of routed experts."
    )
    hidden: PositiveInt = Field(description="Hidden size.")
    routed_experts: PositiveInt = Field(description="Routed experts per MoE layer.")
    top_k: PositiveInt = Field(description="Experts each token is routed to per MoE layer.")
    expert_ffn: PositiveInt = Field(
        description="FFN inner size of one routed expert (3 x hidden x expert_ffn weights)."
    )
    shared_experts: NonNegativeInt = Field(
        default=0, description="Shared (always active, GPU-resident) experts per MoE layer."
    )
    shared_ffn: NonNegativeInt = Field(
        default=0, description="FFN inner size of one shared expert."
    )
    dense_ffn: NonNegativeInt = Field(default=0, description="FFN inner size of a dense layer.")
    attention_params: PositiveInt = Field(description="Attention weights per layer.")
    kv_bytes_per_token: PositiveInt = Field(
        description="KV-cache bytes per token over all layers (16-bit K and V)."
    )
    vocab: PositiveInt = Field(description="Vocabulary size.")
    router: Literal["softmax", "sigmoid"] = Field(
        default="softmax",
        description="Router scoring function (softmax; sigmoid as DeepSeek-V3's).",
    )
    renormalize: bool = Field(
        default=False, description="The model renormalises its top-k routing weights to sum to 1."
    )
    gate_sensitivity: list[float] | None = Field(
        default=None, description="AdapMoE sensitivity F_l per MoE layer (null: none published)."
    )
    next_layer_accuracy: list[float] | None = Field(
        default=None,
        description="Gate-reuse prediction accuracy of each MoE layer's experts from "
        "the previous layer (null: the routing's default).",
    )
    source: str = Field(default="", description="Where the model's figures come from.")

    @model_validator(mode="after")
    def _consistent(self) -> MoEModel:
        if self.top_k > self.routed_experts:
            raise ValueError(
                f"top_k: {self.top_k} is larger than routed_experts ({self.routed_experts})"
            )
        if self.dense_layers >= self.layers:
            raise ValueError(f"dense_layers: must be < layers ({self.layers})")
        for key in ("gate_sensitivity", "next_layer_accuracy"):
            values = getattr(self, key)
            if values is not None and len(values) != self.moe_layers:
                raise ValueError(f"{key}: needs one value per MoE layer ({self.moe_layers})")
        return self

    @property
    def moe_layers(self) -> int:
        """Layers with routed experts."""
        return self.layers - self.dense_layers

    def expert_params(self) -> int:
        """Weights of one routed expert: 3 x hidden x expert_ffn."""
        return 3 * self.hidden * self.expert_ffn

    def expert_bytes(self, bits: float) -> int:
        """Bytes of one routed expert at ``bits`` bits per weight."""
        return int(self.expert_params() * bits / 8)

    def expert_flops(self, tokens: float) -> float:
        """FLOPs of one expert on ``tokens`` tokens: 2 x 3 x hidden x expert_ffn each."""
        return 2.0 * self.expert_params() * tokens

    def resident_params(self, layer: int) -> int:
        """Weights always on the GPU for one layer: attention, shared experts or dense FFN."""
        ffn = self.dense_ffn if layer < self.dense_layers else self.shared_experts * self.shared_ffn
        return self.attention_params + 3 * self.hidden * ffn


class ModelRef(BaseModel):
    """An inline model in a scenario: full fields, or a Hugging Face config.json path."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(description="Name given to the model built from the config.")
    hf_config_path: str = Field(description="path of a config.json, relative to the scenario")


def from_hf_config(name: str, config: dict[str, Any], source: str = "") -> MoEModel:
    """A :class:`MoEModel` from the fields of a Hugging Face ``config.json``.

    Understands Mixtral (``num_local_experts``), DeepSeek-V2/V3 (``n_routed_experts``,
    ``first_k_dense_replace``, MLA ``kv_lora_rank``) and Qwen-MoE (``num_experts``,
    ``shared_expert_intermediate_size``) field names.
    """
    c = config
    h = int(c["hidden_size"])
    experts = c.get("num_local_experts") or c.get("n_routed_experts") or c.get("num_experts")
    if experts is None:
        raise KeyError("config has no num_local_experts / n_routed_experts / num_experts")
    ffn = int(c.get("moe_intermediate_size") or c["intermediate_size"])
    heads = int(c["num_attention_heads"])
    head_dim = int(c.get("head_dim") or h // heads)
    layers = int(c["num_hidden_layers"])
    shared, shared_ffn = _shared(c, ffn)
    if c.get("kv_lora_rank"):
        attn, kv_per_layer = _mla(c, h, heads)
    else:
        kv_heads = int(c.get("num_key_value_heads") or heads)
        attn = 2 * h * heads * head_dim + 2 * h * kv_heads * head_dim
        kv_per_layer = 2 * kv_heads * head_dim
    return MoEModel(
        name=name,
        display_name=name,
        layers=layers,
        dense_layers=int(c.get("first_k_dense_replace") or 0),
        hidden=h,
        routed_experts=int(experts),
        top_k=int(c["num_experts_per_tok"]),
        expert_ffn=ffn,
        shared_experts=shared,
        shared_ffn=shared_ffn,
        dense_ffn=int(c.get("intermediate_size") or ffn),
        attention_params=attn,
        kv_bytes_per_token=2 * layers * kv_per_layer,
        vocab=int(c["vocab_size"]),
        router="sigmoid" if c.get("scoring_func") == "sigmoid" else "softmax",
        renormalize=bool(c.get("norm_topk_prob", c.get("num_local_experts") is not None)),
        source=source or "Hugging Face config.json",
    )


def _shared(c: dict[str, Any], ffn: int) -> tuple[int, int]:
    if c.get("shared_expert_intermediate_size"):
        return 1, int(c["shared_expert_intermediate_size"])
    n = int(c.get("n_shared_experts") or 0)
    return n, ffn if n else 0


def _mla(c: dict[str, Any], h: int, heads: int) -> tuple[int, int]:
    """Attention weights and cached elements per layer of multi-head latent attention."""
    rope, nope, v = (int(c[k]) for k in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"))
    rank = int(c["kv_lora_rank"])
    q_rank = c.get("q_lora_rank")
    q = h * heads * (rope + nope) if not q_rank else h * q_rank + q_rank * heads * (rope + nope)
    attn = q + h * (rank + rope) + rank * heads * (nope + v) + heads * v * h
    return attn, rank + rope


@cache
def load_moe_models() -> dict[str, MoEModel]:
    """The shipped MoE model catalogue (workloads/models/moe.yaml)."""
    text = resources.files("hetsim.workloads.models").joinpath("moe.yaml").read_text()
    return {n: MoEModel(name=n, **raw) for n, raw in _yaml_load(text).items()}


_USER_MODELS: dict[str, MoEModel] = {}


def add_moe_model(model: MoEModel) -> None:
    """Add a user's MoE model (from a user catalogue); a different model under a name
    already taken is an error."""
    taken = moe_models().get(model.name)
    if taken is not None and taken != model:
        raise ValueError(f"MoE model {model.name!r} is already defined differently")
    _USER_MODELS[model.name] = model


def moe_models() -> dict[str, MoEModel]:
    """Shipped and user MoE models by name."""
    return {**load_moe_models(), **_USER_MODELS}


def resolve_model(ref: str | MoEModel | ModelRef, base_dir: Path) -> MoEModel:
    """The model a scenario names: a shipped name, an inline spec, or a config.json path."""
    if isinstance(ref, MoEModel):
        return ref
    if isinstance(ref, ModelRef):
        path = resolve_path(ref.hf_config_path, base_dir)
        return from_hf_config(ref.name, json.loads(path.read_text()), source=str(path))
    models = moe_models()
    if ref not in models:
        raise KeyError(f"model: unknown MoE model {ref!r}; valid: {', '.join(sorted(models))}")
    return models[ref]
