"""The papers' directions of effect on short seeded runs of the shipped scenarios."""

from __future__ import annotations

from typing import Any

import hetsim


def _summary(path: str, **over: Any) -> Any:
    return hetsim.run(path, overrides=over).summary.iloc[0]


def test_cauchy_vs_colocated_ranking_flips_with_the_price_preset() -> None:
    # Cauchy (SoCC'25, abstract): up to +38.3% Tokens/USD vs the state of the art under
    # strict SLOs; the notes: rankings flip with the price preset. At 48 req/s, both
    # policies sized by the same predictor (all runs meet attainment >= 0.9). The runs
    # serve the same seeded requests, so $/h ranks steady-state Tokens/USD.
    # aws-ondemand: an L40S ($1.84/h) prefills ~10 req/s, an H100 ($8.22/h) ~36: per
    # $/h the L40S prefills 1.25x more, so Cauchy's combos mix L40S prefill with
    # A100/L40S decode and cost less than the colocated H100 pool ($24.66/h).
    # catalogue: the H100 ($2.49/h) costs only 1.34x an L40S ($1.861/h), so the L40S
    # loses and Cauchy keeps H100 P/D pairs, no cheaper than colocated H100s.
    rows = {
        (preset, dep): _summary(
            "scenarios/cauchy.yaml",
            **{
                "policies.deployment": dep,
                "workload.requests.rate_per_s": 48,
                "workload.price_preset": preset,
            },
        )
        for preset in ("aws-ondemand", "catalogue")
        for dep in ("cauchy", "colocated")
    }
    assert all(r.slo_attainment >= 0.9 for r in rows.values())
    aws_c, aws_h = rows[("aws-ondemand", "cauchy")], rows[("aws-ondemand", "colocated")]
    cat_c, cat_h = rows[("catalogue", "cauchy")], rows[("catalogue", "colocated")]
    assert ";" in aws_c.gpu_hours_by_type and aws_c.usd_per_hour < aws_h.usd_per_hour
    assert ";" not in cat_c.gpu_hours_by_type and cat_c.usd_per_hour >= cat_h.usd_per_hour


def test_disaggregation_removes_prefill_interference_from_tpot() -> None:
    # DistServe (OSDI'24): colocated decodes stall behind prefills; on the same two
    # A100s, past the load they were sized for, colocated TPOT p90 is several times
    # the disaggregated one (asserted: > 3x), which stays near one decode step.
    over = {"workload.requests.rate_per_s": 16, "workload.requests.num_requests": 600}
    colo = _summary(
        "scenarios/disaggregation.yaml",
        **over, **{"policies.deployment": {"name": "colocated", "gpu_type": "a100-80gb"}},
    )  # fmt: skip
    dis = _summary("scenarios/disaggregation.yaml", **over)
    assert colo.tpot_p90_s > 3 * dis.tpot_p90_s
    assert dis.tpot_p90_s < 0.025


def test_lud_speedup_shrinks_with_batch_size() -> None:
    # LUD (LREC-COLING'24): ~1.33x at small batch. Memory-bound small batches keep it
    # (asserted > 1.25x at batch 1); at batch 256 the 4 positions per sequence make the
    # step compute-bound and the gain disappears (asserted < 1x).
    def speedup(batch: int) -> float:
        over = {"workload.requests.num_requests": batch}
        std = _summary("scenarios/lud.yaml", **over, **{"workload.lud": None})
        lud = _summary("scenarios/lud.yaml", **over)
        return float(std.tpot_mean_s / lud.tpot_mean_s)

    assert speedup(1) > 1.25
    assert speedup(256) < 1.0
