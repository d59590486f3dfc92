"""8-bit activations are a GEMM input format (devices/precision.py, transformer_cost's
"8-bit activations"): elementwise kernels, GEMM outputs and TP all-reduces move 16-bit
tensors, each weight GEMM's input gets a quantisation pass, and attention runs in FP8 only
where the engine does. Numbers worked from the kernel functions' own definitions."""

from __future__ import annotations

import numpy as np
import pytest

from hetsim.devices.catalogue import device_spec, fabric_spec
from hetsim.devices.kernels import LaunchModel, elementwise_time_s, gemm_time_s, kernel_fits
from hetsim.devices.precision import Precision
from hetsim.workloads.models.dense import model_spec
from hetsim.workloads.models.transformer_cost import (
    Batch,
    EngineOverheads,
    TransformerCost,
    prefill_batch,
)
from hetsim.workloads.serving.params import ServingParams

H100 = device_spec("h100-sxm")
LLAMA = model_spec("llama-3-8b")
FP8 = Precision("fp8", "fp8", "fp8")
FP8_BF16_KV = Precision("fp8", "fp8", "bf16")
BF16 = Precision("bf16", "bf16", "bf16")


def _cost(p: Precision, tp: int = 1, **overheads: object) -> TransformerCost:
    fabric = fabric_spec("h100-nvswitch") if tp > 1 else None
    return TransformerCost(LLAMA, H100, tp, p, fabric, EngineOverheads(**overheads))  # type: ignore[arg-type]


def test_elementwise_and_allreduce_move_16_bit_tensors_plus_one_quant_pass_per_gemm() -> None:
    t, m = 2048.0, LLAMA
    fp8, bf16 = _cost(FP8, tp=2), _cost(BF16, tp=2)
    f8, b16 = fp8.breakdown(prefill_batch(2048)), bf16.breakdown(prefill_batch(2048))
    # the TP all-reduces carry the 16-bit GEMM outputs: the same bytes as under bf16
    assert f8["collective"] == pytest.approx(b16["collective"], rel=1e-12)
    # each quantisation pass reads 2 B and writes 1 B per element of its GEMM's input
    ew = kernel_fits(H100).fits.elementwise

    def quant(k: float) -> float:
        return float(elementwise_time_s(H100, ew, 3.0 * t * k, "add"))

    # attention side: bf16's norms, rotary and adds (same 2 B per element) + the QKV and
    # output-projection inputs' passes
    attn_side = m.layers * (quant(m.hidden) + quant(m.heads * m.head_dim / 2))
    assert f8["elementwise"] - b16["elementwise"] == pytest.approx(attn_side, rel=1e-9)
    # MLP: FP8 GEMMs + bf16's activation kernel (same bytes) + the up and down passes
    tt = np.array([t])
    up_n = 2 * m.ffn / 2
    gemms = fp8._gemm(tt, up_n, m.hidden) + fp8._gemm(tt, m.hidden, m.ffn / 2)
    act = bf16._ew((up_n + m.ffn / 2) * t * 2.0, "activation")
    mlp = float((fp8._mlp_s(tt, m.ffn) - gemms - act)[0])
    assert mlp == pytest.approx(quant(m.hidden) + quant(m.ffn / 2), rel=1e-9)


def test_fp8_gemm_writes_a_16_bit_output() -> None:
    g = kernel_fits(H100).fits.gemm
    # default: the output in the activations' format (every other domain, unchanged)
    assert gemm_time_s(H100, g, 1, 4096, 4096, FP8) == gemm_time_s(H100, g, 1, 4096, 4096, FP8, 1.0)
    # a wide, memory-bound output: 2 B per element costs more than 1 B
    wide = (64.0, 128256.0, 4096.0)
    assert gemm_time_s(H100, g, *wide, FP8, 2.0) > gemm_time_s(H100, g, *wide, FP8)
    fp8 = _cost(FP8)
    assert float(fp8._gemm(*wide)) == float(gemm_time_s(H100, g, *wide, FP8, 2.0))


def test_attention_is_16_bit_unless_the_engine_runs_it_in_fp8() -> None:
    b = prefill_batch(4096)
    sixteen = _cost(Precision("bf16", "fp16", "bf16")).attention_s(b)[0]
    fp8_attn = _cost(FP8).attention_s(b)[0]
    # FP8 activations with a 16-bit KV cache: TensorRT-LLM turns FP8 context FMHA off
    assert not _cost(FP8_BF16_KV).attention_fp8
    assert _cost(FP8_BF16_KV).attention_s(b)[0] == pytest.approx(sixteen, rel=1e-12)
    # with an FP8 KV cache it is on by default, and the engine switch decides either way
    assert _cost(FP8).attention_fp8 and fp8_attn < 0.8 * sixteen
    assert _cost(FP8, fp8_attention=False).attention_s(b)[0] > fp8_attn
    assert _cost(FP8_BF16_KV, fp8_attention=True).attention_fp8
    # decode attention reads the KV in the cache's format and a 16-bit query
    d = Batch(tokens=8, sampled=8, decode_seqs=8, decode_ctx=8 * 4000)
    fp8_kv_16_q = _cost(FP8, fp8_attention=False).attention_s(d)[1]
    assert fp8_kv_16_q < _cost(Precision("bf16", "fp16", "bf16")).attention_s(d)[1]


def test_hot_path_takes_the_attention_format_and_eager_mode_launches_the_quant_kernels() -> None:
    b = Batch(tokens=1100, sampled=9, prefill_tokens=1092, prefill_ctx=300,
              cross_units=1092 * 300.0, self_units=1092.0**2, decode_seqs=8,
              decode_ctx=8 * 2000)  # fmt: skip
    for p, flag in ((FP8, None), (FP8, False), (FP8_BF16_KV, None)):
        tc = _cost(p, fp8_attention=flag)
        args = (b.tokens, b.sampled, b.prefill_tokens, b.prefill_ctx, b.cross_units,
                b.self_units, b.decode_seqs, b.decode_ctx)  # fmt: skip
        assert tc.step_s(*args) == pytest.approx(tc.iteration_s(b), rel=1e-12)
    eager = LaunchModel(cpu_launch_s=5e-6, cuda_graphs=False)
    extra = _cost(FP8, launch=eager)._launch_floor_s - _cost(BF16, launch=eager)._launch_floor_s
    assert extra == pytest.approx(4 * LLAMA.layers * 5e-6, rel=1e-12)
    # 16-bit deployments are untouched by all of this
    assert float(np.asarray(_cost(BF16)._quant(4096.0, 4096.0))) == 0.0


def test_fp8_attention_needs_fp8_activations() -> None:
    with pytest.raises(ValueError, match="fp8_attention"):
        ServingParams.model_validate({"dtype": "bf16", "fp8_attention": True})
    p = ServingParams.model_validate({"dtype": "fp8", "fp8_attention": False})
    assert p.overheads().fp8_attention is False
