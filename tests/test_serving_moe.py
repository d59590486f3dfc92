"""Mixtral-8x7B (MoE) serving: parameter counts, the expert-bytes formula, and one
request's TTFT/TPOT worked out by hand, kernel by kernel (tests/kernel_hand.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import hetsim
from hetsim.devices.precision import Precision
from hetsim.simulator.errors import ScenarioError
from hetsim.workloads.serving.cost import IterationCost
from hetsim.workloads.serving.models import mixtral_spec
from tests import kernel_hand as hand

# Mixtral-8x7B config.json: 32 layers, hidden 4096, intermediate 14336, 8 experts,
# top-2, 32 heads / 8 KV heads of 128, vocab 32000, untied embeddings.
L, H, F, E, K, V = 32, 4096, 14336, 8, 2, 32000
EXPERT = 3 * H * F  # gate, up, down: 176,160,768 params
ATTN = 2 * H * H + 2 * H * 1024  # q, o: 4096^2; k, v: 4096 x 8 x 128
TOTAL = L * E * EXPERT + L * (ATTN + H * E) + (2 * L + 1) * H + 2 * V * H
ACTIVE = TOTAL - L * (E - K) * EXPERT
NON_EXPERT = TOTAL - L * E * EXPERT
KV_PER_TOKEN = 2 * L * 8 * 128 * 2  # 131072 B at fp16


def test_parameter_counts_match_the_published_totals() -> None:
    spec = mixtral_spec()
    assert spec.params == TOTAL
    assert spec.active_params == ACTIVE
    # Mistral AI / Jiang et al. 2024: "46.7B total, 12.9B active per token"
    assert abs(TOTAL / 46.7e9 - 1) < 1e-3
    assert abs(ACTIVE / 12.9e9 - 1) < 5e-3
    assert spec.kv_bytes_per_token("fp16") == KV_PER_TOKEN
    assert spec.weight_bytes("fp16") == 2 * TOTAL  # memory: every expert resident


def test_expert_bytes_formula_limits() -> None:
    spec = mixtral_spec()
    per_expert = EXPERT * 2  # bytes at fp16
    # one token reads exactly its top-2 experts in every layer
    assert spec.expected_experts(1) == pytest.approx(2.0)
    assert spec.expert_bytes_read(1) == pytest.approx(L * 2 * per_expert)
    # two tokens: 8 (1 - (6/8)^2) = 8 x 7/16 = 3.5 experts
    assert spec.expected_experts(2) == pytest.approx(3.5)
    # many tokens: every expert is read (8 (1 - 0.75^1000) = 8 to double precision)
    assert spec.expert_bytes_read(1000) == pytest.approx(L * E * per_expert, rel=1e-12)
    # memory holds every expert: the footprint is the total parameters
    cost = IterationCost(spec, simulator_spec("a100-80gb"), 1, Precision(), None)
    assert cost.weight_bytes == 2 * TOTAL


def simulator_spec(name: str) -> Any:
    from hetsim.simulator import registry

    return registry.device_types.get(name)


def _scenario(tmp_path: Path, memory: int, prompt: int, output: int) -> Path:
    sc = {
        "name": "moe",
        "seed": 1,
        "cluster": {
            "nodes": [
                {
                    "name": "n",
                    "devices": {"gpu": {"type": "a100-80gb", "count": 1, "memory_bytes": memory}},
                }
            ],
            "network": {"type": "ib-ndr", "attach": "gpu"},
        },
        "workload": {
            "kind": "serving",
            "model": "mixtral-8x7b",
            "tp_options": [1],
            "requests": {
                "num_requests": 1, "rate_per_s": 1.0,
                "prompt_tokens": prompt, "output_tokens": output,
            },
            "slo": {"ttft_s": 10.0, "tpot_s": 1.0},
        },
        "outputs": {"spans": False},
    }  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc))
    return path


def test_single_request_ttft_and_tpot_are_the_moe_roofline(tmp_path: Path) -> None:
    # one A100 with 200 GB (a hypothetical memory, so that TP = 1 holds the model)
    p, o = 500, 4
    row = hetsim.run(_scenario(tmp_path, 200 * 10**9, p, o)).tables["requests"].iloc[0]
    # prefill of p tokens: attention and the expected distinct experts' GEMMs
    # (8 (1 - 0.75^500) ~= 8 experts per layer, 125 tokens each), head for 1 sequence
    g, m = hand.A100, hand.MIXTRAL
    ttft = (
        hand.moe_token_part(g, m, p) + hand.head_part(g, m, 1)
        + hand.prefill_attention(g, m, p, 0)
    )  # fmt: skip
    assert row.ttft_s == pytest.approx(ttft, rel=1e-9)
    # every expert's weights are read once: at least 93.4e9 B / 2.039e12 B/s = 45.8 ms
    assert ttft > 2 * TOTAL / 2039e9
    # decode step with c cached: 1 token reads its 2 experts per layer (memory-bound)
    steps = [
        hand.moe_token_part(g, m, 1) + hand.head_part(g, m, 1)
        + hand.decode_attention(g, m, 1, c + 1)
        for c in range(p, p + o - 1)
    ]  # fmt: skip
    assert row.tpot_s == pytest.approx(sum(steps) / (o - 1), rel=1e-9)
    # ~25.8 GB of weights read per step: slower than at the full HBM rate (12.7 ms),
    # far faster than reading all 8 experts (~46 ms)
    assert 2 * (NON_EXPERT + L * K * EXPERT) / 2039e9 < row.tpot_s < 0.03


def test_mixtral_on_one_80gb_gpu_names_the_bytes_short(tmp_path: Path) -> None:
    # 93,405,585,408 B of fp16 weights - int(0.9 x 85,899,345,920) = 16,096,174,080 short
    with pytest.raises(ScenarioError, match=r"on 1 x a100-80gb .*: 16096174080 bytes short"):
        hetsim.run(_scenario(tmp_path, 85899345920, 100, 4))


def test_mixtral_variant_of_the_cauchy_scenario_runs() -> None:
    # docs/serving.md: Mixtral's 93.4 GB of fp16 weights exceed 0.9 x 80 GB, so with
    # TP 1 offered too, the mechanism drops every TP-1 config and each instance is
    # TP >= 2; at 8 req/s the Melange and colocated deployments, sized by the
    # attainment predictor, meet the 0.9 attainment (16 req/s, used before the
    # kernel-level cost model, no longer fits the scenario's GPUs).
    over = {
        "workload.model": "mixtral-8x7b",
        "workload.tp_options": [1, 2, 4],
        "workload.requests.rate_per_s": 8,
        "workload.requests.num_requests": 300,
    }
    for dep in ("melange", "colocated"):
        res = hetsim.run(
            "scenarios/cauchy.yaml", overrides=dict(over, **{"policies.deployment": dep})
        )
        row = res.summary.iloc[0]
        assert row.slo_attainment >= 0.9, (dep, row.deployment)
        assert set(res.tables["instances"].tp) <= {2, 4}
