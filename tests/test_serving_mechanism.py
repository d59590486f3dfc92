"""Serving mechanism against hand-worked kernel sums, KV capacity and conservation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import hetsim
from tests import kernel_hand as hand

# Llama-3-8B (models.yaml): 8.03e9 params, 32 layers, hidden 4096, 8 KV heads of 128.
PARAMS, LAYERS, HIDDEN = 8.03e9, 32, 4096
KV_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V x layers x kv_heads x head_dim x fp16 = 131072
WEIGHTS = int(PARAMS * 2)
# A100-80GB (catalogue.yaml): 2039e9 B/s of HBM.
BW = 2039e9


def scenario(workload: dict[str, Any], gpus: int = 1, memory: int | None = None) -> dict[str, Any]:
    gpu: dict[str, Any] = {"type": "a100-80gb", "count": gpus}
    if memory is not None:
        gpu["memory_bytes"] = memory
    return {
        "name": "t",
        "seed": 3,
        "cluster": {
            "nodes": [{"name": "n", "devices": {"gpu": gpu}}],
            "network": {"type": "ib-ndr", "attach": "gpu"},
        },
        "workload": {"kind": "serving", "model": "llama-3-8b", "tp_options": [1], **workload},
        "outputs": {"spans": False},
    }


def run(sc: dict[str, Any], tmp_path: Any, policies: dict[str, Any] | None = None) -> Any:
    import yaml

    sc = dict(sc, policies=policies or {})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc))
    return hetsim.run(path)


def one_request(prompt: int, output: int) -> dict[str, Any]:
    return {
        "requests": {
            "num_requests": 1, "rate_per_s": 1.0, "prompt_tokens": prompt, "output_tokens": output
        },
        "slo": {"ttft_s": 10.0, "tpot_s": 1.0},
    }  # fmt: skip


def test_single_request_ttft_and_tpot_are_the_kernel_sums(tmp_path: Any) -> None:
    p, o = 1000, 5
    res = run(scenario(one_request(p, o)), tmp_path)
    row = res.tables["requests"].iloc[0]
    # prefill: every kernel of 1000 tokens through 32 layers, head for 1 sequence
    ttft = hand.prefill_s(hand.A100, hand.LLAMA3_8B, p)
    assert row.ttft_s == pytest.approx(ttft, rel=1e-9)
    # 1.6e13 GEMM FLOPs at the fitted large-GEMM efficiency (~0.7 of 312 TF): ~75 ms
    assert 0.06 < ttft < 0.1
    # decode step with c cached tokens: reads every weight and c + 1 KV tokens
    steps = [hand.decode_s(hand.A100, hand.LLAMA3_8B, 1, c + 1) for c in range(p, p + o - 1)]
    assert row.tpot_s == pytest.approx(sum(steps) / (o - 1), rel=1e-9)
    # bandwidth-bound: slower than reading the weights and KV at the full HBM rate
    assert row.tpot_s > (WEIGHTS + 1002 * KV_PER_TOKEN) / BW


def test_disaggregated_transfer_moves_prompt_kv(tmp_path: Any) -> None:
    p, o = 1000, 3
    policies = {"deployment": {"name": "distserve", "search": "estimate"}}  # 1 + 1 fit only
    res = run(scenario(one_request(p, o), gpus=2), tmp_path, policies)
    s = res.summary.iloc[0]
    assert s.kv_transfer_bytes == p * KV_PER_TOKEN == 131_072_000
    # GPU -> switch -> GPU over IB NDR: 50e9 B/s x 0.9, 1.5 us a hop (links.yaml)
    per_hop = 1.5e-6 + p * KV_PER_TOKEN / (50e9 * 0.9)
    assert per_hop <= s.kv_transfer_mean_s <= 2 * per_hop + 1e-9
    assert s.deployment == "1xdecode:a100-80gb/tp1+1xprefill:a100-80gb/tp1"


def test_kv_capacity_and_preemption_at_the_exact_token(tmp_path: Any) -> None:
    # mem_fraction 1: KV holds (memory - weights) / 131072 = 64 tokens = 4 blocks of 16
    memory = WEIGHTS + 64 * KV_PER_TOKEN
    wl = {
        "requests": {
            "num_requests": 2, "rate_per_s": 1e6, "prompt_tokens": 16, "output_tokens": 40
        },
        "mem_fraction": 1.0,
        "deployment_rate_per_s": 0.1,
        "slo": {"ttft_s": 10.0, "tpot_s": 1.0},
    }  # fmt: skip
    res = run(scenario(wl, memory=memory), tmp_path)
    inst = res.tables["instances"].iloc[0]
    assert inst.kv_capacity_tokens == 64
    # Both prompts (16 tokens, 1 block each) prefill, then both decode. A step needs
    # ceil((c + 1) / 16) blocks per sequence: 2 + 2 = 4 fit up to c = 31; at c = 32
    # each needs 3, 6 > 4, so the newest (request 1) is preempted after emitting
    # 1 + 16 = 17 tokens. Request 0 runs its 39 decode steps (KV peaks at 55 tokens
    # = 4 blocks), then request 1 re-prefills 16 + 17 = 33 tokens (emitting token 18)
    # and decodes its last 22 tokens: 2 + 39 + 1 + 22 = 64 iterations.
    assert inst.preemptions == 1
    assert inst.iterations == 64
    assert inst.kv_peak_utilisation == 1.0
    req = res.tables["requests"]
    assert req.finish_s[1] > req.finish_s[0]


@pytest.mark.parametrize(
    "policies",
    [
        {"batching": "vllm", "routing": "least-outstanding"},
        {"batching": "sarathi", "routing": "round-robin"},
        {"batching": "orca", "routing": "jsq"},
        {"deployment": "distserve", "routing": "goodput-wrr"},
    ],
)
def test_conservation_under_load(tmp_path: Any, policies: dict[str, Any]) -> None:
    wl = {
        "requests": {"num_requests": 400, "rate_per_s": 20.0, "prompt_tokens": 700,
                     "output_tokens": 60},
        "slo": {"ttft_s": 2.0, "tpot_s": 0.2},
        "deployment_rate_per_s": 40.0,
        "mem_fraction": 0.25,
    }  # fmt: skip
    res = run(scenario(wl, gpus=4), tmp_path, policies)
    req = res.tables["requests"]
    assert len(req) == 400 and req.finish_s.notna().all()
    assert (req.finish_s >= req.first_token_s).all() and (req.first_token_s > req.arrival_s).all()
    # every requested token was emitted exactly once (first tokens + decode tokens,
    # counted by the instances as they run, recomputed prefills included)
    assert res.tables["instances"].tokens_out.sum() == 400 * 60


def test_lud_speeds_up_a_lone_decode_by_expected_acceptance(tmp_path: Any) -> None:
    wl = one_request(200, 2001)
    base = run(scenario(wl), tmp_path).tables["requests"].iloc[0]
    fixed = {"lookahead": 4, "accept_p": 0.27, "accept_concentration": None}
    lud = run(scenario(dict(wl, lud=fixed)), tmp_path)
    row = lud.tables["requests"].iloc[0]
    # batch 1 is memory-bound: a 4-position step costs ~1 step; tokens per step are
    # E[min(K, Geom)] = (1 - p^K) / (1 - p) = 1.3645; 2000 steps -> sampling sd ~1%
    expected = (1 - 0.27**4) / (1 - 0.27)
    assert base.tpot_s / row.tpot_s == pytest.approx(expected, rel=0.04)
    assert np.isfinite(row.finish_s)
