"""Transformer model spec for the training domain: parameter count, model states, activations.

Formulas (bytes, 16-bit activations, tensor-parallel degree t, sequence parallelism on):

- parameters per layer: ``4 h^2 + 2 h f`` (QKV + output projection, two MLP matrices; biases
  and norms are left out), plus ``2 v h`` for untied embedding and head;
- model states, mixed-precision Adam: 16 B/param (fp16 params 2 + fp16 grads 2 + fp32
  master, momentum and variance 12), Rajbhandari et al., ZeRO (arXiv 1910.02054) Sec. 3.1;
  calibration rows M01/M02 of ``devices/data/microbenchmarks.csv``;
- stored activations per layer, Korthikanti et al. (arXiv 2205.05198) Sec. 4:
  ``s b h (34 + 5 a s / h)`` with the 19 s b h MLP term generalised to ``3 s b h + 4 s b f``
  (equal to 19 s b h when f = 4h). Flash attention drops the ``5 a s^2 b`` term.
- forward FLOPs per layer: ``8 s b h^2 + 4 s b h f`` (GEMMs) plus attention ``4 s^2 b h``,
  halved for a causal mask; backward = 2x forward (Narayanan et al., SC'21, Appendix).

The MLP is the GPT (GeLU, two matrices) structure; a Llama SwiGLU MLP is approximated by the
same structure with its FFN width (simplification: the gate tensor is not modelled).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from hetsim.simulator.limits import MAX_SEQ_TOKENS

STATE_BYTES_PER_PARAM = 16  # fp16 param 2 + fp16 grad 2 + fp32 master/momentum/variance 12


class TransformerSpec(BaseModel):
    """A GPT/Llama-style dense transformer and its per-iteration shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    layers: PositiveInt = Field(default=32, description="Transformer layers.")
    hidden: PositiveInt = Field(default=4096, description="Hidden size h (a multiple of heads).")
    heads: PositiveInt = Field(default=32, description="Attention heads.")
    ffn: PositiveInt = Field(
        default=16384, description="FFN inner size f (a layer has 4 h^2 + 2 h f parameters)."
    )
    vocab: PositiveInt = Field(
        default=32000,
        description="Vocabulary size (untied embedding and output head: 2 v h parameters).",
    )
    seq_len: int = Field(default=4096, gt=0, le=MAX_SEQ_TOKENS, description="Tokens per sequence.")
    micro_batch: PositiveInt = Field(default=1, description="Sequences per micro-batch.")
    flash_attention: bool = Field(
        default=True, description="fused attention: no s^2 tensors stored"
    )
    causal: bool = Field(default=True, description="causal mask halves attention FLOPs")

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> TransformerSpec:
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")
        return self

    @property
    def params_per_layer(self) -> int:
        """``4 h^2 + 2 h f`` parameters of one layer."""
        h, f = self.hidden, self.ffn
        return 4 * h * h + 2 * h * f

    @property
    def embedding_params(self) -> int:
        """Untied input embedding and output head: ``2 v h``."""
        return 2 * self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All parameters."""
        return self.layers * self.params_per_layer + self.embedding_params

    def state_bytes(self, shards: int = 1) -> int:
        """Mixed-precision Adam model states, 16 B/param, split over ``shards`` devices."""
        return STATE_BYTES_PER_PARAM * self.params // shards


def activation_bytes_per_layer(
    seq: int, batch: int, hidden: int, heads: int, ffn: int, *, flash: bool, tp: int = 1
) -> float:
    """Korthikanti et al. stored activations of one layer (bytes, see module docstring)."""
    sbh = seq * batch * hidden
    linear = 18 * sbh + 4 * seq * batch * ffn  # 34 sbh when ffn = 4h
    attn = 0 if flash else 5 * heads * seq * seq * batch
    return (linear + attn) / tp


def layer_forward_flops(
    seq: int, batch: int, hidden: int, ffn: int, *, causal: bool
) -> tuple[float, float]:
    """(GEMM FLOPs, attention-core FLOPs) of one layer's forward pass."""
    gemm = 8.0 * seq * batch * hidden * hidden + 4.0 * seq * batch * hidden * ffn
    attn = 4.0 * seq * seq * batch * hidden * (0.5 if causal else 1.0)
    return gemm, attn
