"""Cluster faults in a multi-workload run (workloads.colocate.faults): a training gang
rolls back to its last written checkpoint, a serving instance's requests are retried and
all accounted, the fault stream is seeded, no faults block changes nothing, and bad
input is one line naming the field."""

from __future__ import annotations

import copy
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import hetsim
from hetsim.simulator.errors import ScenarioError
from hetsim.simulator.scenario import from_dict
from hetsim.workloads.colocate.faults import REPAIR, FaultsConfig
from hetsim.workloads.observability.faults import LLAMA3_COUNTS, llama3_rates_per_gpu_day
from tests.cli_helpers import TINY, cli_error

STEPS = 10_000  # longer than any run here: until_s ends it (training is cut, not done)
INTERVAL = 10
RESTART_S = 5.0
STORAGE_BPS = 1e12


def _raw(until_s: float = 100.0) -> dict[str, Any]:
    """Training alone on node ``train`` (no CPU: a restore is restart + storage read, a
    checkpoint write its storage time, no copies), serving on ``serve`` and ``spare``."""
    return {
        "name": "faults-test", "seed": 0, "until_s": until_s,
        "cluster": {"nodes": [
            {"name": "train", "devices": {"gpu": {"type": "h100-sxm", "count": 4}}},
            {"name": "serve", "devices": {"gpu": {"type": "l40s", "count": 2}}},
            {"name": "spare", "devices": {"gpu": {"type": "l40s", "count": 2}}},
        ]},
        "workloads": {
            "serving": {
                "kind": "serving", "devices": ["serve/*", "spare/*"], "model": "llama-3-8b",
                "requests": {"num_requests": 300, "rate_per_s": 5}, "tp_options": [1],
                "deployment_rate_per_s": 20,
                "policies": {"deployment": "colocated", "scaling": "none"},
            },
            "training": {
                "kind": "training-jobs", "devices": ["train/*"], "model": "llama-3-8b",
                "num_jobs": 1, "steps_per_job": STEPS, "gpus_per_job": 4,
                "checkpoint": {"storage_Bps": STORAGE_BPS, "restart_s": RESTART_S,
                               "interval_steps": INTERVAL},
            },
        },
        "policies": {"arbiter": "static"},
        "outputs": {"spans": False},
    }  # fmt: skip


def _rows(res: Any) -> dict[str, dict[str, Any]]:
    return {r["workload"]: r for r in res.rows}


def _priced() -> tuple[float, float]:
    """The gang's step time (the cost model the workload prices it with) and the job's
    checkpoint bytes."""
    from hetsim.simulator.engine import Simulation
    from hetsim.simulator.runner import build_colocated

    built = build_colocated(from_dict(_raw()), Simulation(0, record_spans=False))
    w = built.members["training"]
    return float(w.step_s["h100-sxm"][0]), float(w.state_bytes)


def test_a_training_node_fault_loses_the_steps_since_the_last_written_checkpoint() -> None:
    step_s, state_bytes = _priced()
    read_s = write_s = state_bytes / STORAGE_BPS
    run_start = RESTART_S + read_s
    t_fault = run_start + 37.5 * step_s
    raw = _raw()
    raw["faults"] = {"fail_stop": {"kind": "none"}, "repair_s": 20.0,
                     "at": [{"at_s": t_fault, "node": "train"}]}  # fmt: skip
    res = hetsim.run(from_dict(raw))
    # by hand: 37 whole steps run; checkpoints at steps 10, 20, 30 were written (each
    # write_s after its step), so 7 steps are lost, plus the half step in flight
    ran = int((t_fault - run_start) // step_s)
    saved = max(k for k in range(0, ran + 1, INTERVAL)
                if k == 0 or run_start + k * step_s + write_s <= t_fault)  # fmt: skip
    assert (ran, saved) == (37, 30)
    tr = _rows(res)["training"]
    assert tr["fault_steps_lost"] == ran - saved == 7
    assert tr["job_failures"] == 1
    assert tr["fault_tokens_lost"] == 7 * 4 * 4096
    assert tr["fault_gpu_s_lost"] == pytest.approx((7 + 0.5) * step_s * 4, rel=1e-6)
    faults = res.tables["faults"]
    assert list(faults["workload"]) == ["training"] and list(faults["steps_lost"]) == [7]
    # serving never saw it
    assert _rows(res)["serving"]["fault_instances_lost"] == 0
    # the node was under repair for 20 s, owned by no workload meanwhile
    owners = res.tables["device_owners"]
    rep = owners[owners["owner"] == REPAIR]
    assert len(rep) == 4
    assert np.allclose(rep["start_s"], t_fault) and np.allclose(rep["end_s"], t_fault + 20.0)
    # after repair the job restarts (a restore) from step 30 and trains on
    events = res.tables["training_job_events"]
    starts = events[events["event"] == "start"]
    assert len(starts) == 2 and starts["time_s"].iloc[1] == pytest.approx(t_fault + 20.0)
    assert _rows(res)["cluster"]["repair_gpu_hours"] == pytest.approx(4 * 20.0 / 3600)
    # under repair, a device's idle floor is charged to no workload
    assert _rows(res)["cluster"]["energy_unowned_J"] > 0


def test_a_serving_node_fault_retries_its_requests_and_accounts_every_one() -> None:
    raw = _raw(until_s=400.0)
    raw["faults"] = {"fail_stop": {"kind": "none"}, "repair_s": 30.0,
                     "at": [{"at_s": 20.0, "node": "serve"}]}  # fmt: skip
    res = hetsim.run(from_dict(raw))
    sv = _rows(res)["serving"]
    assert sv["requests"] == 300  # every request completed (the run's check passed)
    assert sv["fault_instances_lost"] == 2 and sv["fault_requests_waiting"] == 0
    faults = res.tables["faults"]
    assert faults["requests_retried"].sum() == sv["fault_requests_retried"] > 0
    inst = res.tables["instances"]
    lost = inst[inst["devices"].str.startswith("serve/")]
    assert np.allclose(lost["released_s"], 20.0)  # lost at the fault, never back
    req = res.tables["requests"]
    assert np.isfinite(req["finish_s"]).all()
    # every request finishing after the fault finished on a surviving instance
    late = req[req["finish_s"] > 20.0]
    assert not late["entry_instance"].isin(lost["instance"]).any()


@pytest.mark.filterwarnings("ignore:faults-test. serving. overloaded")
def test_with_every_serving_gpu_down_requests_wait_and_are_accounted() -> None:
    raw = _raw(until_s=60.0)
    raw["faults"] = {
        "fail_stop": {"kind": "none"},
        "repair_s": 1000.0,
        "at": [{"at_s": 20.0, "node": "serve"}, {"at_s": 20.0, "node": "spare"}],
    }
    res = hetsim.run(from_dict(raw))
    sv = _rows(res)["serving"]
    req = res.tables["requests"]
    arrived = int((req["arrival_s"] <= 60.0).sum())
    # completed + waiting for an instance = arrived (nothing is held by a lost instance)
    assert sv["requests"] + sv["fault_requests_waiting"] == arrived
    assert sv["fault_requests_waiting"] > 0
    assert sv["fault_replica_s_lost"] == pytest.approx(3 * 40.0)


@pytest.mark.filterwarnings("ignore:faults-test. serving. overloaded")  # the burst after repair
def test_repaired_serving_gpus_are_scaled_onto_and_the_waiting_requests_served() -> None:
    raw = _raw(until_s=600.0)
    raw["workloads"]["serving"]["policies"]["scaling"] = {"name": "reactive", "period_s": 5}
    raw["faults"] = {
        "fail_stop": {"kind": "none"},
        "repair_s": 10.0,
        "at": [{"at_s": 20.0, "node": "serve"}, {"at_s": 20.0, "node": "spare"}],
    }
    res = hetsim.run(from_dict(raw))
    sv = _rows(res)["serving"]
    assert sv["requests"] == 300 and sv["fault_requests_waiting"] == 0
    events = res.tables["scale_events"]
    assert (events["action"] == "lost").sum() >= 1
    out = events[events["action"] == "scale-out"]
    assert (out["time_s"] >= 30.0).any()  # onto the repaired GPUs
    assert math.isfinite(sv["fault_replica_s_lost"]) and sv["fault_replica_s_lost"] > 0


def test_sampled_faults_are_seeded_and_use_the_llama3_rate() -> None:
    raw = _raw()
    raw["faults"] = {"scope": "gpu", "fail_stop": {"rate_scale": 3e6}, "repair_s": 30.0}
    a, b = hetsim.run(from_dict(raw)), hetsim.run(from_dict(copy.deepcopy(raw)))
    assert a.tables["faults"].equals(b.tables["faults"]) and len(a.tables["faults"]) > 0
    assert a.rows == b.rows
    raw["seed"] = 1
    c = hetsim.run(from_dict(raw))
    assert not c.tables["faults"]["time_s"].equals(a.tables["faults"]["time_s"])
    # a software fault leaves the device usable: only hardware causes, unless asked
    software = {c for c, (_, comp) in LLAMA3_COUNTS.items() if comp == "software"}
    assert not software & set(a.tables["faults"]["cause"]) and not software & set(
        c.tables["faults"]["cause"]
    )
    raw["faults"]["include_software"] = True
    d = hetsim.run(from_dict(raw))
    assert len(d.tables["faults"]) >= len(c.tables["faults"])
    # the default rate is the Llama 3 table: 419 interruptions / (16,384 GPUs x 54 days)
    assert sum(n for n, _ in LLAMA3_COUNTS.values()) == 419
    rate = sum(FaultsConfig().fail_stop.rates().values())
    assert rate == pytest.approx(419 / (16_384 * 54)) == sum(llama3_rates_per_gpu_day().values())


def test_a_faults_block_with_no_fault_changes_no_figure() -> None:
    base = hetsim.run(from_dict(_raw()))
    raw = _raw()
    raw["faults"] = {"fail_stop": {"kind": "none"}}
    none = hetsim.run(from_dict(raw))
    assert base.rows is not None and none.rows is not None
    for r0, r1 in zip(base.rows, none.rows, strict=True):
        for k, v in r0.items():
            assert r1[k] == v or (isinstance(v, float) and math.isnan(v)), k
    assert "faults" not in base.tables and "faults" not in from_dict(_raw()).resolved()


def test_without_periodic_checkpoints_the_resolved_block_is_unchanged() -> None:
    raw = _raw()
    del raw["workloads"]["training"]["checkpoint"]["interval_steps"]
    res = from_dict(raw).resolved()
    assert "interval_steps" not in res["workloads"]["training"]["checkpoint"]


@pytest.mark.parametrize(
    ("faults", "field"),
    [
        ({"repair_s": -5}, "faults.repair_s"),
        ({"reapir_s": 5}, "faults.reapir_s"),
        ({"scope": "rack"}, "faults.scope"),
        ({"at": [{"at_s": 5, "node": "nope"}]}, "faults.at[0].node"),
        ({"at": [{"at_s": 5, "node": "serve", "gpu": 2}]}, "faults.at[0].gpu"),
        ({"at": [{"at_s": -1, "node": "serve"}]}, "faults.at[0].at_s"),
        ({"fail_stop": {"kind": "trace", "path": "x.json"}}, "faults"),
    ],
)
def test_bad_faults_input_is_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], faults: dict[str, Any], field: str
) -> None:
    raw = _raw()
    raw["faults"] = faults
    msg = cli_error(tmp_path, capsys, yaml.safe_dump(raw))
    assert msg.startswith(field), msg


def test_faults_need_a_horizon_and_the_workloads_form() -> None:
    raw = _raw()
    raw["until_s"] = None
    raw["faults"] = {}
    with pytest.raises(ScenarioError, match=r"faults\.horizon_s"):
        from_dict(raw)
    single = yaml.safe_load(TINY)
    single["faults"] = {}
    with pytest.raises(ScenarioError, match="faults: only with workloads"):
        from_dict(single)


def test_serving_that_cannot_recover_stops_with_one_line() -> None:
    raw = _raw(until_s=100.0)
    raw["until_s"] = None
    raw["workloads"]["training"]["steps_per_job"] = 50
    raw["faults"] = {
        "fail_stop": {"kind": "none"},
        "repair_s": 10.0,
        "at": [{"at_s": 20.0, "node": "serve"}, {"at_s": 20.0, "node": "spare"}],
    }
    with pytest.raises(ScenarioError, match="scaling policy brings up no replacement"):
        hetsim.run(from_dict(raw))


COLOCATE = Path(__file__).resolve().parents[1] / "scenarios" / "colocate.yaml"


def _colocate(arbiter: Any, faults: dict[str, Any]) -> Any:
    raw = yaml.safe_load(COLOCATE.read_text())
    raw.pop("sweep")
    raw["workloads"]["serving"]["requests"]["num_requests"] = 15000  # arrivals to ~150 s
    raw["until_s"] = 200
    raw["policies"] = {"arbiter": arbiter}
    raw["faults"] = faults
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # requests in flight at until_s
        return hetsim.run(from_dict(raw, str(COLOCATE), COLOCATE.parent))


def test_a_failed_lent_gpu_leaves_the_loan_and_returns_to_serving_after_repair() -> None:
    harvest = {"name": "serving-first", "period_s": 10, "reserve_gpus": 1}
    base = _colocate(harvest, {"fail_stop": {"kind": "none"}})
    owners = base.tables["device_owners"]
    lent = owners[(owners["owner"] == "training") & owners["device"].str.startswith("a100/")]
    lent = lent[lent["end_s"] - lent["start_s"] > 60.0]
    assert len(lent), "serving-first lends A100s for a while in this run"
    d, t0 = lent["device"].iloc[0], float(lent["start_s"].iloc[0])
    node, gpu = d.split("/")[0], int(d.split("/gpu")[1])
    t_fault = t0 + 40.0
    res = _colocate(harvest, {"fail_stop": {"kind": "none"}, "at": [
        {"at_s": t_fault, "node": node, "gpu": gpu, "repair_s": 30.0}]})  # fmt: skip
    rows = res.tables["device_owners"]
    mine = rows[rows["device"] == d].sort_values("start_s")
    seq = list(zip(mine["owner"], mine["start_s"].round(6), strict=True))
    k = next(i for i, (o, _) in enumerate(seq) if o == REPAIR)
    assert seq[k - 1][0] == "training" and seq[k][1] == pytest.approx(t_fault)
    assert seq[k + 1] == ("serving", pytest.approx(t_fault + 30.0))  # the loan ended
    # the arbiter saw one GPU fewer lent while it was under repair
    arb = res.tables["arbiter"]
    during = arb[(arb["time_s"] > t_fault) & (arb["time_s"] < t_fault + 30.0)]
    before = base.tables["arbiter"]
    same = before[(before["time_s"] > t_fault) & (before["time_s"] < t_fault + 30.0)]
    assert len(during) and (during["lent_gpus"].to_numpy() <= same["lent_gpus"].to_numpy()).all()
    assert list(res.tables["faults"]["workload"]) == ["training"]  # the borrower was hit


def test_both_arbiters_see_the_same_faults_at_one_seed() -> None:
    faults = {"scope": "gpu", "fail_stop": {"rate_scale": 1e6}, "repair_s": 30.0}
    a = _colocate("static", faults).tables["faults"]
    b = _colocate({"name": "serving-first", "period_s": 10}, faults).tables["faults"]
    key = ["time_s", "fault", "cause", "node"]
    assert len(a) > 0
    assert (
        a[key]
        .drop_duplicates()
        .reset_index(drop=True)
        .equals(b[key].drop_duplicates().reset_index(drop=True))
    )
