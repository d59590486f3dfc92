"""Issue 18 (serving): sizing from a held-out sample, never the measured requests;
Melange's size buckets from a named output-length estimator (the oracle labelled);
Splitwise's layer-wise KV transfer (closed form); DistServe's simulate-and-bisect."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import yaml

import hetsim
from hetsim.schedulers.serving.deploy_distserve import DistServeDeployment, DistServeParams
from hetsim.workloads.serving.output_estimate import predict_outputs
from hetsim.workloads.serving.params import OutputEstimate, ServingParams
from hetsim.workloads.serving.view import ConfigView, DeploymentView, SearchBudget
from hetsim.workloads.serving.workload import ServingWorkload

KV_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # Llama-3-8B fp16: K and V x layers x kv heads x dim
IB_BW, IB_HOP_S = 50e9 * 0.9, 1.5e-6  # ib-ndr (links.yaml): GPU -> switch -> GPU


def run(sc: dict[str, Any], tmp_path: Path) -> Any:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc))
    return hetsim.run(path)


def cluster(*types: str) -> dict[str, Any]:
    nodes = [{"name": t, "devices": {"gpu": {"type": t, "count": 2}}} for t in types]
    return {"nodes": nodes, "network": {"type": "ib-ndr", "attach": "gpu"}}


def serving(requests: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"kind": "serving", "model": "llama-3-8b", "tp_options": [1],
            "slo": {"ttft_s": 1.0, "tpot_s": 0.1}, "requests": requests, **extra}  # fmt: skip


def plan(res: Any) -> tuple[str, list[float]]:
    """The deployment and every instance's goodput estimate (what sizing produced)."""
    inst = res.tables["instances"]
    return res.summary.iloc[0]["deployment"], inst.goodput_estimate_rps.round(9).tolist()


# ---- sizing apart from the measured requests -------------------------------------------
def test_holdout_sizing_does_not_change_with_the_measured_requests(tmp_path: Path) -> None:
    req = {"arrivals": "poisson", "rate_per_s": 4.0, "lengths": "trace",
           "trace": {"format": "azure", "path": "pkg:serving/azure_conv_2023_sample.csv"}}  # fmt: skip
    out = {}
    for n in (60, 90):  # the measured requests differ (count and lengths); nothing else
        sc = {"name": "t", "seed": 5, "cluster": cluster("a100-80gb"),
              "workload": serving(dict(req, num_requests=n), estimate_sample=64),
              "policies": {"deployment": "colocated"}, "outputs": {"spans": False}}  # fmt: skip
        out[n] = run(sc, tmp_path)
    assert plan(out[60]) == plan(out[90])
    a, b = (out[n].tables["requests"] for n in (60, 90))
    assert not np.array_equal(a.output_tokens.to_numpy()[-10:], b.output_tokens.to_numpy()[50:60])


def _trace(path: Path, late_output: int) -> None:
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for k in range(40):  # one request a second; lengths after 10 s are the variable
        out = 50 + 3 * k if k < 10 else late_output
        rows.append(f"2023-11-16 18:15:{k:02d}.00,{200 + 10 * k},{out}")
    path.write_text("\n".join(rows) + "\n")


def test_window_sizing_ignores_requests_after_the_window(tmp_path: Path) -> None:
    got = {}
    for late in (20, 900):
        _trace(tmp_path / "t.csv", late)
        req = {"num_requests": 40, "arrivals": "trace", "lengths": "trace", "rate_per_s": None,
               "trace": {"format": "azure", "path": "t.csv"}}  # fmt: skip
        wl = serving(req, sizing_source="window", sizing_window_s=10.0, warmup_s=10.0)
        sc = {"name": "t", "seed": 1, "cluster": cluster("a100-80gb"), "workload": wl,
              "policies": {"deployment": "colocated"}, "outputs": {"spans": False}}  # fmt: skip
        got[late] = run(sc, tmp_path)
    assert plan(got[20]) == plan(got[900])
    # ... while the measured requests did change
    assert (
        got[20].tables["requests"].output_tokens.sum()
        != got[900].tables["requests"].output_tokens.sum()
    )


def test_window_sizing_needs_the_window_left_out_of_the_metrics() -> None:
    with pytest.raises(ValueError, match="warmup_s: must be >= sizing_window_s"):
        ServingParams(sizing_source="window", sizing_window_s=30.0, warmup_s=10.0)


# ---- output-length estimates -----------------------------------------------------------
def test_lognormal_estimator_reproduces_its_bias_and_noise() -> None:
    true = np.full(200_000, 400)
    spec = OutputEstimate(kind="lognormal", bias=0.2, noise_sigma=0.5)
    got = predict_outputs(spec, true, true, (true, true), np.random.default_rng(0))
    assert got.mean() == pytest.approx(400 * 1.2, rel=0.01)
    assert np.log(got / 400).std() == pytest.approx(0.5, rel=0.01)


def test_prompt_history_predicts_the_bucket_mean_of_the_held_out_sample() -> None:
    hist_p, hist_o = np.array([100, 200, 2000, 3000]), np.array([10, 30, 400, 600])
    spec = OutputEstimate()  # prompt-history, no bias, no noise
    got = predict_outputs(spec, np.array([150, 2500, 700]), np.array([1, 1, 1]),
                          (hist_p, hist_o), np.random.default_rng(0))  # fmt: skip
    # prompt buckets (edges 256, 1024, 2048): 150 -> {100, 200}: 20; 2500 -> {3000}:
    # 600; 700 -> empty bucket: the overall mean 260
    assert got.tolist() == [20, 600, 260]


def test_oracle_is_labelled_and_exact() -> None:
    with pytest.raises(ValueError, match="oracle"):
        OutputEstimate(kind="oracle", noise_sigma=0.1)
    true = np.array([5, 50, 500])
    got = predict_outputs(OutputEstimate(kind="oracle"), true, true, (true, true),
                          np.random.default_rng(0))  # fmt: skip
    assert got.tolist() == [5, 50, 500]


def test_melange_routing_with_a_noisy_estimator_differs_from_the_oracle(tmp_path: Path) -> None:
    req = {"num_requests": 150, "arrivals": "poisson", "rate_per_s": 16.0, "lengths": "trace",
           "trace": {"format": "azure", "path": "pkg:serving/azure_conv_2023_sample.csv"}}  # fmt: skip
    entries = {}
    for kind, sigma in (("oracle", 0.0), ("lognormal", 1.0)):
        wl = serving(req, output_estimate={"kind": kind, "noise_sigma": sigma},
                     slo={"ttft_s": 0.5, "tpot_s": 0.025}, price_preset="aws-ondemand",
                     estimate_sample=128)  # fmt: skip
        sc = {"name": "t", "seed": 1, "cluster": cluster("h100-sxm", "l40s", "l4"),
              "workload": wl, "policies": {"deployment": "melange", "routing": "goodput-wrr"},
              "outputs": {"spans": False}}  # fmt: skip
        entries[kind] = run(sc, tmp_path).tables["requests"].entry_instance.to_numpy()
    assert len(entries["oracle"]) == len(entries["lognormal"]) == 150
    assert (entries["oracle"] != entries["lognormal"]).mean() > 0.05


# ---- Splitwise: layer-wise KV transfer -----------------------------------------------------
class _Link:
    """A path of latency ``lat`` s and ``bw`` B/s, as Cluster.copy_time_s prices it."""

    def __init__(self, lat: float, bw: float) -> None:
        self.lat, self.bw = lat, bw

    def copy_time_s(self, src: str, dst: str, nbytes: int) -> float:
        return self.lat + nbytes / self.bw


@pytest.mark.parametrize(
    ("bw", "expected"),
    [
        # compute-bound: 4 layers of 1 s, 1000 B at 1000 B/s (250 B a layer in 0.25 s):
        # only the last layer's 250 B are left at the end of the prefill
        (1000.0, 250),
        # transfer-bound: at 100 B/s, 3 s of overlap carry 300 B of the first 750 B
        (100.0, 700),
    ],
)
def test_layerwise_kv_leaves_only_the_tail_after_the_last_layer(bw: float, expected: int) -> None:
    w = SimpleNamespace(model=SimpleNamespace(layers=4), cluster=_Link(1e-3, bw))
    assert ServingWorkload.exposed_kv_bytes(w, "a", "b", 1000, 4.0) == expected  # type: ignore[arg-type]


def test_splitwise_exposes_one_layer_of_kv_over_infiniband(tmp_path: Path) -> None:
    p = 1000
    nodes = [{"name": "h", "devices": {"gpu": {"type": "h100-sxm", "count": 1}}},
             {"name": "a", "devices": {"gpu": {"type": "a100-80gb", "count": 1}}}]  # fmt: skip
    req = {"num_requests": 1, "rate_per_s": 1.0, "prompt_tokens": p, "output_tokens": 3}
    got = {}
    for kv in ("after-prefill", "layerwise"):
        sc = {"name": "t", "seed": 3,
              "cluster": {"nodes": nodes, "network": {"type": "ib-ndr", "attach": "gpu"}},
              "workload": serving(req, slo={"ttft_s": 10.0, "tpot_s": 1.0}),
              "policies": {"deployment": {"name": "splitwise", "kv_transfer": kv}},
              "outputs": {"spans": False}}  # fmt: skip
        got[kv] = run(sc, tmp_path).summary.iloc[0].kv_transfer_mean_s
    nbytes = p * KV_PER_TOKEN
    # two hops' latency, the bytes pipelined at the link rate; the H100 prefill of 1000
    # tokens (~29 ms) outlasts the 2.9 ms transfer, so only layer 32's share is exposed
    assert got["after-prefill"] == pytest.approx(2 * IB_HOP_S + nbytes / IB_BW, rel=1e-9)
    assert got["layerwise"] == pytest.approx(2 * IB_HOP_S + nbytes / 32 / IB_BW, rel=1e-6)


# ---- DistServe: per-GPU goodput by simulate-and-bisect ----------------------------------
def _dview(simulate: Any) -> DeploymentView:
    # one GPU type, TP 1 and TP 2 (prefill / decode / colocated req/s predicted)
    configs = (
        ConfigView("a100-80gb", 1, 1, 4.0, 100_000, 4.0, 8.0, 3.0),
        ConfigView("a100-80gb", 2, 2, 8.0, 200_000, 10.0, 12.0, 6.0),
    )
    return DeploymentView(10.0, 500, 200, 1.0, 0.1, (("a100-80gb", 16),), configs,
                          simulate=simulate)  # fmt: skip


def test_distserve_on_its_predictor_maximises_per_gpu_goodput_per_phase() -> None:
    pol = DistServeDeployment(DistServeParams(search="estimate"), np.random.default_rng(0))
    specs = pol.deploy(_dview(None))
    # prefill per GPU: TP 1 4.0, TP 2 5.0 -> TP 2, ceil(10 / 10) = 1 instance;
    # decode per GPU: TP 1 8.0, TP 2 6.0 -> TP 1, ceil(10 / 8) = 2 instances
    assert sorted((s.role, s.tp) for s in specs) == [("decode", 1), ("decode", 1), ("prefill", 2)]


def test_distserve_bisects_shortlisted_configs_and_keeps_the_measured_best() -> None:
    calls: list[tuple[Any, float, SearchBudget]] = []

    def simulate(unit: Any, estimate: float, budget: SearchBudget) -> float:
        calls.append((unit, estimate, budget))
        measured = unit[0]
        # measured: TP-1 prefill reaches 6 req/s (predicted 4), TP-2 prefill 7 (predicted
        # 10); decode as predicted
        if measured.role == "prefill":
            return 6.0 if measured.tp == 1 else 7.0
        return 8.0 if measured.tp == 1 else 12.0

    params = DistServeParams(steps=3, partner_margin=2.0)
    pol = DistServeDeployment(params, np.random.default_rng(0))
    specs = pol.deploy(_dview(simulate))
    # two configs per phase simulated, each unit = the measured instance + partners of
    # the other phase's best predicted config carrying 2 x its predicted goodput
    assert len(calls) == 4 and all(c[2].steps == 3 for c in calls)
    pre_tp2 = next(c for c in calls if c[0][0].role == "prefill" and c[0][0].tp == 2)
    assert pre_tp2[1] == 10.0 and len(pre_tp2[0]) == 1 + 3  # ceil(2 x 10 / 8) TP-1 decodes
    # per GPU measured: prefill TP 1 6.0 > TP 2 3.5 -> TP 1, ceil(10 / 6) = 2 instances
    assert pol.ranked[("a100-80gb", "prefill")][0][1] == 6.0
    assert sorted((s.role, s.tp) for s in specs) == [
        ("decode", 1), ("decode", 1), ("prefill", 1), ("prefill", 1)
    ]  # fmt: skip
