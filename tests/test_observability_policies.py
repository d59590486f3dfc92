"""Observability policies on hand-built views (no simulation), and the KS statistic
against scipy's as an oracle."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import ks_2samp

from hetsim.schedulers.observability.evict_replace import EvictReplace, EvictReplaceParams
from hetsim.schedulers.observability.fixed_interval import FixedInterval, FixedIntervalParams
from hetsim.schedulers.observability.kaiops import KaiopsDetector, KaiopsParams
from hetsim.schedulers.observability.kair import KairDetector, KairParams
from hetsim.schedulers.observability.stats import (
    ks_2samp_statistic,
    ks_critical,
    ks_vs_pooled_others,
)
from hetsim.schedulers.observability.threshold import ThresholdDetector, ThresholdParams
from hetsim.schedulers.observability.young_daly import YoungDaly, YoungDalyParams
from hetsim.schedulers.observability.zscore import ZScoreDetector, ZScoreParams
from hetsim.workloads.observability.view import (
    CheckpointView,
    Finding,
    MitigationView,
    OracleEventView,
    OracleFault,
    OracleWindowView,
    WindowView,
)  # fmt: skip

OPS = ("dataload", "forward", "backward", "send")
RNG = np.random.default_rng


def test_ks_matches_scipy_on_fixed_samples() -> None:
    a = np.array([0.1, 0.4, 0.4, 0.7, 1.3, 2.0])
    b = np.array([0.2, 0.4, 0.9, 1.0, 1.1, 3.5, 4.0, 0.4])
    assert ks_2samp_statistic(a, b) == pytest.approx(ks_2samp(a, b).statistic, abs=1e-15)
    # by hand: at x = 0.7, F_a = 4/6, F_b = 3/8 -> 0.2917 is the supremum
    assert ks_2samp_statistic(a, b) == pytest.approx(4 / 6 - 3 / 8)


def test_ks_vs_pooled_others_matches_scipy_with_ties() -> None:
    x = RNG(3).integers(0, 12, size=(12, 9)).astype(float)  # many ties
    d = ks_vs_pooled_others(x)
    for r in range(len(x)):
        ref = np.delete(x, r, axis=0).ravel()
        assert d[r] == pytest.approx(ks_2samp(x[r], ref).statistic, abs=1e-12)


def test_ks_critical_value_at_one_percent() -> None:
    # c(0.01) = sqrt(-ln(0.005) / 2) = 1.6276; n = m = 100 -> 1.6276 * sqrt(0.02) = 0.2302
    assert ks_critical(0.01, 100, 100) == pytest.approx(0.23018, abs=1e-4)


def window(op_s: np.ndarray) -> WindowView:
    """A view from an ops x ranks x iterations array; entries are compute sums."""
    entry = op_s[:3].sum(axis=0)
    comm = op_s[3].max(axis=0)
    it = entry.max(axis=0) + comm
    return WindowView(100.0, 0, 0, float(it.sum()), OPS, OPS[:3], op_s, entry, comm, it)


def clean(ranks: int = 32, iters: int = 40, seed: int = 0) -> np.ndarray:
    base = np.array([0.02, 0.15, 0.30, 0.20])[:, None, None]
    return base * np.exp(0.02 * RNG(seed).standard_normal((4, ranks, iters)))


POOLED = KairParams(baseline="pooled")  # one window, no history: the spatial test


def test_kair_temporal_ignores_a_persistent_offset_and_finds_a_slowdown() -> None:
    # rank 3 is healthy but always 20 % slower; rank 5 slows down by 30 % in window 4.
    # Against its own history rank 3 is unremarkable; against the pool it is a straggler.
    temporal, pooled = KairDetector(KairParams(), RNG(0)), KairDetector(POOLED, RNG(0))
    for w in range(5):
        op = clean(seed=w)
        op[:3, 3] *= 1.2
        if w == 4:
            op[1:3, 5] *= 1.3
        found_t = [f.rank for f in temporal.detect(window(op))]
        found_p = [f.rank for f in pooled.detect(window(op))]
        assert found_t == ([5] if w == 4 else []), (w, found_t)  # none in the first window
        assert 3 in found_p
    assert found_p[:2] == [3, 5] or found_p[:2] == [5, 3]


def test_kair_temporal_keeps_flagged_windows_out_of_the_history() -> None:
    # a rank slow for several windows stays flagged: its slow windows never become its
    # baseline
    det = KairDetector(KairParams(history_windows=2), RNG(0))
    for w in range(8):
        op = clean(seed=w)
        if w >= 2:
            op[1:3, 7] *= 1.3
        found = [f.rank for f in det.detect(window(op))]
        assert found == ([7] if w >= 2 else []), (w, found)


def test_kair_finds_a_slow_gpu_and_calls_it_compute() -> None:
    op = clean()
    op[1:3, 5] *= 1.3  # rank 5: forward and backward 30 % slower
    (f,) = KairDetector(POOLED, RNG(0)).detect(window(op))
    assert (f.rank, f.cause) == (5, "compute")
    assert f.operator in ("forward", "backward")


def test_kair_finds_a_slow_link_and_calls_it_communication() -> None:
    op = clean()
    op[3, 9] *= 1.4  # rank 9's own link time 40 % longer, compute unchanged: entries aligned
    (f,) = KairDetector(POOLED, RNG(0)).detect(window(op))
    assert (f.rank, f.cause, f.operator) == (9, "communication", "send")


def test_kair_ignores_one_hiccup_that_fools_the_zscore() -> None:
    op = clean()
    op[0, 7, 3] += 3.0  # one 3 s data-loader hiccup on rank 7: mean +75 ms, one sample of 40
    assert KairDetector(POOLED, RNG(0)).detect(window(op)) == ()
    assert [f.rank for f in ZScoreDetector(ZScoreParams(), RNG(0)).detect(window(op))] == [7]


def test_threshold_on_hand_values() -> None:
    op = np.zeros((4, 4, 2))
    op[1] = [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.2, 1.2]]  # medians 1.0; rank 3 at 1.2
    found = ThresholdDetector(ThresholdParams(factor=1.1), RNG(0)).detect(window(op))
    assert [f[:3] for f in found] == [(3, "unknown", "iteration")]
    assert found[0].score == pytest.approx(1.2)
    assert ThresholdDetector(ThresholdParams(factor=1.25), RNG(0)).detect(window(op)) == ()


def test_zscore_on_hand_values() -> None:
    # 10 ranks, means 1 except rank 0 at 2: mean 1.1, std 0.3 -> z = 3.0 (not > 3), 3.0 > 2.9
    op = np.zeros((4, 10, 1))
    op[1, :, 0] = 1.0
    op[1, 0, 0] = 2.0
    assert ZScoreDetector(ZScoreParams(z=3.0), RNG(0)).detect(window(op)) == ()
    (f,) = ZScoreDetector(ZScoreParams(z=2.9), RNG(0)).detect(window(op))
    assert (f.rank, f.cause, f.operator) == (0, "compute", "forward")


def truth(fault_id: int, age_s: float, cause: str = "compute") -> OracleFault:
    return OracleFault(fault_id, "fail-slow", "gpu-slowdown", cause, 4, 0.0, age_s)


def test_kaiops_reports_after_its_delay_with_certain_detection() -> None:
    params = KaiopsParams(tpr={"fail-slow": 1.0}, delay_s={"fail-slow": 60.0},
                          rca_accuracy=1.0, false_alarms_per_gpu_day=0.0)  # fmt: skip
    det = KaiopsDetector(params, RNG(0))
    assert det.detect(OracleWindowView(window(clean()), (truth(1, 59.0),))) == ()
    (f,) = det.detect(OracleWindowView(window(clean()), (truth(1, 61.0),)))
    assert (f.rank, f.cause) == (4, "compute")


def test_kaiops_detection_rate_and_rca_accuracy() -> None:
    params = KaiopsParams(tpr={"fail-slow": 0.7}, rca_accuracy=0.8)
    det = KaiopsDetector(params, RNG(1))
    fates = [
        det.classify(OracleEventView(0.0, truth(i, 0.0, "communication"))) for i in range(20000)
    ]
    found = [d for d in fates if d.detected]
    # binomial: sd of a proportion over 20,000 is <= 0.0035; 4 sd tolerance
    assert len(found) / len(fates) == pytest.approx(0.7, abs=0.014)
    right = sum(d.cause == "communication" for d in fates) / len(fates)
    assert right == pytest.approx(0.8, abs=0.014)


def test_kaiops_partial_tables_keep_the_category_fallbacks() -> None:
    # a scenario naming one kind keeps the fail-stop / fail-slow fallbacks of the defaults
    params = KaiopsParams(tpr={"gpu-slowdown": 0.5}, delay_s={"fail-slow": 7.0})
    defaults = KaiopsParams()
    assert params.tpr == {**defaults.tpr, "gpu-slowdown": 0.5}
    assert params.delay_s["fail-stop"] == defaults.delay_s["fail-stop"]
    stop = OracleFault(0, "fail-stop", "faulty-gpu", "gpu", 3, 0.0, 0.0)
    det = KaiopsDetector(params, RNG(0))
    assert det.classify(OracleEventView(0.0, stop)).delay_s == defaults.delay_s["fail-stop"]
    assert det.classify(OracleEventView(0.0, truth(1, 0.0))).delay_s == 7.0


def test_young_daly_by_hand() -> None:
    view = CheckpointView(checkpoint_s=50.0, recovery_s=0.0, mtbf_s=10_000.0, iteration_s=1.0)
    # Young: sqrt(2 * 50 * 10,000) = 1000
    assert YoungDaly(YoungDalyParams(formula="young"), RNG(0)).interval_s(view) == pytest.approx(
        1000
    )
    # Daly: x = 50 / 20,000 = 0.0025; 1000 (1 + 0.05/3 + 0.0025/9) - 50 = 966.944
    assert YoungDaly(YoungDalyParams(), RNG(0)).interval_s(view) == pytest.approx(966.944, abs=1e-3)
    assert FixedInterval(FixedIntervalParams(interval_s=42), RNG(0)).interval_s(view) == 42


def test_evict_replace_respects_min_slowdown() -> None:
    f = Finding(1, "compute", "forward", 1.0)
    pol = EvictReplace(EvictReplaceParams(min_slowdown=1.2), RNG(0))
    assert pol.decide(MitigationView(0.0, f, 1.1, 0.0, 600.0, 60.0)) == "ignore"
    assert pol.decide(MitigationView(0.0, f, 1.3, 0.0, 600.0, 60.0)) == "evict"


def test_kaiops_telemetry_reads_telemetry_against_each_ranks_history() -> None:
    from hetsim.schedulers.observability.kaiops_telemetry import (
        KaiopsTelemetryDetector,
        KaiopsTelemetryParams,
    )

    # rank 3 always 20 % slower (healthy); a 3-s hiccup on rank 7 in window 2; rank 5's
    # forward and backward 30 % slower from window 3; rank 9's own link 40 % slower from
    # window 4 (entries aligned: communication)
    det = KaiopsTelemetryDetector(KaiopsTelemetryParams(), RNG(0))
    assert not getattr(det, "oracle", False)  # reads the telemetry, not the faults
    seen = []
    for w in range(6):
        op = clean(seed=w)
        op[:3, 3] *= 1.2
        if w == 2:
            op[0, 7, 3] += 3.0
        if w >= 3:
            op[1:3, 5] *= 1.3
        if w >= 4:
            op[3, 9] *= 1.4
        seen.append({f.rank: f.cause for f in det.detect(window(op))})
    assert seen[:3] == [{}, {}, {}]  # first window: history only; offset and hiccup ignored
    assert seen[3] == {5: "compute"}
    assert seen[4] == seen[5] == {5: "compute", 9: "communication"}
