"""Number formats of weights, activations and KV caches, and what they cost.

A :class:`Precision` fixes, for one model deployment, the format of the weights, of the
activations (the GEMM inputs and outputs) and of the KV cache. From it follow:

* bytes: weights at ``bits / 8`` per element, plus, for group-quantised weight-only integer
  weights (``int4``, ``int8`` with fp16 activations), one fp16 scale and one fp16 zero point per
  ``group_size`` weights (``int4`` with groups of 128: 4 + 32 / 128 = 4.25 bits per weight);
* the tensor-core rate a GEMM runs at (:meth:`Precision.math_dtype`): the lower of the two
  operand formats for W8A8 and FP8 (both operands quantised), the activation format for
  weight-only formats (W4A16, W8A16: weights are dequantised to the activation format in
  the kernel);
* a dequantisation roof for weight-only formats: two FP32 operations per weight element
  on the CUDA cores (scale and zero point), a third roof of the GEMM beside compute and
  memory (:mod:`hetsim.devices.kernels`);
* where the dequantisation happens (:attr:`Precision.weight_dequant`): ``fused`` into the
  GEMM (the roof above: AWQ/GPTQ/Marlin-style W4A16 kernels read the narrow weights
  once), or ``materialize``: a separate kernel first writes the whole weight matrix in the
  activation format, then an ordinary GEMM reads that copy, so each weight costs its
  narrow bytes read + activation-format bytes written + read again (DeepSpeed-Inference's
  int8 path of 2022-23 does this: ``quantized_gemm`` in microsoft/DeepSpeed
  ``csrc/transformer/inference/csrc/pt_binding.cpp`` calls ``launch_dequantize``
  (``dequantize.cu``, one thread per weight, int8 in, fp16 out) into a buffer of the
  weight's shape, then ``cublas_gemm_ex`` on that fp16 buffer).

**8-bit activations are a GEMM input format** (:attr:`Precision.stream_bytes`). With FP8
or INT8 (W8A8) activations, serving engines quantise each GEMM's input and keep the
tensors between kernels (residual stream, norm, rotary and activation outputs, GEMM
outputs, TP all-reduces) in 16 bits. vLLM: ``apply_fp8_linear``
(``vllm/model_executor/layers/quantization/utils/w8a8_utils.py``) runs
``ops.scaled_fp8_quant`` on the 16-bit input, a kernel of its own, then
``cutlass_scaled_mm(..., out_dtype=input.dtype)``, a 16-bit output. TensorRT-LLM: the
plugin option ``norm_quant_fusion`` ("Fuse the LayerNorm and quantization kernels into a
single kernel", ``tensorrt_llm/plugin/plugin.py``) is off by default, so the norm's
16-bit output is quantised by a separate op; the residual stream is in the model's dtype.
The 16-bit copies are priced at 2 bytes per element and, per 8-bit GEMM input, a
quantisation pass (read 2 B, write 1 B per element; ``hetsim.workloads.models
.transformer_cost``).

A device that has no peak for the math format raises :class:`UnsupportedPrecision`
naming the device and the formats it has (``peak_flops`` in ``catalogue.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from hetsim.devices.spec import DeviceSpec

Format = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]

#: Bits per element of each format (fp8 is e4m3 or e5m2, one byte either way).
BITS: dict[str, float] = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}
#: Formats that can hold activations and KV caches (int4 is weight-only here).
ACTIVATION_FORMATS = ("fp32", "bf16", "fp16", "fp8", "int8")
#: Bits of the per-group scale and zero point of group-quantised integer weights.
GROUP_META_BITS = 32
#: FP32 operations per weight element to dequantise a weight-only format.
DEQUANT_OPS_PER_WEIGHT = 2.0
#: Where weight-only weights are dequantised (module doc): inside the GEMM, or into a
#: buffer in the activation format by a kernel of its own before the GEMM.
DequantMode = Literal["fused", "materialize"]
DEQUANT_MODES: tuple[str, ...] = ("fused", "materialize")


class UnsupportedPrecision(ValueError):
    """A format the device cannot run at tensor-core rate (no peak in the catalogue)."""


@dataclass(frozen=True)
class Precision:
    """Formats of one deployment's weights, activations and KV cache."""

    weights: Format = "fp16"
    activations: Format = "fp16"
    kv_cache: Format = "fp16"
    group_size: int = 128
    weight_dequant: DequantMode = "fused"

    def __post_init__(self) -> None:
        for field, value in (("weights", self.weights), ("activations", self.activations),
                             ("kv_cache", self.kv_cache)):  # fmt: skip
            if value not in BITS:
                raise ValueError(f"{field}: unknown format {value!r}; valid: {', '.join(BITS)}")
        for field, value in (("activations", self.activations), ("kv_cache", self.kv_cache)):
            if value not in ACTIVATION_FORMATS:
                raise ValueError(f"{field}: {value} holds weights only")
        if self.group_size <= 0:
            raise ValueError(f"group_size: must be > 0, got {self.group_size}")
        if self.weight_dequant not in DEQUANT_MODES:
            raise ValueError(
                f"weight_dequant: unknown mode {self.weight_dequant!r}; valid: "
                f"{', '.join(DEQUANT_MODES)}"
            )
        if self.weight_dequant == "materialize" and not self.weight_only:
            raise ValueError(
                f"weight_dequant: materialize applies to weight-only formats (weights "
                f"narrower than activations), not {self.weights} weights with "
                f"{self.activations} activations"
            )

    @classmethod
    def uniform(cls, fmt: str, kv_cache: str | None = None, group_size: int = 128) -> Precision:
        """Weights and activations in ``fmt`` (fp8: FP8 GEMMs; int8: W8A8), except int4,
        which is weight-only (W4A16); the KV cache in ``kv_cache`` or the activations'."""
        act = "fp16" if fmt == "int4" else fmt
        return cls(fmt, act, kv_cache or act, group_size)  # type: ignore[arg-type]

    @property
    def weight_only(self) -> bool:
        """Weights narrower than the activations, dequantised inside the GEMM (W4A16,
        W8A16, FP8 weights with fp16 activations)."""
        return BITS[self.weights] < BITS[self.activations]

    @property
    def weight_bits(self) -> float:
        """Bits per weight in memory, group scales and zero points included."""
        bits = BITS[self.weights]
        if self.weights in ("int4", "int8") and self.weight_only:
            bits += GROUP_META_BITS / self.group_size
        return bits

    @property
    def activation_bytes(self) -> float:
        """Bytes per activation element."""
        return BITS[self.activations] / 8

    @property
    def kv_bytes(self) -> float:
        """Bytes per cached K or V element."""
        return BITS[self.kv_cache] / 8

    @property
    def quantised_activations(self) -> bool:
        """8-bit activations (FP8, INT8 W8A8): a GEMM input format, quantised per GEMM
        from the 16-bit tensors kept between kernels (module doc)."""
        return BITS[self.activations] == 8

    @property
    def stream_bytes(self) -> float:
        """Bytes per activation element between kernels (norms, rotary, residual adds,
        the activation function, embedding, GEMM outputs, TP all-reduces): the
        activations' own, or 2 (16-bit) for 8-bit activations (module doc)."""
        return 2.0 if self.quantised_activations else self.activation_bytes

    @property
    def materializes(self) -> bool:
        """Weight-only weights dequantised into a buffer by a kernel of their own."""
        return self.weight_only and self.weight_dequant == "materialize"

    def gemm_precision(self) -> Precision:
        """The formats the GEMM kernel itself reads: these, or with ``materialize`` the
        activations' format for the weights too (the dequantised buffer)."""
        if self.materializes:
            return replace(self, weights=self.activations, weight_dequant="fused")
        return self

    def weight_bytes(self, params: float) -> float:
        """Bytes of ``params`` weights in this format."""
        return params * self.weight_bits / 8

    def math_dtype(self) -> str:
        """The tensor-core format GEMMs run at (the peak_flops key): the activations'
        format for weight-only formats, else the wider of the two operands."""
        if self.weight_only or BITS[self.weights] > BITS[self.activations]:
            return self.activations if self.weight_only else self.weights
        return self.weights

    def check(self, spec: DeviceSpec) -> None:
        """Raise :class:`UnsupportedPrecision` if ``spec`` lacks the math format."""
        dtype = self.math_dtype()
        if dtype not in spec.peak_flops:
            raise UnsupportedPrecision(
                f"device {spec.name} has no {dtype} tensor rate (weights {self.weights}, "
                f"activations {self.activations}); it has {', '.join(sorted(spec.peak_flops))}"
            )
