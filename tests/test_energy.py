"""Power model, power cap and energy accounting (devices/power.py, devices/energy.py),
against numbers worked out by hand from devices/power.yaml."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import hetsim
from hetsim.devices.catalogue import device_spec
from hetsim.devices.energy import power_series
from hetsim.devices.energy_meter import EnergyMeter
from hetsim.devices.kernels import kernel_fits
from hetsim.devices.power import cap_clock_ratio, power_model, power_table, type_power_model
from hetsim.devices.sustained import sustained_ratio
from hetsim.simulator.recorder import Recorder
from tests.conftest import ROOT


def _coef(name: str) -> float:
    return power_table().gpu[name].value


def test_h100_power_model_by_hand() -> None:
    pm = power_model(device_spec("h100-sxm"))
    idle = 80.3  # borrowed H200 reading
    assert pm.idle_W == idle
    assert pm.limit_W == pm.tdp_W == 700.0
    assert pm.memory_W == pytest.approx(idle + _coef("memory_activity") * (700.0 - idle))
    assert pm.busy_W(0.0) == pm.memory_W and pm.busy_W(1.0) == 700.0
    assert pm.busy_W(2.0) == 700.0 and pm.busy_W(-1.0) == pm.memory_W  # clipped
    # 2 s busy, 0.5 s of it at the full compute roof: memory draw throughout plus the
    # limit's excess over it for the compute-bound half second
    assert pm.interval_J(2.0, 0.5) == pytest.approx(
        2.0 * (pm.memory_W - idle) + 0.5 * (700.0 - pm.memory_W)
    )
    assert pm.interval_J(1.0, 5.0) == pytest.approx(700.0 - idle)  # u at most 1


def test_devices_without_own_idle_use_the_default_fraction() -> None:
    pm = power_model(device_spec("l4"))
    assert pm.idle_W == pytest.approx(_coef("idle_fraction") * 72.0)
    assert power_model(device_spec("a100-80gb")).idle_W == 62.0  # AcmeTrace reading
    cpu = power_model(device_spec("xeon-8480"))
    assert cpu.memory_W == cpu.limit_W == 350.0  # a busy socket draws its TDP
    assert type_power_model("k80").tdp_W == 150.0  # inventory-only type


def test_cap_clock_ratio_closed_form() -> None:
    a = 1.32
    assert cap_clock_ratio(80.0, 700.0, 400.0, a) == pytest.approx((320 / 620) ** (1 / a))
    assert cap_clock_ratio(80.0, 700.0, None, a) == 1.0
    assert cap_clock_ratio(80.0, 700.0, 800.0, a) == 1.0
    with pytest.raises(ValueError, match="idle"):
        cap_clock_ratio(80.0, 700.0, 60.0, a)


def test_cap_lowers_the_clock_ratio_and_the_limit_together() -> None:
    spec = device_spec("h100-sxm")
    capped = dataclasses.replace(spec, power_cap_w=500.0)
    pm = power_model(capped)
    expect = ((500.0 - pm.idle_W) / (700.0 - pm.idle_W)) ** (1 / _coef("dvfs_exponent"))
    assert pm.clock_ratio == pytest.approx(expect) and pm.limit_W == 500.0
    assert pm.memory_W == power_model(spec).memory_W  # memory-bound draw unchanged
    # one mechanism: the kernel fits' clock ratio carries the cap's factor on top of the
    # sustained ratio, and the compute-bound GEMM slows by about its inverse
    assert kernel_fits(capped).clock_ratio == pytest.approx(sustained_ratio("h100-sxm") * expect)
    # an uncalibrated device takes the cap too (its roofline peaks)
    from hetsim.devices.roofline import op_time_s

    l4 = device_spec("l4")
    slow = dataclasses.replace(l4, power_cap_w=50.0)
    r = power_model(slow).clock_ratio
    assert op_time_s(slow, 1e15, 0.0) == pytest.approx(op_time_s(l4, 1e15, 0.0) / r)


def test_meter_integrates_busy_and_idle() -> None:
    pm = power_model(device_spec("a100-80gb"))
    rec = Recorder()
    m = EnergyMeter(pm, rec, "gpu")
    m.busy(1.0, 3.0, 0.0)
    m.busy(3.0, 4.0, 1.0)
    horizon = 10.0
    expect = pm.idle_W * horizon + 2.0 * (pm.memory_W - pm.idle_W) + (400.0 - pm.idle_W)
    assert m.energy_J(horizon) == pytest.approx(expect)
    assert m.busy_s == 3.0 and m.peak_W == 400.0
    t, w = power_series(rec, "gpu")
    assert list(t) == [1.0, 3.0, 4.0]  # the idle sample at 3 s gives way to the busy one
    assert list(w) == [pm.memory_W, 400.0, pm.idle_W]


def _e01(**over: object) -> hetsim.simulator.result.Result:
    base = {"workload.requests.num_requests": 16, "workload.requests.output_tokens": 64}
    return hetsim.run(ROOT / "validation" / "e01.yaml", overrides={**base, **over})


def test_serving_energy_is_the_power_series_integral_plus_idle() -> None:
    res = _e01(**{"outputs.spans": True})
    row = res.summary_row
    t, w = power_series(res.recorder, "node/gpu")
    end = res.recorder.raw_tables()["requests"].column("finish_s").max()
    pm = power_model(device_spec("h100-sxm"))
    # the step function holds each sample to the next; idle before the first and after
    # the last (spans on: one event per iteration, the GPU busy from the first prefill)
    integral = float(np.sum(w[:-1] * np.diff(t))) + pm.idle_W * (t[0] + end - t[-1])
    assert row["energy_accelerator_J"] == pytest.approx(integral, rel=1e-9)
    tokens = 16 * 64
    assert row["energy_per_output_token_J"] == pytest.approx(integral / tokens, rel=1e-9)
    assert row["tokens_per_J"] == pytest.approx(tokens / integral, rel=1e-9)
    assert pm.idle_W < row["avg_power_W"] < row["peak_power_W"] <= 700.0
    assert res.tables["energy"]["energy_J"].sum() == pytest.approx(row["energy_J"])


def test_serving_cap_at_tdp_changes_nothing_and_a_low_cap_only_prefill() -> None:
    base = _e01().summary_row
    same = _e01(**{"cluster.accelerator_power_cap_w": 700.0}).summary_row
    assert same == base
    low = _e01(**{"cluster.accelerator_power_cap_w": 350.0}).summary_row
    # decode is mostly memory-bound: its steps move far less than the compute-bound
    # prefill (the cap's clock factor scales compute roofs only)
    tpot = low["tpot_mean_s"] / base["tpot_mean_s"]
    ttft = low["ttft_mean_s"] / base["ttft_mean_s"]
    assert 1.0 <= tpot < 1.15 and ttft > 1.2 and ttft > 2 * (tpot - 1) + 1
    assert low["peak_power_W"] <= 350.0


def test_training_cap_lowers_throughput_and_power_together() -> None:
    path = ROOT / "scenarios" / "training-power-limit.yaml"
    rows = [hetsim.run(path, overrides={"cluster.accelerator_power_cap_w": c}).summary_row
            for c in (None, 400.0)]  # fmt: skip
    free, capped = rows
    assert capped["power_limit_W"] == 400.0 and free["power_limit_W"] == 500.0
    assert capped["tokens_per_s_per_gpu"] < free["tokens_per_s_per_gpu"]
    assert capped["avg_power_W"] < free["avg_power_W"]
    pm = power_model(dataclasses.replace(device_spec("h100-96gb-hbm2e"), power_cap_w=400.0))
    assert capped["sustained_matmul_ratio"] == pytest.approx(0.848 * pm.clock_ratio)
    # per step: world x (idle x step + busy excess); no pipeline here, so busy = step
    it, world = free["iteration_s"], free["world"]
    assert free["energy_per_step_J"] / world >= power_model(
        device_spec("h100-96gb-hbm2e")
    ).memory_W * it * (1 - 1e-12)
    assert free["energy_per_token_J"] == pytest.approx(free["energy_per_step_J"] / (16 * 8192))


def test_power_coefficients_of_a_run_override_the_catalogue() -> None:
    base = _e01().summary_row
    more = _e01(**{"cluster.power_coefficients": {"memory_activity": 0.6}}).summary_row
    assert more["tpot_mean_s"] == base["tpot_mean_s"]  # timing does not move
    assert more["energy_per_output_token_J"] > base["energy_per_output_token_J"]
    spec = dataclasses.replace(device_spec("h100-sxm"), power_overrides=(("idle_fraction", 0.2),))
    assert power_model(spec).idle_W == pytest.approx(140.0)  # overrides the own reading


def test_bad_power_settings_are_one_line_errors(tmp_path: object) -> None:
    from hetsim.simulator.errors import ScenarioError

    with pytest.raises(ScenarioError, match="power_coefficients"):
        _e01(**{"cluster.power_coefficients": {"memory_activty": 0.3}})
    with pytest.raises(ScenarioError, match="idle"):
        _e01(**{"cluster.accelerator_power_cap_w": 50.0})


def test_cluster_energy_is_the_idle_floor_plus_allocated_duty() -> None:
    from hetsim.devices.power import cluster_duty_cycle

    res = hetsim.run(ROOT / "scenarios" / "muri.yaml")  # 400 jobs, a few seconds
    row = res.summary_row
    pm = power_model(device_spec("v100"))
    span = row["makespan_s"]
    gpus = 64  # muri.yaml: 8 nodes x 8 V100
    busy = row["utilisation"] * gpus * span  # allocated GPU-seconds
    expect = pm.idle_W * gpus * span + cluster_duty_cycle() * (300.0 - pm.idle_W) * busy
    assert row["energy_J"] == pytest.approx(expect, rel=1e-9)
    assert row["energy_per_job_J"] == pytest.approx(expect / row["completed"], rel=1e-9)


def test_cluster_type_without_power_data_has_no_energy_but_runs() -> None:
    # an inventory type name of the user's own (no catalogue device, no power data): the
    # run completes and its energy metrics are absent with a reason, never a crash
    r = hetsim.run(
        ROOT / "scenarios" / "cuckoo_load.yaml",
        overrides={
            "workload.inventory": [{"gpu_type": t, "nodes": 1, "gpus_per_node": 8}
                                   for t in ("my-gpu", "v100")],
            "workload.speeds.type_speeds": {"my-gpu": 1.5},
            "workload.jobs.num_jobs": 20,
        },
    )  # fmt: skip
    assert r.summary_row["energy_J"] is None
    assert "energy_J" in r.summary_row["absent_metrics"]
