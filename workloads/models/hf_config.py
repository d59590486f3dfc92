"""Models from a Hugging Face ``config.json``: dense (Llama, Mistral, Qwen2/Qwen3) and MoE
(Mixtral, Qwen-MoE, DeepSeek-V2/V3, via :func:`hetsim.workloads.models.moe.from_hf_config`).

A dense model's parameter count is counted from the config's shapes: token embedding,
per layer the attention projections (Q and O: ``hidden x heads x head_dim`` each; K and V:
``hidden x kv_heads x head_dim`` each, plus biases where ``attention_bias`` or the Qwen2
family has them), a gated MLP (gate, up, down: ``3 x hidden x intermediate``) and two RMS
norms, a final norm, and the LM head unless ``tie_word_embeddings``. For Llama-2-7B this
gives 6.738e9 against the published 6.74e9.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hetsim.workloads.models.dense import ModelSpec
from hetsim.workloads.models.moe import MoEModel, from_hf_config

#: ``model_type`` values whose attention projections carry biases by default.
_QKV_BIAS_FAMILIES = ("qwen2",)
_MOE_KEYS = ("num_local_experts", "n_routed_experts", "num_experts")


def is_moe_config(config: dict[str, Any]) -> bool:
    """Whether a config.json describes a mixture-of-experts model."""
    return any(config.get(k) for k in _MOE_KEYS)


def dense_from_hf_config(name: str, config: dict[str, Any], source: str = "") -> ModelSpec:
    """A :class:`ModelSpec` from the fields of a dense decoder's ``config.json``."""
    c = config
    try:
        hidden = int(c["hidden_size"])
        layers = int(c["num_hidden_layers"])
        heads = int(c["num_attention_heads"])
        kv_heads = int(c.get("num_key_value_heads") or heads)
        ffn = int(c["intermediate_size"])
        vocab = int(c["vocab_size"])
    except KeyError as e:
        raise KeyError(f"config.json of {name!r} has no field {e.args[0]!r}") from None
    head_dim = int(c.get("head_dim") or hidden // heads)
    if head_dim * heads != hidden:
        raise ValueError(
            f"{name}: head_dim x heads ({head_dim} x {heads}) differs from hidden_size "
            f"({hidden}); hetsim's dense spec assumes they are equal"
        )
    bias = bool(c.get("attention_bias", c.get("model_type") in _QKV_BIAS_FAMILIES))
    attn = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    attn_bias = (heads + 2 * kv_heads) * head_dim if bias else 0
    per_layer = attn + attn_bias + 3 * hidden * ffn + 2 * hidden
    embed = vocab * hidden
    head = 0 if c.get("tie_word_embeddings", False) else vocab * hidden
    params = embed + layers * per_layer + hidden + head
    return ModelSpec(
        name=name,
        display_name=name,
        params=float(params),
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        ffn=ffn,
        vocab=vocab,
        max_context=int(c.get("max_position_embeddings") or 4096),
        source=source or "Hugging Face config.json",
    )


def read_hf_config(path: Path) -> dict[str, Any]:
    """The JSON object of a config.json (ValueError naming the file when it is not one,
    or not a regular file of at most 64 MiB)."""
    from hetsim.simulator.boundary import MAX_FILE_BYTES, data_file_problem

    problem = data_file_problem(path, MAX_FILE_BYTES)
    if problem is not None:
        raise ValueError(f"{path}: {problem}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a JSON config: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config.json must be a JSON object")
    return data


def model_from_hf_config(name: str, path: Path) -> ModelSpec | MoEModel:
    """A dense :class:`ModelSpec` or a :class:`MoEModel`, as the config describes."""
    config = read_hf_config(path)
    source = f"{path.name} ({config.get('model_type', 'unknown model_type')})"
    if is_moe_config(config):
        return from_hf_config(name, config, source=source)
    return dense_from_hf_config(name, config, source=source)
