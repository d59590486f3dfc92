"""MoE mechanism: model specs, costs by hand, the layer timeline, routing statistics,
conservation, and the papers' directions of effect on short seeded runs."""

from __future__ import annotations

import numpy as np
import pytest

import hetsim
from hetsim.simulator import registry
from hetsim.workloads.models.moe import from_hf_config, load_moe_models
from hetsim.workloads.moe.costs import StepCosts
from hetsim.workloads.moe.layer import timeline
from hetsim.workloads.moe.residency import Residency
from hetsim.workloads.moe.routing import SyntheticRouting, build_trace
from hetsim.workloads.moe.view import Placement, PlacementView

A = np.asarray

V2_LITE_CONFIG = {  # deepseek-ai/DeepSeek-V2-Lite config.json (the fields used)
    "hidden_size": 2048, "num_hidden_layers": 27, "n_routed_experts": 64,
    "num_experts_per_tok": 6, "moe_intermediate_size": 1408, "intermediate_size": 10944,
    "n_shared_experts": 2, "first_k_dense_replace": 1, "num_attention_heads": 16,
    "kv_lora_rank": 512, "q_lora_rank": None, "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 102400, "norm_topk_prob": False,
}  # fmt: skip


def test_hf_config_reproduces_catalogue_entry() -> None:
    got = from_hf_config("deepseek-v2-lite", V2_LITE_CONFIG)
    want = load_moe_models()["deepseek-v2-lite"]
    for f in ("layers", "dense_layers", "hidden", "routed_experts", "top_k", "expert_ffn",
              "shared_experts", "shared_ffn", "attention_params", "kv_bytes_per_token"):  # fmt: skip
        assert getattr(got, f) == getattr(want, f), f
    # papers/moe.md section 3: 8.65 M params per expert, 15.7 B in total
    assert want.expert_params() == 3 * 2048 * 1408 == 8_650_752
    assert abs(load_moe_models()["mixtral-8x7b"].expert_params() - 176.2e6) < 0.1e6


def _run(**over: object) -> hetsim.Result:
    return hetsim.run("scenarios/hybrimoe.yaml", overrides=over)  # type: ignore[arg-type]


def test_costs_by_hand() -> None:
    sc = hetsim.load_scenario("scenarios/hybrimoe.yaml")
    assert sc.workload.cache_fraction == 0.25
    r = _run(**{"workload.output_tokens": 2, "workload.prompt_tokens": 4})
    # one 4.5-bit V2-Lite expert: 3 x 2048 x 1408 x 4.5 / 8 = 4,866,048 bytes;
    # PCIe 4.0 x16: 5 us + 4,866,048 / (31.5e9 x 0.8094) = 195.87 us
    assert r.summary.expert_bytes.iloc[0] == 4_866_048
    copies = r.tables["layers"].copied.sum()
    assert r.summary.pcie_bytes.iloc[0] == 4_866_048 * (copies + r.summary.prefetches.iloc[0])


def test_timeline_by_hand() -> None:
    # experts 0 (cached, GPU 1 s), 1 (uncached, copy 2 s, GPU 1 s), 2 (CPU 4 s).
    # Layer starts at 10; attention 0.5 -> router 10.5; shared experts 0.25 on the GPU.
    # GPU: expert 0 10.75-11.75; copy 10.5-12.5; expert 1 12.5-13.5 (stall 0.75).
    # CPU: 10.5 + 0.3 intercept + 4 = 14.8 -> barrier 14.8.
    view = PlacementView(0, "decode", (0, 1, 2), (1, 1, 1), (True, False, False),
                         (0.0, 0.0, 0.0), (1.0, 1.0, 9.0), (9.0, 9.0, 4.0), 0.3,
                         2.0, 0.25, 0.0, 0.0, False, 0.75, 2.0)  # fmt: skip
    res = Residency((2,), 3, 2.0)
    step = StepCosts(0.5, 1.5, 0.25, 0.5, 0.0, 0.0)
    router, end, gbusy, cbusy, stall, copies, spans = timeline(
        view, Placement((0, 1), (2,)), res, 10.0, step, True
    )
    assert (router, end, stall, copies) == (10.5, pytest.approx(14.8), 0.75, 1)
    assert gbusy == 0.5 + 0.25 + 2.0 and cbusy == pytest.approx(4.3)
    assert ("pcie", "copy L0E1", 10.5, 12.5) in spans and res.pcie_free_s == 12.5


def test_generator_statistics() -> None:
    model = load_moe_models()["mixtral-8x7b"]
    rng = np.random.default_rng(3)
    trace = build_trace(SyntheticRouting(), model, 3000, rng, base=__import__("pathlib").Path())
    top1 = trace.logits.argmax(axis=2)
    repeat = (top1[1:] == top1[:-1]).mean()
    assert 0.14 <= repeat <= 0.28  # papers/moe.md 4: 14-28% (12.5% at random)
    # gate-reuse accuracy of layer 5 (published accs[5] = 0.8588): predicted arg-max in
    # the true top-2
    pred = trace.predicted(0, 3000, 5, 1).argmax(axis=1)
    top2 = np.argsort(-trace.logits[:, 5], axis=1)[:, :2]
    acc = (top2 == pred[:, None]).any(axis=1).mean()
    assert abs(acc - 0.8588) < 0.03  # Monte Carlo calibration, 3000 tokens


def test_conservation_and_tables_on_a_short_run() -> None:
    r = _run(**{"workload.output_tokens": 4, "workload.prompt_tokens": 16})
    layers = r.tables["layers"]
    assert (layers.gpu_experts + layers.cpu_experts == layers.experts).all()
    assert len(layers) == 5 * 26  # (prefill + 4 decode steps) x 26 MoE layers
    assert (layers.end_s >= layers.router_s).all()
    assert r.summary.experts_per_token.iloc[0] == 6.0


# AdapMoE (papers/moe.md 1.6: -25% activated experts, 1.35x over Mixtral-offloading),
# judged against plain on-demand LRU (no prefetch, top-2: the strong baseline) and
# against Mixtral-offloading as shipped, all on the same engine code and cost model
ADAPMOE: dict[str, object] = {
    "gating": {"name": "adapmoe", "threshold": 0.005},
    "placement": "gpu",
    "prefetch": "gate",
    "cache": "adapmoe",
}
ON_DEMAND_LRU: dict[str, object] = {
    "gating": "topk",
    "placement": "gpu",
    "prefetch": "none",
    "cache": "lru",
}
MIXTRAL_OFFLOADING: dict[str, object] = {
    "gating": "topk",
    "placement": "gpu",
    "prefetch": {"name": "gate", "experts_per_layer": 2},
    "cache": "lru",
}
ADAP_SHORT: dict[str, object] = {"workload.output_tokens": 32, "workload.prompt_tokens": 8}


def _tbt(seed: int, policies: dict[str, object], **over: object) -> tuple[float, float]:
    s = hetsim.run(
        "scenarios/adapmoe.yaml", seed=seed, overrides={**ADAP_SHORT, **over, "policies": policies}
    ).summary
    return float(s.tbt_mean_s.iloc[0]), float(s.experts_per_token.iloc[0])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_adapmoe_beats_on_demand_lru_on_its_engine(seed: int) -> None:
    # the engine both systems ship (eager PyTorch + Triton HQQ kernels, hqq-offloading
    # profile): a layer's host work is comparable to an expert copy, so a correct
    # prefetch hides a copy and one expert fewer saves its host and kernel time
    engine = {"workload.engine": "hqq-offloading"}
    lru, k_lru = _tbt(seed, ON_DEMAND_LRU, **engine)
    mix, _ = _tbt(seed, MIXTRAL_OFFLOADING, **engine)
    adap, k_adap = _tbt(seed, ADAPMOE, **engine)
    assert k_lru == 2.0 and k_adap < 0.92 * 2.0
    assert adap < lru / 1.1  # 1.2-1.3x over these seeds; the tolerance keeps 1.1
    assert adap < mix


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_adapmoe_loses_to_on_demand_lru_when_experts_cost_no_host_time(seed: int) -> None:
    # the shortcut this guards: with the GPU expert path free of host time (kernels only)
    # decode is PCIe-bound, a wrong prefetch holds the link for a whole copy and evicts a
    # resident expert, and AdapMoE with prefetch falls behind plain LRU
    free = {
        "workload.engine": "hqq-offloading",
        "workload.engine_overrides": {"torch_op_s": 0.0, "launch_s": 0.0, "sync_s": 0.0},
    }
    lru, _ = _tbt(seed, ON_DEMAND_LRU, **free)
    adap, _ = _tbt(seed, ADAPMOE, **free)
    assert adap > lru * 1.05


def test_hybrimoe_direction() -> None:
    # papers/moe.md 2.7: faster prefill and decode than kTransformers; llama.cpp weakest
    # in prefill
    systems = {
        "kt": {
            "gating": "topk",
            "placement": "ktransformers",
            "prefetch": "none",
            "cache": "static",
        },
        "lc": {
            "gating": "topk",
            "placement": "llamacpp",
            "prefetch": "none",
            "cache": "static-layers",
        },
        "hy": {"gating": "topk", "placement": "hybrimoe", "prefetch": "impact", "cache": "mrs"},
    }
    short = {"workload.output_tokens": 12, "workload.prompt_tokens": 64}
    s = {k: _run(**short, policies=v).summary.iloc[0] for k, v in systems.items()}
    assert s["hy"].ttft_s < s["kt"].ttft_s / 1.2
    assert s["lc"].ttft_s > max(s["kt"].ttft_s, s["hy"].ttft_s)
    # decode: the paper's gain needs its engine's per-expert overheads (HybriMoE's V2-Lite
    # profile); with CPU experts at kernel-model cost the CPU keeps up and HSS gains little
    assert s["hy"].tbt_mean_s < s["kt"].tbt_mean_s * 1.0001
    assert s["hy"].tbt_mean_s > s["kt"].tbt_mean_s / 1.2
    prof = {
        k: hetsim.run(
            "scenarios/hybrimoe-profile.yaml", overrides={**short, "policies": v}
        ).summary.iloc[0]
        for k, v in systems.items()
        if k != "lc"
    }
    assert prof["hy"].tbt_mean_s < prof["kt"].tbt_mean_s / 1.2


def test_policies_are_registered() -> None:
    names = {
        p: registry.policies.point(f"moe.{p}").names()
        for p in ("gating", "placement", "prefetch", "cache")
    }
    assert names["placement"] == ["gpu", "hybrimoe", "ktransformers", "llamacpp"]
    assert set(names["cache"]) == {"adapmoe", "lru", "mrs", "none", "static", "static-layers"}
