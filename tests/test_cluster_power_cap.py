"""A power cap in the cluster domain (workloads/cluster/power_cap.py): the GPU stage's
compute-bound share slowed by the cap's clock ratio, energy priced with the same split,
against closed forms from devices/power.yaml and muri.yaml's first trace row."""

from __future__ import annotations

import pytest

import hetsim
from hetsim.devices.power import cluster_duty_cycle, power_table, type_power_model
from hetsim.simulator.errors import ScenarioError
from hetsim.workloads.cluster.power_cap import gpu_stage_stretch
from tests.conftest import ROOT

MURI = ROOT / "scenarios" / "muri.yaml"
ONE_JOB = {"workload.jobs.max_jobs": 1, "policies.ordering": "fifo", "policies.packing": "none"}
V100_IDLE_W = 0.155 * 300.0  # idle_fraction x TDP (v100 has no idle reading of its own)


def test_stretch_closed_form() -> None:
    assert power_table().gpu["idle_fraction"].value == 0.155
    capped, uncapped = type_power_model("v100", 200.0), type_power_model("v100")
    r = ((200.0 - V100_IDLE_W) / (300.0 - V100_IDLE_W)) ** (1 / 1.32)
    assert capped.clock_ratio == pytest.approx(r, rel=1e-12)
    got = gpu_stage_stretch([capped, uncapped], 0.5)
    assert got[0] == pytest.approx(0.5 + 0.5 / r, rel=1e-12)
    assert got[1] == 1.0
    assert gpu_stage_stretch([capped], 0.0)[0] == 1.0  # nothing compute-bound: no cost


def test_one_job_slows_by_its_gpu_stage_share() -> None:
    # muri_trace1 row 0: dqn, 1 GPU, 5,853,661 iterations of 490 ms measured; stages
    # data 446 ms, gpu 8 ms, net 0 ms; alone: restart 10 s + iterations x iteration x 1.015
    base = hetsim.run(MURI, overrides=ONE_JOB).tables["jobs"].iloc[0]
    cap = {
        "cluster.accelerator_power_cap_w": 200.0,
        "workload.execution.compute_bound_fraction": 0.5,
    }
    slow = hetsim.run(MURI, overrides={**ONE_JOB, **cap}).tables["jobs"].iloc[0]
    solo = 5853661 * 0.490 * 1.015
    assert base["jct_s"] == pytest.approx(10.0 + solo, rel=1e-12)
    s = 0.5 + 0.5 / type_power_model("v100", 200.0).clock_ratio
    assert slow["jct_s"] == pytest.approx(10.0 + solo * (446 + 8 * s) / 454, rel=1e-12)
    assert slow["solo_s"] == base["solo_s"]  # the deadline base is the uncapped job


def test_cap_energy_closed_form_and_direction() -> None:
    over = {**ONE_JOB, "workload.jobs.max_jobs": 60}
    cap = {
        "cluster.accelerator_power_cap_w": 200.0,
        "workload.execution.compute_bound_fraction": 0.5,
    }
    free = hetsim.run(MURI, overrides=over).summary_row
    row = hetsim.run(MURI, overrides={**over, **cap}).summary_row
    pm = type_power_model("v100", 200.0)
    memory_W = V100_IDLE_W + power_table().gpu["memory_activity"].value * (300.0 - V100_IDLE_W)
    assert pm.memory_W == pytest.approx(memory_W)
    span, gpus = row["makespan_s"], 64
    busy = row["utilisation"] * gpus * span
    kernel_W = 0.5 * (200.0 - V100_IDLE_W) + 0.5 * (memory_W - V100_IDLE_W)
    expect = V100_IDLE_W * gpus * span + cluster_duty_cycle() * kernel_W * busy
    assert row["energy_J"] == pytest.approx(expect, rel=1e-9)
    assert row["mean_jct_s"] > free["mean_jct_s"]  # slower
    assert row["avg_power_W"] < free["avg_power_W"]  # and drawing less


def test_nothing_compute_bound_means_a_cap_costs_no_time() -> None:
    over = {
        **ONE_JOB,
        "workload.jobs.max_jobs": 30,
        "workload.execution.compute_bound_fraction": 0.0,
    }
    a = hetsim.run(MURI, overrides=over).summary_row
    b = hetsim.run(MURI, overrides={**over, "cluster.accelerator_power_cap_w": 200.0}).summary_row
    for k in ("mean_jct_s", "makespan_s", "energy_J"):  # memory-bound draw is below the cap
        assert a[k] == b[k]


def test_cap_errors_are_one_line() -> None:
    with pytest.raises(ScenarioError, match="accelerator_power_cap_w"):
        hetsim.run(MURI, overrides={**ONE_JOB, "cluster.nodes": [
            {"name": "placeholder", "devices": {"gpu": {"type": "v100", "power_cap_w": 200}}}]})  # fmt: skip
    with pytest.raises(ScenarioError, match="idle"):
        hetsim.run(MURI, overrides={**ONE_JOB, "cluster.accelerator_power_cap_w": 30.0})
    with pytest.raises(ScenarioError, match=r"my-gpu.*no power data"):
        hetsim.run(
            ROOT / "scenarios" / "cuckoo_load.yaml",
            overrides={
                "workload.inventory": [{"gpu_type": t, "nodes": 1, "gpus_per_node": 8}
                                       for t in ("my-gpu", "v100")],
                "workload.speeds.type_speeds": {"my-gpu": 1.5},
                "workload.jobs.num_jobs": 20,
                "cluster.accelerator_power_cap_w": 200.0,
            },
        )  # fmt: skip
