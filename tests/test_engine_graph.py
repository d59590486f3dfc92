"""An engine's kernel graph in the transformer cost (EngineOverheads.split_projections,
extra_kernels_per_layer, gemv_memory), worked out by hand from the kernel functions."""

from __future__ import annotations

import numpy as np
import pytest

from hetsim.devices.catalogue import device_spec
from hetsim.devices.kernels import LaunchModel, elementwise_time_s, gemm_time_s, kernel_fits
from hetsim.devices.precision import Precision
from hetsim.workloads.models.dense import model_spec
from hetsim.workloads.models.transformer_cost import (
    EngineOverheads,
    TransformerCost,
    decode_batch,
)

SPEC = device_spec("rtx-3090-ti")
MODEL = model_spec("llama-2-7b")  # 32 layers, hidden 4096, FFN 11008, 32 heads of 128
W4A8 = Precision("int4", "int8", "fp16", 32)  # llama.cpp's Q4_0 x q8_1 GEMVs


def _cost(**kw: object) -> TransformerCost:
    launch = LaunchModel(cpu_launch_s=4.9e-6, cuda_graphs=False)
    return TransformerCost(MODEL, SPEC, 1, W4A8, None, EngineOverheads(launch, **kw))  # type: ignore[arg-type]


def test_split_projections_price_q_k_v_and_gate_up_apart() -> None:
    b = decode_batch(1, 64)
    fused, split = _cost().breakdown(b), _cost(split_projections=True).breakdown(b)
    g = kernel_fits(SPEC).fits.gemm
    h, f = 4096, 11008

    def gemv(n: int, k: int) -> float:
        return float(gemm_time_s(SPEC, g, 1, n, k, W4A8, 2.0))

    per_layer = 3 * gemv(h, h) - gemv(3 * h, h) + 2 * gemv(f, h) - gemv(2 * f, h)
    assert per_layer > 0  # smaller GEMVs reach less of the bandwidth, and pay more floors
    # one more quantisation pass (read 2 B, write 1 B per element) of the MLP input, which
    # the cost counts with the MLP (the gemm class), two of the QKV input (elementwise)
    e = kernel_fits(SPEC).fits.elementwise
    quant = float(elementwise_time_s(SPEC, e, h * (2.0 + 1.0), "add"))
    assert np.isclose(split["gemm"] - fused["gemm"], 32 * (per_layer + quant), rtol=1e-9)
    assert np.isclose(split["elementwise"] - fused["elementwise"], 32 * 2 * quant, rtol=1e-9)


def test_extra_kernels_cost_the_elementwise_floor_each() -> None:
    b = decode_batch(1, 64)
    base, more = _cost().breakdown(b), _cost(extra_kernels_per_layer=9).breakdown(b)
    floor = kernel_fits(SPEC).fits.elementwise.floor_s
    assert np.isclose(more["elementwise"] - base["elementwise"], 32 * 9 * floor, rtol=1e-9)
    assert more["gemm"] == base["gemm"]


def test_the_launch_floor_counts_the_engines_kernels() -> None:
    """Eager launches of llama.cpp's early-2024 graph: 13 + 3 split GEMMs + 9 others per
    layer, a q8_1 quantisation per GEMV (7 per layer), 4 per iteration: 1,028 x 4.9 us."""
    cost = _cost(split_projections=True, extra_kernels_per_layer=9)
    assert np.isclose(cost._launch_floor_s, ((13 + 3 + 9) * 32 + 4 + 7 * 32) * 4.9e-6)
    assert np.isclose(_cost()._launch_floor_s, (13 * 32 + 4 + 4 * 32) * 4.9e-6)


def test_a_negative_kernel_count_is_an_error() -> None:
    with pytest.raises(ValueError, match="extra_kernels_per_layer: must be >= 0"):
        EngineOverheads(extra_kernels_per_layer=-1)


def test_gemv_memory_lender_restores_the_a100_curve() -> None:
    """The RTX 4090 decode step with ``gemv_memory: lender`` is the one priced with the
    A100's GEMM memory curve moved by time, and its fit names no GEMV fit."""
    spec = device_spec("rtx-4090")
    int4 = Precision("int4", "fp16", "fp16", 128)
    b = decode_batch(1, 256)
    shipped = TransformerCost(MODEL, spec, 1, int4)
    lender = TransformerCost(MODEL, spec, 1, int4, overheads=EngineOverheads(gemv_memory="lender"))
    assert lender.fits.gemv_memory_on == "" and shipped.fits.gemv_memory_on == "ga102-gddr6x"
    a100 = kernel_fits(device_spec("a100-80gb")).fits.gemm.memory
    got = lender.fits.fits.gemm.memory
    assert got.max_eff == a100.max_eff and np.isclose(got.half_size, a100.half_size * 1008 / 2039)
    # the GA102 curve reaches more of the bandwidth on every llama-2-7b GEMV
    assert shipped.iteration_s(b) < 0.92 * lender.iteration_s(b)
    with pytest.raises(ValueError, match="gemv_memory: 'a10'"):
        kernel_fits(spec, gemv_memory="a10")
