"""The attainment predictor every deployment policy sizes from: hand-computed cases on a
toy cost model, and agreement with the goodput measured by sub-simulation."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.optimize import brentq

import hetsim
from hetsim.simulator.engine import Simulation
from hetsim.simulator.runner import build, run_nested
from hetsim.workloads.serving.estimate import Estimator, Lengths, Targets
from hetsim.workloads.serving.subsim import SubSimGoodput
from hetsim.workloads.serving.view import InstanceSpec


class ToyCost:
    """prefill_s(p) = 2e-5 p; decode_s(b) = 5 ms + 0.1 ms x b (context ignored)."""

    def prefill_s(self, prompt_tokens: int) -> float:
        return 2e-5 * prompt_tokens

    def decode_s(self, batch: int, mean_ctx: float) -> float:
        return 0.005 + 1e-4 * batch


def _est(prompts: list[int], outputs: list[int], **targets: Any) -> Estimator:
    lengths = Lengths(np.array(prompts), np.array(outputs))
    t = Targets(**{"ttft_s": 0.1, "tpot_s": 0.025, **targets})
    return Estimator(ToyCost(), lengths, 10**9, 256, t)  # type: ignore[arg-type]


def test_prefill_ttft_share_and_goodput_by_hand() -> None:
    # Every prompt 1000 tokens: T = 20 ms. At 30 req/s, rho = 0.6; the gated-batch wait
    # E[W'] = (1 + rho) lambda T^2 / (2 (1 - rho)) = 1.6 x 30 x 4e-4 / 0.8 = 24 ms;
    # slack 100 - 20 = 80 ms: P(TTFT > 0.1) = 0.6 exp(-0.6 x 0.08 / 0.024) = 0.6 e^-2.
    e = _est([1000], [101])
    assert e.ttft_met(30.0, 0.0) == pytest.approx(1 - 0.6 * math.exp(-2), rel=1e-9)
    # goodput at q = 0.9: with lambda = rho / T the exponent is
    # rho x 0.08 x 2 (1 - rho) / ((1 + rho) rho T) = 8 (1 - rho) / (1 + rho), so
    # rho exp(-8 (1 - rho) / (1 + rho)) = 0.1 (root ~0.628, ~31.4 req/s)
    rho = brentq(lambda r: r * math.exp(-8 * (1 - r) / (1 + r)) - 0.1, 0.3, 0.99)
    assert e.goodput("prefill") == pytest.approx(rho / 0.02, rel=0.01)


def test_decode_goodput_by_hand() -> None:
    # TPOT 25 ms: decode_s(b) = 0.005 + 1e-4 b <= 0.025 -> mean batch b = 200 (<= 256,
    # KV ample); Little: lambda = b / ((O - 1) decode_s(b)) = 200 / (100 x 0.025) = 80.
    assert _est([1000], [101]).goodput("decode") == pytest.approx(80.0, rel=0.01)
    # KV for 150 sequences of 1101 tokens at the batch's 0.9 quantile: b + 1.2816 sqrt(b)
    # <= 150 -> sqrt(b) = (-1.2816 + sqrt(1.2816^2 + 600)) / 2 = 11.623, b = 135.1;
    # lambda = 135.1 / (100 x (0.005 + 0.01351)) = 72.99 req/s
    z = 1.2815516
    b = ((-z + math.sqrt(z * z + 600)) / 2) ** 2
    lengths = Lengths(np.array([1000]), np.array([101]))
    small = Estimator(ToyCost(), lengths, 150 * 1101, 256, Targets(0.1, 0.025))  # type: ignore[arg-type]
    assert b / (100 * (0.005 + 1e-4 * b)) == pytest.approx(72.99, abs=0.01)
    assert small.goodput("decode") == pytest.approx(b / (100 * (0.005 + 1e-4 * b)), rel=0.01)


def test_colocated_below_either_phase_and_headroom_divides() -> None:
    # A colocated instance shares its GPU between both phases, so it carries less than
    # a prefill-only or a decode-only instance of the same config.
    e = _est([200, 800, 1500, 3000], [50, 150, 300, 600])
    mixed = e.goodput("mixed")
    assert 0 < mixed < min(e.goodput("prefill"), e.goodput("decode"))
    # headroom 10%: the same rate divided by 1.1
    h = _est([200, 800, 1500, 3000], [50, 150, 300, 600], headroom=0.1)
    assert h.goodput("mixed") == pytest.approx(mixed / 1.1, rel=1e-12)


def test_predictor_within_15_percent_of_simulated_goodput(root: Path) -> None:
    # The cauchy scenario's workload (Llama-3-8B, Azure conversation lengths, TTFT 0.5 s,
    # TPOT 25 ms). docs/serving.md lists 12 units at 0.89-1.05x; asserted here for a
    # colocated H100 (TPOT-bound) and an H100 prefill + H100 decode pair (TTFT-bound),
    # with sub-simulations judged at the same 0.9 attainment, tolerance 15%.
    sc = hetsim.load_scenario(root / "scenarios" / "cauchy.yaml")
    w = build(sc, Simulation(sc.seed, record_spans=False))
    gpus = {t: mem for t, (_, _, mem) in w.gpu_types.items()}
    measure = SubSimGoodput(
        w.params.model_dump(mode="json"), gpus, sc.base_dir, steps=5, run=run_nested
    )
    every = max(len(w.times.prompt) // 256, 1)
    lengths = Lengths(w.times.prompt[::every], w.times.output[::every])
    h100 = w.configs[("h100-sxm", 1)]
    est = Estimator(h100.cost, lengths, h100.kv_tokens, 256, Targets(0.5, 0.025, 0.9))
    mixed = est.goodput("mixed")
    pair = min(est.goodput("prefill"), est.goodput("decode"))
    got_mixed = measure((InstanceSpec("mixed", "h100-sxm", 1),), mixed)
    got_pair = measure(
        (InstanceSpec("prefill", "h100-sxm", 1), InstanceSpec("decode", "h100-sxm", 1)), pair
    )
    assert mixed == pytest.approx(got_mixed, rel=0.15)
    assert pair == pytest.approx(got_pair, rel=0.15)
