"""Energy of the queueing, collective, elastic, observability, observability-faults and
training-pipeline kinds: conservation against sums worked out by hand from the power
model's coefficients (devices/power.py), bounds between idle-only and limit-only draw,
and directions of effect."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import hetsim
from hetsim.devices.catalogue import device_spec
from hetsim.devices.energy import power_series
from hetsim.devices.power import compute_roof_flops, power_model
from hetsim.devices.roofline import op_time_s
from tests.conftest import ROOT


def _run(tmp_path: Path, doc: dict[str, Any], name: str = "s") -> hetsim.simulator.result.Result:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return hetsim.run(path)


# ---- queueing -----------------------------------------------------------------------


def _queueing(discipline: str = "fcfs", flops: float = 2e12, nbytes: float = 1e9,
              spans: bool = False, dispatch: str = "fifo") -> dict[str, Any]:  # fmt: skip
    return {
        "name": "q", "seed": 3,
        "cluster": {"nodes": [{"name": "n", "devices": {"gpu": {"type": "a100-80gb"}}}]},
        "workload": {"kind": "queueing", "arrivals": {"kind": "poisson", "rate_per_s": 20.0},
                     "demand": {"kind": "deterministic", "flops": flops, "bytes": nbytes},
                     "num_requests": 50, "discipline": discipline},
        "policies": {"dispatch": dispatch},
        "outputs": {"spans": spans},
    }  # fmt: skip


def test_queueing_energy_is_idle_plus_each_requests_draw_by_hand(tmp_path: Path) -> None:
    spec = device_spec("a100-80gb")
    pm = power_model(spec)
    flops, nbytes = 2e12, 1e9
    s = op_time_s(spec, flops, nbytes, "fp16")  # every request's service time
    c = flops / (spec.peak("fp16") * spec.compute_curve("fp16").max_eff)
    assert c <= s
    row = _run(tmp_path, _queueing(flops=flops, nbytes=nbytes)).summary_row
    T = row["makespan_s"]
    want = pm.idle_W * T + 50 * ((pm.memory_W - pm.idle_W) * s + (pm.limit_W - pm.memory_W) * c)
    assert row["energy_J"] == pytest.approx(want, rel=1e-9)
    assert row["energy_per_request_J"] == pytest.approx(want / 50, rel=1e-9)
    assert row["peak_power_W"] == pytest.approx(pm.busy_W(c / s), rel=1e-9)
    assert pm.idle_W * T < row["energy_J"] < pm.tdp_W * T


def test_queueing_ps_and_spans_give_the_fcfs_energy(tmp_path: Path) -> None:
    base = _run(tmp_path, _queueing(), "a").summary_row
    spans = _run(tmp_path, _queueing(spans=True), "b")
    assert spans.summary_row["energy_J"] == pytest.approx(base["energy_J"], rel=1e-9)
    t, w = power_series(spans.recorder, "n/gpu")
    assert len(t) and w.max() == pytest.approx(base["peak_power_W"])
    # processor sharing is work-conserving: the same busy seconds and FLOPs in total
    ps = _run(tmp_path, _queueing("ps", dispatch="least-loaded"), "c").summary_row
    assert ps["makespan_s"] == pytest.approx(base["makespan_s"], rel=1e-9)
    assert ps["energy_J"] == pytest.approx(base["energy_J"], rel=1e-9)


def test_queueing_compute_bound_requests_draw_more_than_memory_bound(tmp_path: Path) -> None:
    compute = _run(tmp_path, _queueing(flops=2e12, nbytes=1e6), "a").summary_row
    memory = _run(tmp_path, _queueing(flops=1e6, nbytes=2e10), "b").summary_row
    pm = power_model(device_spec("a100-80gb"))
    assert memory["peak_power_W"] == pytest.approx(pm.memory_W, rel=1e-3)
    assert compute["peak_power_W"] > memory["peak_power_W"]


def test_queueing_ideal_server_draws_nothing() -> None:
    row = hetsim.run(ROOT / "scenarios" / "mmc.yaml",
                     overrides={"workload.num_requests": 2000,
                                "workload.warmup_requests": 100}).summary_row  # fmt: skip
    assert row["energy_J"] == 0.0


# ---- collective ---------------------------------------------------------------------


def _collective(nbytes: int) -> dict[str, Any]:
    return {
        "name": "c", "seed": 0,
        "cluster": {"nodes": [{"name": "dgx", "devices": {"gpu": {"type": "h100-sxm",
                                                                  "count": 4}}}]},
        "workload": {"kind": "collective", "op": "all_reduce", "nbytes": nbytes,
                     "fabric": "h100-nvswitch", "repetitions": 3, "gap_s": 0.001},
        "outputs": {"spans": False},
    }  # fmt: skip


def test_collective_gpus_draw_memory_w_while_the_collective_runs(tmp_path: Path) -> None:
    pm = power_model(device_spec("h100-sxm"))
    row = _run(tmp_path, _collective(1 << 26)).summary_row
    d = row["median_time_s"]  # every repetition takes the same time
    T = 3 * d + 2 * 0.001
    want = 4 * (pm.idle_W * T + 3 * d * (pm.memory_W - pm.idle_W))
    assert row["energy_J"] == pytest.approx(want, rel=1e-9)
    assert row["energy_per_collective_J"] == pytest.approx(want / 3, rel=1e-9)
    assert row["collective_energy_J"] == pytest.approx(4 * d * (pm.memory_W - pm.idle_W))
    assert row["peak_power_W"] == pytest.approx(pm.memory_W)


def test_collective_energy_grows_with_the_message(tmp_path: Path) -> None:
    small = _run(tmp_path, _collective(1 << 20), "a").summary_row
    large = _run(tmp_path, _collective(1 << 28), "b").summary_row
    assert large["collective_energy_J"] > small["collective_energy_J"] > 0


# ---- elastic ------------------------------------------------------------------------


def _elastic(replicas: int) -> dict[str, Any]:
    over = {"workload.duration_s": 7200, "workload.job.throughput_noise_cv": 0.0,
            "policies.autoscaler": {"name": "static", "replicas": replicas},
            "workload.initial_replicas": replicas}  # fmt: skip
    return over


def test_elastic_job_energy_is_idle_held_plus_consumed_samples_by_hand() -> None:
    path = ROOT / "scenarios" / "kale.yaml"
    over = _elastic(12)
    res = hetsim.run(path, overrides=over)
    row = res.summary_row
    job = hetsim.load_scenario(path, over).workload.job
    spec = device_spec("a100-80gb")
    pm = power_model(spec)
    samples = float(res.tables["timeline"]["consumed_per_s"].sum()) * 15.0  # step_s 15
    per_sample_s = 1.0 / row["per_worker_rate_per_s"]  # noise off: the cost model's time
    c = job.flops_per_sample / compute_roof_flops(spec, job.dtype)
    assert c <= per_sample_s
    held_s = row["gpu_hours"] * 3600.0
    want = pm.idle_W * held_s + samples * (
        (pm.memory_W - pm.idle_W) * per_sample_s + (pm.limit_W - pm.memory_W) * c
    )
    assert row["energy_job_J"] == pytest.approx(want, rel=1e-9)
    assert pm.idle_W * held_s < row["energy_job_J"] < pm.tdp_W * held_s
    assert row["energy_J"] >= row["energy_job_J"]  # the pool's other GPUs idle


def test_elastic_power_track_integrates_to_the_pool_gpus_energy() -> None:
    path = ROOT / "scenarios" / "kale.yaml"
    off = hetsim.run(path, overrides=_elastic(12)).summary_row
    res = hetsim.run(path, overrides={**_elastic(12), "outputs.spans": True})
    assert res.summary_row["energy_J"] == pytest.approx(off["energy_J"], rel=1e-12)
    t, w = power_series(res.recorder, "pool/gpu0")  # a worker's GPU: step-average draw
    pm = power_model(device_spec("a100-80gb"))
    integral = float(np.sum(w[:-1] * np.diff(t))) + pm.idle_W * (t[0] + 7200.0 - t[-1])
    energy = res.tables["energy"].set_index("device")["energy_J"]
    assert integral == pytest.approx(energy["pool/gpu0"], rel=1e-9)
    assert energy["pool/gpu63"] == pytest.approx(pm.idle_W * 7200.0)  # never a worker


def test_elastic_more_replicas_cost_more_energy_per_sample() -> None:
    path = ROOT / "scenarios" / "kale.yaml"
    few = hetsim.run(path, overrides=_elastic(12)).summary_row
    many = hetsim.run(path, overrides=_elastic(24)).summary_row
    assert many["energy_job_J"] > few["energy_job_J"]
    assert many["energy_per_sample_J"] > few["energy_per_sample_J"]


# ---- observability (Kair) ------------------------------------------------------------


def _kair(stragglers: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "workload.ranks": 16, "workload.iterations": 100, "workload.window_iters": 50,
        "workload.model.dataload_s": 0.0,
        "workload.noise": {"noise_sigma": 0.0, "rank_sigma": 0.0, "node_sigma": 0.0,
                           "spike_prob": 0.0},
        "workload.stragglers": stragglers or {},
    }  # fmt: skip


def test_kair_energy_is_idle_plus_iterations_draw_by_hand() -> None:
    path = ROOT / "scenarios" / "kair.yaml"
    res = hetsim.run(path, overrides=_kair())
    row = res.summary_row
    model = hetsim.load_scenario(path, _kair()).workload.model
    spec = device_spec("a800")
    pm = power_model(spec)
    it = row["nominal_iteration_s"]  # forward + backward + all-reduce (no data loading)
    c = 3.0 * model.forward_flops() / compute_roof_flops(spec, model.dtype)
    T = row["makespan_s"]
    assert pytest.approx(100 * it) == T
    want = 16 * (pm.idle_W * T + 100 * ((pm.memory_W - pm.idle_W) * it
                                        + (pm.limit_W - pm.memory_W) * c))  # fmt: skip
    assert row["energy_J"] == pytest.approx(want, rel=1e-9)
    assert row["energy_per_iteration_J"] == pytest.approx(want / 100, rel=1e-9)
    assert len(res.tables["energy"]) == 16
    assert 16 * pm.idle_W * T < row["energy_J"] < 16 * pm.tdp_W * T


def test_kair_stragglers_lengthen_the_run_and_lower_the_mean_draw() -> None:
    path = ROOT / "scenarios" / "kair.yaml"
    clean = hetsim.run(path, overrides=_kair()).summary_row
    stall = {"dataloader-stall": {"count": 1, "slowdown": [1.0, 1.0], "persistent_fraction": 1.0}}
    slow = hetsim.run(path, overrides=_kair(stall)).summary_row
    assert slow["makespan_s"] >= clean["makespan_s"]
    gpu = {"gpu-slowdown": {"count": 1, "slowdown": [2.0, 2.0], "persistent_fraction": 1.0}}
    slowed = hetsim.run(path, overrides=_kair(gpu)).summary_row
    assert slowed["makespan_s"] > clean["makespan_s"]
    assert slowed["energy_J"] > clean["energy_J"]
    assert slowed["avg_power_W"] < clean["avg_power_W"]


# ---- observability-faults ------------------------------------------------------------


def _faults(**over: Any) -> dict[str, Any]:
    return {"workload.duration_days": 10.0, "workload.gpus": 1000, **over}


def test_fault_job_energy_is_the_sum_of_its_states() -> None:
    path = ROOT / "scenarios" / "faults.yaml"
    row = hetsim.run(path, overrides=_faults()).summary_row
    parts = ("energy_useful_J", "energy_lost_work_J", "energy_recovery_J",
             "energy_checkpoint_J", "energy_slow_J", "energy_evict_J")  # fmt: skip
    assert sum(row[p] for p in parts) == pytest.approx(row["energy_J"], rel=1e-9)
    pm = power_model(device_spec("h100-sxm"))
    T = 10.0 * 86400.0
    assert 1000 * pm.idle_W * T < row["energy_J"] < 1000 * pm.tdp_W * T
    assert row["energy_lost_work_J"] > 0 and 0 < row["energy_wasted_fraction"] < 1
    # ETTR and the useful energy share one measure of work kept
    running_W = row["energy_useful_J"] / (1000 * row["ettr"] * T)
    assert pm.idle_W < running_W <= pm.tdp_W


def test_fault_job_without_fail_stops_loses_no_work_energy() -> None:
    path = ROOT / "scenarios" / "faults.yaml"
    row = hetsim.run(
        path,
        overrides=_faults(**{"workload.fail_stop": {"kind": "none"}, "workload.fail_slow": {}}),
    ).summary_row
    assert row["energy_lost_work_J"] == 0.0 and row["energy_recovery_J"] == 0.0
    often = hetsim.run(
        path, overrides=_faults(**{"policies.checkpoint": {"name": "fixed", "interval_s": 600}})
    ).summary_row
    rare = hetsim.run(
        path, overrides=_faults(**{"policies.checkpoint": {"name": "fixed", "interval_s": 7200}})
    ).summary_row
    assert often["energy_checkpoint_J"] > rare["energy_checkpoint_J"]
    assert often["energy_lost_work_J"] < rare["energy_lost_work_J"]


# ---- training-pipeline ----------------------------------------------------------------


def _pipe(**over: Any) -> dict[str, Any]:
    return {"workload.model.seq_len": 16384, "workload.model.layers": 16,
            "policies.schedule": "1f1b", **over}  # fmt: skip


def test_pipeline_energy_conserves_busy_time_and_sits_between_bounds() -> None:
    path = ROOT / "scenarios" / "slimpipe.yaml"
    res = hetsim.run(path, overrides=_pipe())
    row, tables = res.summary_row, res.tables
    pm = power_model(device_spec("h100-sxm"))
    units = tables["units"]
    busy = (units["end_s"] - units["start_s"]).groupby(units["stage"]).sum()
    energy = tables["energy"]
    assert np.allclose(energy["busy_s"].to_numpy(), busy.to_numpy(), rtol=1e-12)
    T, world = row["iteration_s"], 8 * 8
    idle_plus_memory = 8 * (pm.idle_W * 8 * T + (pm.memory_W - pm.idle_W) * busy.sum())
    assert idle_plus_memory < row["energy_J"] < world * pm.tdp_W * T
    assert row["energy_J"] == pytest.approx(8 * energy["energy_J"].sum())
    assert pm.memory_W < row["peak_power_W"] <= pm.tdp_W


def test_pipeline_recompute_costs_energy_and_spans_do_not() -> None:
    path = ROOT / "scenarios" / "slimpipe.yaml"
    plain = hetsim.run(path, overrides=_pipe()).summary_row
    full = hetsim.run(path, overrides=_pipe(**{"workload.recompute": "full"})).summary_row
    assert full["energy_per_step_J"] > plain["energy_per_step_J"]
    spans = hetsim.run(path, overrides=_pipe(**{"outputs.spans": True}))
    assert spans.summary_row["energy_J"] == pytest.approx(plain["energy_J"], rel=1e-12)
    assert "power" in spans.tables and set(spans.tables["power"]["device"]) == {
        f"stage{d}" for d in range(8)
    }
    slim = hetsim.run(path, overrides=_pipe(**{"policies.schedule": "slimpipe"})).summary_row
    assert slim["energy_J"] > 0


@pytest.mark.parametrize(
    ("scenario", "over", "track"),
    [
        ("slimpipe", _pipe(), "stage0 power"),
        ("kair", _kair(), "rank00 power"),
        ("faults", _faults(), "job-gpu power"),
    ],
)
def test_virtual_devices_power_tracks_reach_the_trace(
    scenario: str, over: dict[str, Any], track: str
) -> None:
    import json

    from hetsim.simulator.trace import trace_json

    res = hetsim.run(ROOT / "scenarios" / f"{scenario}.yaml",
                     overrides={**over, "outputs.spans": True})  # fmt: skip
    events = json.loads(trace_json(res.recorder))["traceEvents"]
    assert any(e.get("ph") == "C" and e["name"].startswith(track) for e in events)
    times, watts = power_series(res.recorder, track.removesuffix(" power"))
    assert len(times) and watts.max() <= power_model(device_spec("h100-sxm")).tdp_W
