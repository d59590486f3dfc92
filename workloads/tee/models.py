"""Model shapes used by the TEE workloads: GPT-class LLMs and small DNNs as layer tables.

GPT sizes are the GPT-3 family of Brown et al. 2020 (Table 2.1: parameters, layers,
d_model, context 2048); catalogue models of ``workloads/models/dense.yaml`` are accepted too.
DNN layer tables (TEE+NNA workload) are built from the published architectures:
VGG-16 (Simonyan & Zisserman 2015, CIFAR-10 variant: 32x32 input, 13 conv + 1 FC; and the
ImageNet model, 224x224 input, 13 conv + 3 FC) and
BERT-base (Devlin et al. 2019: 12 layers, hidden 768, FFN 3072, 12 heads).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from hetsim.workloads.models.dense import model_spec


@dataclass(frozen=True)
class LLMShape:
    """What collaborative training needs of an LLM: parameters, layers, hidden size."""

    name: str
    params: float
    layers: int
    hidden: int


GPT3: dict[str, LLMShape] = {
    s.name: s
    for s in (
        LLMShape("gpt3-1.3b", 1.3e9, 24, 2048),
        LLMShape("gpt3-2.7b", 2.7e9, 32, 2560),
        LLMShape("gpt3-6.7b", 6.7e9, 32, 4096),
        LLMShape("gpt3-13b", 13.0e9, 40, 5140),
    )
}


def llm_shape(name: str) -> LLMShape:
    """A GPT-3 size (``gpt3-*``) or a catalogue model; KeyError lists the GPT-3 names."""
    if name in GPT3:
        return GPT3[name]
    try:
        spec = model_spec(name)
    except KeyError:
        raise KeyError(
            f"unknown model {name!r}; GPT sizes: {sorted(GPT3)} or a catalogue model"
        ) from None
    return LLMShape(spec.name, spec.params, spec.layers, spec.hidden)


OpKind = Literal["linear", "bilinear"]


@dataclass(frozen=True)
class LayerTable:
    """Per-op arrays of one DNN, per sample: forward FLOPs, element counts, weights.

    ``linear`` ops (conv, FC, projections) have one private operand and can be masked
    and offloaded; ``bilinear`` ops (attention QK^T and AV) multiply two private
    operands and stay in the TEE. ``nonlinear_elems`` is the elementwise work after
    the op (activation, norm, softmax, pooling).
    """

    name: str
    names: tuple[str, ...]
    kinds: tuple[OpKind, ...]
    fwd_flops: np.ndarray
    in_elems: np.ndarray
    out_elems: np.ndarray
    weight_elems: np.ndarray
    nonlinear_elems: np.ndarray

    def __len__(self) -> int:
        return len(self.names)


_VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


_Row = tuple[str, OpKind, float, float, float, float, float]


def _vgg16_convs(hw: int) -> tuple[list[_Row], int, int]:
    """VGG-16's 13 3x3 same-padding convolutions on hw x hw x 3 inputs (max-pooling
    halves hw): the rows, and the channels and side length after the last pool."""
    rows: list[_Row] = []
    c_in = 3
    for item in _VGG16:
        if item == "M":
            hw //= 2
            continue
        c_out = int(item)
        flops = 2.0 * 9 * c_in * c_out * hw * hw
        rows.append((f"conv{len(rows)}", "linear", flops, c_in * hw * hw, c_out * hw * hw,
                     9 * c_in * c_out, c_out * hw * hw))  # fmt: skip
        c_in = c_out
    return rows, c_in, hw


def vgg16_cifar() -> LayerTable:
    """VGG-16 on 32x32x3 inputs: 3x3 convolutions (same padding) and one 512->10 FC."""
    rows, _c, _hw = _vgg16_convs(32)
    rows.append(("fc", "linear", 2.0 * 512 * 10, 512, 10, 5120, 10))
    return _table("vgg16", rows)


def vgg16_imagenet() -> LayerTable:
    """VGG-16 on 224x224x3 ImageNet inputs (configuration D of Simonyan & Zisserman 2015:
    13 3x3 convolutions, then FC 25088->4096->4096->1000): the model of Slalom's runs
    (ftramer/slalom run_all.sh, ``vgg_16`` with its top layers). ReLU follows every
    convolution and the first two FCs, softmax the last; max-pooling reads the ReLU
    output (counted in the convolution's nonlinear elements)."""
    rows, c_in, hw = _vgg16_convs(224)
    for i, (n_in, n_out) in enumerate(((c_in * hw * hw, 4096), (4096, 4096), (4096, 1000))):
        rows.append((f"fc{i}", "linear", 2.0 * n_in * n_out, n_in, n_out, n_in * n_out, n_out))
    return _table("vgg16-imagenet", rows)


def bert_base(seq: int = 128) -> LayerTable:
    """BERT-base encoder: per layer QKV, scores, context, output projection, FFN1, FFN2."""
    h, f, heads = 768, 3072, 12
    rows: list[tuple[str, OpKind, float, float, float, float, float]] = []
    for i in range(12):
        rows += [
            (f"l{i}.qkv", "linear", 2.0 * seq * h * 3 * h, seq * h, 3 * seq * h, 3 * h * h, 0),
            (f"l{i}.scores", "bilinear", 2.0 * seq * seq * h, 2 * seq * h, heads * seq * seq,
             0, heads * seq * seq),
            (f"l{i}.context", "bilinear", 2.0 * seq * seq * h, heads * seq * seq + seq * h,
             seq * h, 0, 0),
            (f"l{i}.proj", "linear", 2.0 * seq * h * h, seq * h, seq * h, h * h, seq * h),
            (f"l{i}.ffn1", "linear", 2.0 * seq * h * f, seq * h, seq * f, h * f, seq * f),
            (f"l{i}.ffn2", "linear", 2.0 * seq * f * h, seq * f, seq * h, f * h, seq * h),
        ]  # fmt: skip
    return _table("bert-base", rows)


def _table(
    name: str, rows: list[tuple[str, OpKind, float, float, float, float, float]]
) -> LayerTable:
    cols = list(zip(*rows, strict=True))
    arr = [np.asarray(c, dtype=float) for c in cols[2:]]
    return LayerTable(name, tuple(cols[0]), tuple(cols[1]), *arr)


DNNS = {"vgg16": vgg16_cifar, "vgg16-imagenet": vgg16_imagenet, "bert-base": bert_base}


def dnn_table(name: str) -> LayerTable:
    """The layer table of ``vgg16``, ``vgg16-imagenet`` or ``bert-base`` (KeyError lists
    them)."""
    try:
        return DNNS[name]()
    except KeyError:
        raise KeyError(f"unknown DNN {name!r}; known: {sorted(DNNS)}") from None
