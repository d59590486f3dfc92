"""The LeMix-style arbiter (schedulers/arbiter/lemix.py) on hand-built views, and in a run.

Hand numbers: rt_bound 5 keeps utilisation at most 1 - 1/5 = 0.8, so a GPU of goodput
10 req/s takes 8 req/s within the bound.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import hetsim
from hetsim.simulator.scenario import load_scenario
from hetsim.testing import arbiter_view, decide, make_policy
from hetsim.workloads.colocate.view import ArbiterDecision
from hetsim.workloads.training_jobs.workload import CheckpointCost, TrainingJobsWorkload

POINT = "colocate.arbiter"


def lemix(**params: Any) -> Any:
    return make_policy(POINT, "lemix", **{"period_s": 10, **params})


def rising(policy: Any, until_s: float, slope: float, **view: Any) -> ArbiterDecision:
    """Feed ``policy`` a load rising ``slope`` req/s per s every 10 s; the last decision."""
    d = ArbiterDecision()
    for t in np.arange(10.0, until_s + 1e-9, 10.0):
        d = decide(POINT, policy, arbiter_view(now_s=float(t), rate_per_s=slope * t, **view))
    return d


def test_an_idle_serving_fleet_lends_whole_gangs_to_waiting_jobs() -> None:
    idle: dict[str, Any] = {
        "now_s": 10.0,
        "rate_per_s": 0.0,
        "busy_gpus": 0,
        "free_gpus": 8,
        "gang_gpus": 4,
    }
    assert decide(POINT, lemix(), arbiter_view(waiting_jobs=2, **idle)) == ArbiterDecision(8)
    assert decide(POINT, lemix(), arbiter_view(waiting_jobs=1, **idle)) == ArbiterDecision(4)
    assert decide(POINT, lemix(), arbiter_view(waiting_jobs=0, **idle)) == ArbiterDecision()
    # 7 lendable: one whole gang, the odd three stay with serving
    assert decide(POINT, lemix(), arbiter_view(waiting_jobs=2, lendable_gpus=7, **idle)).lend == 4


def test_serving_keeps_what_its_response_time_bound_needs() -> None:
    view: dict[str, Any] = {"now_s": 10.0, "rate_per_s": 40.0, "busy_gpus": 2, "waiting_jobs": 10}
    # 40 req/s needs ceil(40 / 8) = 5 GPUs; 2 busy, so 3 of the 8 free stay: lend 5
    assert decide(POINT, lemix(), arbiter_view(**view)) == ArbiterDecision(lend=5)
    # a tighter bound (2x: utilisation 0.5, 5 req/s per GPU) keeps ceil(40 / 5) - 2 = 6
    assert decide(POINT, lemix(rt_bound=2), arbiter_view(**view)) == ArbiterDecision(lend=2)
    # lending is capped by the jobs waiting (one gang each)
    assert decide(POINT, lemix(), arbiter_view(**{**view, "waiting_jobs": 2})).lend == 2


def test_rising_serving_load_gives_gpus_back_in_whole_gangs() -> None:
    lent: dict[str, Any] = {
        "busy_gpus": 2,
        "free_gpus": 0,
        "lent_gpus": 8,
        "lendable_gpus": 0,
        "gang_gpus": 4,
    }
    reclaimed = []
    for rate in (10.0, 30.0, 50.0, 80.0):
        d = decide(POINT, lemix(), arbiter_view(now_s=10.0, rate_per_s=rate, **lent))
        assert d.lend == 0 and d.reclaim % 4 == 0
        reclaimed.append(d.reclaim)
    # 10 req/s: 2 GPUs, held; 30: 4 (2 short: a gang); 50: 7 (5 short: two); 80: 10
    assert reclaimed == [0, 4, 8, 8]
    # GPUs already on their way back count: none more asked for
    d = decide(POINT, lemix(), arbiter_view(now_s=10.0, rate_per_s=30.0, returning_gpus=4,
                                            **lent))  # fmt: skip
    assert d == ArbiterDecision()


def test_a_rising_trend_reclaims_before_the_load_arrives() -> None:
    # 0.5 req/s per s: at 70 s the estimate is 35 req/s (5 GPUs, 3 more than busy, all free);
    # a reclaim takes checkpoint 100 s + a period, by then 35 + 0.5 x 110 = 90 req/s: 12 GPUs
    view: dict[str, Any] = {"busy_gpus": 2, "free_gpus": 3, "lent_gpus": 8, "lendable_gpus": 0,
            "gang_gpus": 4, "checkpoint_s": 100.0}  # fmt: skip
    assert rising(lemix(), 70.0, 0.5, **view).reclaim == 8
    # a window the period does not divide is trusted too, once a window has passed
    assert rising(lemix(trend_window_s=45), 70.0, 0.5, **view).reclaim == 8
    assert rising(lemix(trend_window_s=90), 70.0, 0.5, **view) == ArbiterDecision()
    # the same estimate without a trend (a single decision) holds
    d = decide(POINT, lemix(), arbiter_view(now_s=70.0, rate_per_s=35.0, **view))
    assert d == ArbiterDecision()


@pytest.mark.parametrize(("restore_s", "checkpoint_s", "lend"),
                         [(0.0, 0.0, 8), (100.0, 100.0, 4), (1000.0, 100.0, 0)])  # fmt: skip
def test_a_gang_is_lent_only_where_its_predicted_hold_pays_for_the_move(
    restore_s: float, checkpoint_s: float, lend: int
) -> None:
    # load rising 0.1 req/s per s, 7 req/s at 70 s; lending gang 1 leaves 6 GPUs (48 req/s:
    # (48 - 7) / 0.1 = 410 s away), gang 2 leaves 2 (16 req/s: 90 s away), each less the
    # reclaim lead (checkpoint + 10 s), against payback x (restore + checkpoint)
    view: dict[str, Any] = {"busy_gpus": 2, "free_gpus": 8, "gang_gpus": 4, "waiting_jobs": 2,
            "restore_s": restore_s, "checkpoint_s": checkpoint_s}  # fmt: skip
    assert rising(lemix(), 70.0, 0.1, **view) == ArbiterDecision(lend=lend)
    # payback 0 lends whatever the bound allows
    assert rising(lemix(payback=0.0), 70.0, 0.1, **view).lend >= lend


def test_no_serving_estimate_moves_nothing() -> None:
    assert decide(POINT, lemix(), arbiter_view(rate_per_s=None)) == ArbiterDecision()
    assert decide(POINT, lemix(), arbiter_view(rps_per_gpu=0.0)) == ArbiterDecision()


def test_decisions_stay_within_what_the_view_allows() -> None:
    rng = np.random.default_rng(7)
    policy = lemix()
    for k in range(500):
        gang = int(rng.integers(1, 5))
        lent = int(rng.integers(0, 4)) * gang
        free = int(rng.integers(0, 12))
        v = arbiter_view(
            now_s=10.0 * (k + 1), rate_per_s=float(rng.uniform(0, 150)),
            busy_gpus=int(rng.integers(0, 10)), free_gpus=free,
            rps_per_gpu=float(rng.uniform(5, 30)), lent_gpus=lent,
            returning_gpus=int(rng.integers(0, lent + 1)),
            lendable_gpus=int(rng.integers(0, free + 1)), waiting_jobs=int(rng.integers(0, 4)),
            gang_gpus=gang, restore_s=float(rng.uniform(0, 300)),
            checkpoint_s=float(rng.uniform(0, 300)),
        )  # fmt: skip
        d = decide(POINT, policy, v)
        assert d.lend >= 0 and d.reclaim >= 0 and not (d.lend and d.reclaim)
        assert d.lend <= v.lendable_gpus and d.reclaim <= v.lent_gpus - v.returning_gpus
        assert d.lend == 0 or ((v.lent_gpus + d.lend) % gang == 0 and v.harvest_waiting_jobs)


def test_the_same_views_give_the_same_decisions() -> None:
    views = [arbiter_view(now_s=10.0 * k, rate_per_s=20.0 + 7.0 * np.sin(k), gang_gpus=4,
                          waiting_jobs=2, restore_s=50.0, checkpoint_s=20.0)
             for k in range(1, 40)]  # fmt: skip
    a, b = lemix(), lemix()
    assert [decide(POINT, a, v) for v in views] == [decide(POINT, b, v) for v in views]


def test_the_predicted_move_is_the_checkpoint_profile() -> None:
    ck = CheckpointCost(storage_Bps=2e9, restart_s=30.0)
    w = SimpleNamespace(params=SimpleNamespace(checkpoint=ck), state_bytes=128e9)
    restore_s, checkpoint_s = TrainingJobsWorkload.predicted_move_s(w)  # type: ignore[arg-type]
    assert restore_s == pytest.approx(30.0 + 64.0) and checkpoint_s == pytest.approx(64.0)


@pytest.fixture(scope="module")
def small_runs() -> list[Any]:
    sc = load_scenario("colocate").with_overrides(
        {"policies.arbiter": {"name": "lemix", "period_s": 10},
         "workloads.serving.requests.num_requests": 3000, "until_s": 200},
        keep_sweep=False,
    )  # fmt: skip
    return [hetsim.run(sc), hetsim.run(sc)]


def test_a_run_is_deterministic_and_lends_whole_gangs(small_runs: list[Any]) -> None:
    a, b = small_runs
    assert a.summary_row == b.summary_row
    arb = a.tables["arbiter"]
    assert (arb["lend"] > 0).any()
    assert ((arb["lent_gpus"] + arb["lend"]) % 4 == 0).all()
    owners = a.tables["device_owners"].sort_values(["device", "start_s"])
    for _, g in owners.groupby("device"):
        assert (g["start_s"].to_numpy()[1:] >= g["end_s"].to_numpy()[:-1]).all()


# ---- the deferral mechanism (workloads/colocate/deferral.py) ------------------------------
class _Harvester:
    def __init__(self) -> None:
        self.paused: set[str] = set()

    def set_paused(self, devices: set[str]) -> None:
        self.paused = set(devices)


class _Recorder:
    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def table(self, name: str, columns: Any) -> Any:
        return SimpleNamespace(append=lambda *r: self.rows.append(r))


@pytest.mark.parametrize(("model", "alone"), [("time-sliced", 1.0), ("partition", 2.0)])
def test_a_pause_prices_serving_as_alone_only_where_the_split_is_not_hard(
    model: str, alone: float
) -> None:
    from hetsim.workloads.colocate.deferral import SharedDeferral
    from hetsim.workloads.colocate.sharing import _ScaledTransformer

    shared: dict[str, Any] = {f"a/gpu{i}": ("serving", "training") for i in range(4)}
    factors = {"serving": {d: 2.0 for d in shared}, "training": {d: 2.0 for d in shared}}
    sim = SimpleNamespace(now=5.0, recorder=_Recorder())
    h = _Harvester()
    d = SharedDeferral(sim, model, shared, factors, "serving", {"training": h})
    price = _ScaledTransformer(SimpleNamespace(step_s=lambda: 0.5),
                               lambda: max(factors["serving"][x] for x in ("a/gpu3",)))  # fmt: skip
    assert d.allowed == 4 and price.step_s() == 1.0 and d.slowdowns() == (2.0, alone)
    d.set(2)  # training keeps gpu0-1, pauses on gpu2-3
    assert h.paused == {"a/gpu2", "a/gpu3"} and price.step_s() == 0.5 * alone
    assert factors["serving"]["a/gpu0"] == 2.0 and sim.recorder.rows == [(5.0, 2, 2)]
    d.set(2)  # no change: no row
    d.set(9)  # clipped to every shared GPU
    assert h.paused == set() and price.step_s() == 1.0 and len(sim.recorder.rows) == 2


def test_more_shared_training_under_a_looser_response_time_bound() -> None:
    # 12 serving GPUs, 8 shared at slowdown 2 (0.5 of a GPU with training running),
    # goodput 10 req/s per GPU; k GPUs training: e = 12 - k / 2, bound n / rt_bound
    view: dict[str, Any] = {"now_s": 10.0, "busy_gpus": 6, "free_gpus": 6, "gang_gpus": 4,
            "lendable_gpus": 0}  # fmt: skip
    shared: dict[str, Any] = {"shared_gpus": 8, "shared_train_gpus": 8, "shared_slowdown": 2.0}

    def k(rate: float, bound: float) -> int | None:
        v = arbiter_view(rate_per_s=rate, **view, **shared)
        return decide(POINT, lemix(rt_bound=bound), v).shared_train_gpus

    # bound 5: k=8 while rate <= 10 x (8 - 2.4) = 56; k=4 up to 10 x (10 - 2.4) = 76
    assert [k(r, 5.0) for r in (50.0, 60.0, 80.0)] == [8, 4, 0]
    # bound 2: 10 x (8 - 6) = 20 and 10 x (10 - 6) = 40
    assert [k(r, 2.0) for r in (15.0, 30.0, 50.0)] == [8, 4, 0]
    # a pause that frees nothing for serving (partition: the same slowdown) never happens
    hard = {**shared, "shared_paused_slowdown": 2.0}
    assert (
        decide(POINT, lemix(), arbiter_view(rate_per_s=80.0, **view, **hard)).shared_train_gpus == 8
    )
    # no shared GPUs: the decision leaves the sharing alone
    assert decide(POINT, lemix(), arbiter_view(rate_per_s=50.0, **view)).shared_train_gpus is None


@pytest.fixture(scope="module")
def shared_run() -> Any:
    sc = load_scenario("colocate").with_overrides(
        {"policies.arbiter": {"name": "lemix", "period_s": 10, "rt_bound": 2},
         "sharing": {"model": "time-sliced"}, "workloads.training.devices": ["h100/*", "a100/*"],
         "workloads.serving.requests.num_requests": 20000, "until_s": 300},
        keep_sweep=False,
    )  # fmt: skip
    return hetsim.run(sc)


def test_paused_training_keeps_its_memory_and_pays_no_checkpoint(shared_run: Any) -> None:
    ev = shared_run.tables["training_job_events"]
    assert (ev["event"] == "pause").any()
    training = next(r for r in shared_run.rows if r["workload"] == "training")
    assert training["job_preemptions"] == 0 and training["checkpoint_s"] == 0
    deferral = shared_run.tables["shared_deferral"]
    assert set(deferral["shared_train_gpus"]) <= {0, 4, 8}
    assert (deferral["shared_train_gpus"] + deferral["paused_gpus"] == 8).all()
