"""The papers' directions of effect on short seeded runs of the shipped scenarios."""

from __future__ import annotations

from typing import Any

import pytest

import hetsim


def _summary(path: str, **over: Any) -> Any:
    return hetsim.run(path, overrides=over).summary.iloc[0]


def test_cauchy_vs_colocated_ranking_flips_with_the_price_preset() -> None:
    # Cauchy (SoCC'25, abstract): up to +38.3% Tokens/USD vs the state of the art under
    # strict SLOs; the notes: rankings flip with the price preset. At 16 req/s, both
    # policies sized by the same analytic estimator (workload.sizing_estimator; all runs
    # meet attainment >= 0.9; other rates: the test below). The runs
    # serve the same seeded requests, so $/h ranks steady-state Tokens/USD.
    # aws-ondemand: an L40S costs $1.84/h against $8.22/h for an H100, so Cauchy's
    # L40S prefill/decode combos undercut the colocated H100 pool; catalogue prices
    # (H100 $2.49/h, L40S $1.861/h) make the L40S lose and Cauchy keeps H100s, no
    # cheaper than colocated. (At 48 req/s under the kernel-level cost model Cauchy's
    # mixed-type combos cost more than colocated H100s even under aws-ondemand:
    # docs/serving.md.)
    rows = {
        (preset, dep): _summary(
            "scenarios/cauchy.yaml",
            **{
                "policies.deployment": dep,
                "workload.requests.rate_per_s": 16,
                "workload.price_preset": preset,
            },
        )
        for preset in ("aws-ondemand", "catalogue")
        for dep in ("cauchy", "colocated")
    }
    assert all(r.slo_attainment >= 0.9 for r in rows.values())
    aws_c, aws_h = rows[("aws-ondemand", "cauchy")], rows[("aws-ondemand", "colocated")]
    cat_c, cat_h = rows[("catalogue", "cauchy")], rows[("catalogue", "colocated")]
    assert "l40s" in aws_c.gpu_hours_by_type and aws_c.usd_per_hour < aws_h.usd_per_hour
    assert "l40s" not in cat_c.gpu_hours_by_type and cat_c.usd_per_hour >= cat_h.usd_per_hour


@pytest.mark.slow
def test_cauchy_against_every_baseline_over_rates_with_one_estimator() -> None:
    # Cauchy (SoCC'25): up to +38.3% Tokens/USD. Every policy sized by the same analytic
    # estimator (workload.sizing_estimator), aws-ondemand, seeds 1-3 (each a different
    # held-out sizing sample). The runs at one rate serve the same requests, so $/h ranks
    # steady-state Tokens/USD. What holds on every seed: all meet attainment 0.9; at 16
    # req/s Cauchy's L40S combos are no costlier than any baseline (a tie allowed); at 32
    # req/s a homogeneous or Melange pool is strictly cheaper than Cauchy's combos (the
    # headline does not reproduce there: docs/serving.md). At 8 req/s the ranking
    # depends on the sizing sample (a P/D pair is the smallest unit) and is not asserted.
    deps = ("cauchy", "distserve", "colocated", "melange")
    for seed in (1, 2, 3):
        for rate in (16, 32):
            rows = {
                d: _summary("scenarios/cauchy.yaml", **{"seed": seed, "policies.deployment": d,
                                                        "workload.requests.rate_per_s": rate})
                for d in deps
            }  # fmt: skip
            assert all(r.slo_attainment >= 0.9 for r in rows.values()), (seed, rate)
            best = min(rows[d].usd_per_hour for d in deps[1:])
            if rate == 16:
                assert rows["cauchy"].usd_per_hour <= best + 1e-6, seed  # ties: rounding
            else:
                assert rows["cauchy"].usd_per_hour > best, seed


def test_disaggregation_removes_prefill_interference_from_tpot() -> None:
    # DistServe (OSDI'24): colocated decodes stall behind prefills; on the same two
    # A100s, past the load they were sized for, colocated TPOT p90 is several times
    # the disaggregated one (asserted: > 3x), which stays within 3x of one request's
    # decode step alone (Llama-3-8B on an A100, by hand, kernel by kernel: 10.6 ms;
    # the decode instance batches tens of sequences, which reads more KV per step).
    from tests import kernel_hand as hand

    over = {"workload.requests.rate_per_s": 16, "workload.requests.num_requests": 600}
    colo = _summary(
        "scenarios/disaggregation.yaml",
        **over, **{"policies.deployment": {"name": "colocated", "gpu_type": "a100-80gb"}},
    )  # fmt: skip
    dis = _summary("scenarios/disaggregation.yaml", **over)
    assert colo.tpot_p90_s > 3 * dis.tpot_p90_s
    assert dis.tpot_p90_s < 3 * hand.decode_s(hand.A100, hand.LLAMA3_8B, 1, 1000)


def test_lud_speedup_at_batch_one_is_the_expected_accepted_tokens_on_every_seed() -> None:
    # LUD with a fixed acceptance p = 0.40 (the low end of Spec-Bench's published range
    # for decoders without a draft model; workloads/serving/params.py LudConfig) and
    # K = 4: E[A] = (1 - p^4) / (1 - p) = 1.624 tokens per step by closed form. At batch
    # 1 a decode step is memory-bound (16 GB of weights against 3 more tokens' 4.8e10
    # FLOPs: under 3% more time on an A100 by hand roofline), so TPOT falls by E[A].
    # Tolerance 10% on every seed: ~315 steps per request leave a per-step sampling sd
    # of the mean accepted count of ~3%, plus the extra positions' cost.
    expected = (1 - 0.4**4) / (1 - 0.4)
    for seed in (1, 2, 3, 4):
        over = {"seed": seed, "workload.requests.num_requests": 1}
        std = _summary("scenarios/lud.yaml", **over, **{"workload.lud": None})
        lud = _summary("scenarios/lud.yaml", **over, **{"workload.lud.accept_concentration": None})
        speedup = float(std.tpot_mean_s / lud.tpot_mean_s)
        assert abs(speedup / expected - 1) < 0.10, (seed, speedup)


def test_lud_speedup_shrinks_with_batch_size() -> None:
    # LUD (LREC-COLING'24): ~1.33x at small batch (abstract). With the shipped per-request
    # Beta draws of acceptance (mean 0.40, concentration 10), on every one of seeds 1-4:
    # 16 requests at once keep a gain (asserted > 1.2x: the mean of E[A] over 16 draws
    # has an sd of ~5%), and at batch 256 the 4 positions per sequence make the step
    # compute-bound and the gain disappears (asserted < 1x).
    def speedup(batch: int, seed: int) -> float:
        over = {"seed": seed, "workload.requests.num_requests": batch}
        std = _summary("scenarios/lud.yaml", **over, **{"workload.lud": None})
        lud = _summary("scenarios/lud.yaml", **over)
        return float(std.tpot_mean_s / lud.tpot_mean_s)

    for seed in (1, 2, 3, 4):
        assert speedup(16, seed) > 1.2, seed
        assert speedup(256, seed) < 1.0, seed
