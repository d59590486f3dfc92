"""Several workloads on one cluster (simulator.colocate): parsing, the single-workload
path, conservation and the direction of harvesting's effect."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import hetsim
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.scenario import from_dict, load_scenario
from hetsim.workloads.colocate.ledger import Ledger
from tests.cli_helpers import TINY, cli_error

COLOCATE = Path(__file__).resolve().parents[1] / "scenarios" / "colocate.yaml"


def _raw() -> dict[str, Any]:
    raw = yaml.safe_load(COLOCATE.read_text())
    raw.pop("sweep")
    return raw


def _multi_text(extra: dict[str, Any]) -> str:
    raw = _raw()
    for path, value in extra.items():
        node = raw
        *head, last = path.split(".")
        for k in head:
            node = node[k]
        node[last] = value
    return yaml.safe_dump(raw)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"workloads.training.gpus_per_job": 0}, "workloads.training.gpus_per_job"),
        ({"workloads.training.devices": ["a100/*"]}, "workloads.training.devices"),
        ({"workloads.training.devices": ["nope/*"]}, "workloads.training.devices"),
        ({"policies.arbiter": "oracle-free-lunch"}, "policies.arbiter"),
        ({"policies.routing": "jsq"}, "policies.routing"),
        ({"workloads.serving.policies": {"arbiter": "static"}}, "workloads.serving.policies"),
        ({"sharing": {"model": "banana"}}, "sharing.model"),
    ],
)
def test_bad_multi_workload_input_is_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: dict[str, Any], field: str
) -> None:
    msg = cli_error(tmp_path, capsys, _multi_text(extra))
    assert msg.startswith(field), msg


def test_workload_and_workloads_together_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = yaml.safe_load(TINY)
    raw["workloads"] = {"q": dict(raw["workload"])}
    assert cli_error(tmp_path, capsys, yaml.safe_dump(raw)).startswith("workloads")


def test_one_member_workloads_gives_the_single_form_metrics() -> None:
    single = yaml.safe_load(TINY)
    multi = {k: v for k, v in single.items() if k != "workload"}
    multi["workloads"] = {"q": single["workload"]}
    a = hetsim.run(from_dict(single)).summary_row
    res = hetsim.run(from_dict(multi))
    row = res.rows[0]
    assert row["workload"] == "q" and res.rows[-1]["workload"] == "cluster"
    for k, v in a.items():
        if k not in ("scenario", "seed"):
            assert row[k] == v, k


def test_single_workload_form_is_unchanged(tmp_path: Path) -> None:
    sc = from_dict(yaml.safe_load(TINY))
    assert sc.colocation is None and "workloads" not in sc.resolved()
    res = hetsim.run(sc)
    assert res.rows is None
    res.to_dir(tmp_path / "out")
    lines = (tmp_path / "out" / "summary.csv").read_text().splitlines()
    assert len(lines) == 2 and lines[0].split(",")[0] == "scenario"


def test_ledger_refuses_a_second_exclusive_owner() -> None:
    led = Ledger(Simulation(0))
    led.assign("n/gpu0", "a")
    with pytest.raises(InvariantViolation, match="exclusive"):
        led.assign("n/gpu0", "b")
    led.move("n/gpu0", "a", "b")
    led.check(1.0, {"b": [("n/gpu0", 0.0, 0.0)]})
    with pytest.raises(InvariantViolation, match="without owning"):
        led.check(1.0, {"a": [("n/gpu0", 0.0, 1.0)]})


@pytest.fixture(scope="module")
def runs() -> dict[str, Any]:
    sc = load_scenario(COLOCATE)
    return {a: hetsim.run(sc.with_overrides({"policies.arbiter": a}, keep_sweep=False))
            for a in ("static", "serving-first")}  # fmt: skip


def _row(res: Any, name: str) -> dict[str, Any]:
    return next(r for r in res.rows if r["workload"] == name)


@pytest.mark.slow
def test_every_request_and_job_is_accounted_and_owners_never_overlap(runs: dict[str, Any]) -> None:
    for res in runs.values():
        serving, training = _row(res, "serving"), _row(res, "training")
        assert serving["requests"] == 70000
        assert 0 <= training["steps_completed"] <= 6 * 400
        assert training["jobs_completed"] <= training["jobs_total"] == 6
        owners = res.tables["device_owners"].sort_values(["device", "start_s"])
        for _, g in owners.groupby("device"):
            assert (g["start_s"].to_numpy()[1:] >= g["end_s"].to_numpy()[:-1]).all()


@pytest.mark.slow
def test_harvesting_gives_training_more_gpu_time_and_reports_serving_slo(
    runs: dict[str, Any],
) -> None:
    st, sf = (_row(runs[a], "training") for a in ("static", "serving-first"))
    assert sf["gpu_s"] > 1.5 * st["gpu_s"]
    assert sf["tokens_trained"] > st["tokens_trained"]
    s_st, s_sf = (_row(runs[a], "serving")["slo_attainment"] for a in ("static", "serving-first"))
    assert 0.0 <= s_sf <= 1.0 and abs(s_sf - s_st) < 0.05
    c_st, c_sf = (_row(runs[a], "cluster") for a in ("static", "serving-first"))
    assert c_sf["idle_gpu_hours"] < c_st["idle_gpu_hours"]
    assert c_st["ownership_changes"] == 0


def test_two_exclusive_owners_end_the_run_with_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hetsim.simulator.cli import main

    # a broken lender: hands a GPU over without the lender giving it up
    monkeypatch.setattr(Ledger, "move", lambda self, d, src, dst: self.assign(d, dst))
    raw = _raw()
    raw["workloads"]["serving"]["requests"]["num_requests"] = 300
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(path), "-q"]) == 3
    assert "exclusive" in capsys.readouterr().err


def _shared_run(model: str) -> dict[str, dict[str, Any]]:
    over: dict[str, Any] = {
        "policies.arbiter": "static",
        "workloads.serving.devices": ["a100/*"],
        "workloads.serving.requests.num_requests": 4000,
        "workloads.serving.requests.rate_per_s": 30,
        "until_s": 300,
    }
    if model != "exclusive":
        over |= {"sharing.model": model, "workloads.training.devices": ["h100/*", "a100/*"]}
    res = hetsim.run(load_scenario(COLOCATE).with_overrides(over, keep_sweep=False))
    return {r["workload"]: r for r in res.rows}


@pytest.fixture(scope="module")
def shared() -> dict[str, dict[str, dict[str, Any]]]:
    return {m: _shared_run(m) for m in ("exclusive", "partition", "time-sliced")}


@pytest.mark.parametrize("model", ["partition", "time-sliced"])
def test_sharing_a_gpu_slows_serving_and_trains_more(
    shared: dict[str, dict[str, dict[str, Any]]], model: str
) -> None:
    alone, both = shared["exclusive"], shared[model]
    # an equal split runs serving's iterations at least 2x slower: TPOT at least 2x
    assert both["serving"]["tpot_p50_s"] > 2.0 * alone["serving"]["tpot_p50_s"]
    assert both["training"]["tokens_trained"] > alone["training"]["tokens_trained"]
    assert both["cluster"]["idle_gpu_hours"] < alone["cluster"]["idle_gpu_hours"]


def test_shared_devices_may_have_two_owners_exclusive_ones_not() -> None:
    led = Ledger(Simulation(0), shared={"n/gpu0"})
    led.assign("n/gpu0", "a")
    led.assign("n/gpu0", "b")
    led.assign("n/gpu1", "a")
    with pytest.raises(InvariantViolation, match="exclusive"):
        led.assign("n/gpu1", "b")
    led.check(1.0, {"a": [("n/gpu0", 0.0, 1.0)], "b": [("n/gpu0", 0.0, 1.0)]})


def test_fractions_must_name_workloads_and_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _multi_text({"sharing": {"model": "partition", "fractions": {"nobody": 0.5}},
                        "workloads.training.devices": ["h100/*", "a100/*"]})  # fmt: skip
    assert cli_error(tmp_path, capsys, text).startswith("sharing.fractions.nobody")
    text = _multi_text({"sharing": {"model": "partition",
                                    "fractions": {"serving": 0.7, "training": 0.6}},
                        "workloads.training.devices": ["h100/*", "a100/*"]})  # fmt: skip
    assert cli_error(tmp_path, capsys, text).startswith("sharing.fractions")


def test_two_workloads_of_one_kind_draw_apart_and_keep_their_tables() -> None:
    raw = _raw()
    a = raw["workloads"]["serving"]
    a["requests"]["num_requests"] = 500
    a["requests"]["rate_per_s"] = 10
    a["devices"] = ["a100/*"]
    b = {**a, "devices": ["l40s/*"], "requests": dict(a["requests"])}
    raw["workloads"] = {"a": a, "b": b}
    raw["policies"] = {"arbiter": "static"}
    res = hetsim.run(from_dict(raw, str(COLOCATE), COLOCATE.parent))
    ta, tb = res.tables["a.requests"], res.tables["b.requests"]
    assert len(ta) == len(tb) == 500
    assert not (ta["arrival_s"].to_numpy() == tb["arrival_s"].to_numpy()).all()
    assert set(res.tables["a.instances"]["devices"]) <= {f"a100/gpu{i}" for i in range(8)}
    assert all(d.startswith("l40s/") for d in res.tables["b.instances"]["devices"])


@pytest.mark.parametrize("kind", ["last-window", "ewma"])
def test_load_estimate_reads_no_arrival_after_now(kind: str) -> None:
    from hetsim.workloads.colocate.estimators import LoadEstimate

    past = [float(t) for t in range(0, 100, 2)]  # 0.5 req/s up to t = 98 s
    future = past + [100.0 + 0.001 * k for k in range(10_000)]  # a burst after now
    a, b = (LoadEstimate(kind, 20.0, 0.5, 0.0) for _ in range(2))
    for now in (30.0, 60.0, 99.0):
        assert a.update(past, now) == b.update(future, now)
    assert a.value == pytest.approx(0.5, rel=0.2)


@pytest.mark.filterwarnings("ignore:colocate. serving. overloaded")  # requests in flight
def test_a_run_cut_by_until_s_accounts_the_work_in_flight() -> None:
    sc = load_scenario(COLOCATE).with_overrides({"until_s": 150}, keep_sweep=False)
    res = hetsim.run(sc)
    rows = {r["workload"]: r for r in res.rows}
    assert rows["cluster"]["makespan_s"] == 150
    assert rows["serving"]["requests"] < 70000
    assert rows["training"]["jobs_completed"] < rows["training"]["jobs_total"]


def test_a_finished_job_counts_all_its_steps_despite_rounding() -> None:
    """Jobs started late (a large start time) with many steps: their finish alarm lands
    where the division of the run time by the step time falls just short; every job
    must still end with all its steps (the run checks it and would exit 3)."""
    raw = {
        "name": "jobs-rounding",
        "seed": 0,
        "cluster": {"nodes": [{"name": "h100", "devices": {"gpu": {"type": "h100-sxm", "count": 8}}}]},
        "workload": {"kind": "training-jobs", "model": "llama-3-8b", "num_jobs": 12,
                     "steps_per_job": 20000, "gpus_per_job": 8, "submit_interval_s": 600},
        "outputs": {"spans": False},
    }  # fmt: skip
    row = hetsim.run(from_dict(raw, "jobs-rounding.yaml", Path("."))).summary_row
    assert row["jobs_completed"] == 12
    assert row["steps_completed"] == 12 * 20000


def test_energy_split_adds_up_and_charges_training_its_own_gpus() -> None:
    """Static partition, short run: the training workload is charged its 4 H100s' idle
    floor over the run plus its steps' draw above idle (its own step_energy_J less the
    idle part of the metered GPU-seconds), plus a share of host energy; the parts and
    the unowned rest add up to the cluster's energy_J."""
    raw = _raw()
    raw["until_s"] = 120
    raw["workloads"]["serving"]["requests"]["num_requests"] = 3000
    raw["policies"] = {"arbiter": "static"}
    res = hetsim.run(from_dict(raw, str(COLOCATE), COLOCATE.parent))
    rows = {r["workload"]: r for r in res.rows}
    cl, tr, sv = rows["cluster"], rows["training"], rows["serving"]
    parts = tr["energy_attributed_J"] + sv["energy_attributed_J"] + cl["energy_unowned_J"]
    assert parts == pytest.approx(cl["energy_J"], rel=1e-9)
    from hetsim.devices.catalogue import device_spec
    from hetsim.devices.power import power_model

    idle = power_model(device_spec("h100-sxm")).idle_W
    end = cl["makespan_s"]
    expect = 4 * idle * end + tr["step_energy_J"] - idle * tr["step_gpu_s"]
    assert tr["energy_attributed_accelerator_J"] == pytest.approx(expect, rel=1e-6)
    assert 0 < tr["energy_attributed_host_J"] < cl["energy_host_J"]
    assert sv["carbon_attributed_g"] > 0 and tr["carbon_attributed_g"] > 0
