"""Dense transformer model specs and their per-request work (FLOPs, bytes)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from hetsim.simulator import registry


def _yaml_load(text: str) -> Any:
    """``yaml.safe_load`` with libyaml's parser when present (same objects, ~10x faster)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


BYTES_PER_PARAM = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer: sizes from its published config, work by formula."""

    name: str
    display_name: str
    params: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    max_context: int
    source: str
    #: gated MLP (SwiGLU: up, gate, down; Llama, Qwen) or plain (up, GELU/ReLU, down; OPT,
    #: BLOOM): the up projection is ``2 ffn`` wide when gated, ``ffn`` when not
    gated_mlp: bool = True

    @property
    def head_dim(self) -> int:
        """Hidden size per attention head."""
        return self.hidden // self.heads

    def weight_bytes(self, dtype: str = "fp16") -> int:
        """Bytes of all weights at ``dtype``."""
        return int(self.params * BYTES_PER_PARAM[dtype])

    def kv_bytes_per_token(self, dtype: str = "fp16") -> int:
        """KV-cache bytes per token: 2 (K and V) x layers x kv_heads x head_dim x bytes."""
        return int(2 * self.layers * self.kv_heads * self.head_dim * BYTES_PER_PARAM[dtype])

    def prefill_flops(self, tokens: int) -> float:
        """FLOPs of a prefill over ``tokens`` prompt tokens.

        ``2 * params * tokens`` for the weight GEMMs plus causal attention
        ``2 * layers * tokens^2 * hidden`` (QK^T and AV, each 2*s^2*h, halved by the mask).
        """
        return 2.0 * self.params * tokens + 2.0 * self.layers * tokens * tokens * self.hidden

    def prefill_bytes(self, tokens: int, dtype: str = "fp16") -> float:
        """Minimum memory traffic of a prefill: read weights once, write the KV cache."""
        return float(self.weight_bytes(dtype) + tokens * self.kv_bytes_per_token(dtype))


_FIELDS = ("display_name", "params", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab",
           "max_context", "source")  # fmt: skip
_OPTIONAL_FIELDS = ("gated_mlp",)


def parse_model(name: str, raw: dict[str, Any]) -> ModelSpec:
    """A :class:`ModelSpec` from a catalogue entry (KeyError/ValueError name the field)."""
    for key in raw:
        if key not in _FIELDS + _OPTIONAL_FIELDS:
            valid = ", ".join(_FIELDS + _OPTIONAL_FIELDS)
            raise ValueError(f"{key}: unknown field; valid: {valid}")
    for key in _FIELDS:
        if key not in raw:
            raise KeyError(f"{key}: missing required field")
    return ModelSpec(
        name=name,
        display_name=str(raw["display_name"]),
        params=float(raw["params"]),
        layers=int(raw["layers"]),
        hidden=int(raw["hidden"]),
        heads=int(raw["heads"]),
        kv_heads=int(raw["kv_heads"]),
        ffn=int(raw["ffn"]),
        vocab=int(raw["vocab"]),
        max_context=int(raw["max_context"]),
        source=str(raw["source"]),
        gated_mlp=bool(raw.get("gated_mlp", True)),
    )


@cache
def load_models() -> dict[str, ModelSpec]:
    """The shipped dense model catalogue (workloads/models/dense.yaml)."""
    text = resources.files("hetsim.workloads.models").joinpath("dense.yaml").read_text()
    return {name: parse_model(name, raw) for name, raw in _yaml_load(text).items()}


def model_doc(spec: ModelSpec) -> str:
    """One line for ``hetsim list models``."""
    return f"{spec.display_name}: {spec.params / 1e9:.1f}B params, {spec.layers} layers"


def register_models() -> None:
    """Register every shipped model in ``simulator.registry.models`` (idempotent)."""
    for name, spec in load_models().items():
        if not registry.models.registered(name):
            registry.models.add(name, spec, doc=model_doc(spec), params={})


def model_spec(name: str) -> ModelSpec:
    """The model named ``name`` (UnknownName lists the valid ones)."""
    register_models()
    spec: ModelSpec = registry.models.get(name)
    return spec
