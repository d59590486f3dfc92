"""Node contention (CPU, storage, NIC) between groups on one node: stretch factors and
completion times worked out by hand, the off switch, and a bad capacity from the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from simulator.cli import main
from tests.test_cluster_runs import run_log, scenario, trace
from workloads.cluster_contention import NodeContention
from workloads.cluster_jobs import JobTable
from workloads.cluster_params import Contention

# dqn rows: 4 GPUs, stages data 0.6 s, gpu 0.4 s, net 0 -> 1.0 s per iteration alone
# (solo_time stage_sum, interference 1). Columns: id, GPUs, submit ms, iterations, model,
# batch, duration, interval, iteration_time ms, data ms, gpu ms, net ms, priority.
ROW = "{i},4,0,{it},dqn,128,1,0,1000,600,400,0,0"


def contended(path: Path, cpu_cores: float, **contention: Any) -> dict[str, Any]:
    """One 8-GPU node with ``cpu_cores`` cores, no packing, contention on."""
    raw = scenario(path, gpus=8, solo_time="stage_sum")
    raw["workload"]["inventory"][0]["cpu_cores"] = cpu_cores
    raw["workload"]["contention"] = {"enabled": True, "cpu_cores_per_gpu": 2.0, **contention}
    return raw


def test_two_groups_oversubscribe_cpu_stretch_by_hand(tmp_path: Path) -> None:
    # Each 4-GPU job: CPU work 2 cores/GPU x 4 GPUs x 0.6 s = 4.8 core-s per 1.0 s iteration
    # -> expected load 4.8 cores. Two on a 6-core node: 9.6 / 6 = 1.6 stretch on the data
    # stage: 0.6 x 1.6 + 0.4 = 1.36 s per iteration; 100 iterations -> both end at 136 s.
    path = trace(tmp_path, [ROW.format(i=0, it=100), ROW.format(i=1, it=100)])
    wl = run_log(contended(path, 6.0))
    assert wl.finish.tolist() == pytest.approx([136.0, 136.0])
    stretched = wl.sim.recorder.tables()["contention"]
    assert stretched["data_stretch"].tolist() == pytest.approx([1.6, 1.6])
    assert stretched["net_stretch"].tolist() == [1.0, 1.0]


def test_under_capacity_no_change(tmp_path: Path) -> None:
    # 9.6 cores expected on a 10-core node: no stretch, 100 x 1.0 s -> 100 s, as with
    # contention off.
    path = trace(tmp_path, [ROW.format(i=0, it=100), ROW.format(i=1, it=100)])
    assert run_log(contended(path, 10.0)).finish.tolist() == pytest.approx([100.0, 100.0])
    raw = scenario(path, gpus=8, solo_time="stage_sum")
    assert run_log(raw).finish.tolist() == pytest.approx([100.0, 100.0])


def test_recompute_when_one_group_leaves(tmp_path: Path) -> None:
    # 6 cores, stretch 1.6 while both run (1.36 s per iteration). Job 0 (50 iterations)
    # ends at 50 x 1.36 = 68 s; job 1 has done 68 / 1.36 = 50 of 100 and then runs alone
    # (4.8 cores < 6: no stretch) at 1.0 s: 68 + 50 = 118 s.
    path = trace(tmp_path, [ROW.format(i=0, it=50), ROW.format(i=1, it=100)])
    wl = run_log(contended(path, 6.0))
    assert wl.finish.tolist() == pytest.approx([68.0, 118.0])


def test_multi_node_job_nic_stretch_by_hand(tmp_path: Path) -> None:
    # One 16-GPU bert job over two 8-GPU nodes: stages data 0, gpu 0.5, net 0.5 s (1 s).
    # Gradients 1e9 params x 4 B = 4e9 B; per node 2 (2 - 1) / 2 x 4e9 = 4e9 B per 1 s
    # iteration = 4e9 B/s on a 2e9 B/s NIC: stretch 2 on the network stage, 0.5 + 1.0 =
    # 1.5 s per iteration; 10 iterations -> 15 s. On one node it uses no NIC: 10 s.
    path = trace(tmp_path, ["0,16,0,10,bert,128,1,0,1000,0,500,500,0"])
    raw = contended(path, 92.0, param_count={"bert": 1e9})
    raw["workload"]["inventory"][0].update(nodes=2, nic_Bps=2e9)
    assert run_log(raw).finish.tolist() == pytest.approx([15.0])
    raw["workload"]["inventory"][0].update(nodes=1, gpus_per_node=16)
    assert run_log(raw).finish.tolist() == pytest.approx([10.0])


def table(model: tuple[str, ...], gpus: list[int], stages: list[list[float]]) -> JobTable:
    """A job table with just what NodeContention reads."""
    n = len(model)
    z = np.zeros(n)
    return JobTable(z, np.array(gpus), model, z, np.array(stages), z[:, None], z[:, None] > 0,
                    z, z, z)  # fmt: skip


def test_mean_field_loads_packed_group_and_neighbours() -> None:
    # Packed pair (jobs 0, 1: 2 GPUs each, data 0.8 and 0.2 s) on node 0, T_g = 1.6 s:
    # CPU load = 3 cores/GPU x 2 GPUs x (0.8 + 0.2) / 1.6 = 3.75 cores; storage 2 x (1e6 +
    # 0) / 1.6 = 1.25e6 B/s. Lone job 2 (2 GPUs, data 0.5 s, 1 s) on node 0: 3 cores. Node
    # capacity 5 cores: 6.75 / 5 = 1.35 data stretch for both; storage 1.25e6 / 1e6 = 1.25
    # is the lesser. Removing job 2 leaves CPU 3.75 / 5 < 1, so storage binds: 1.25.
    jobs = table(("a", "b", "c"), [2, 2, 2], [[0.8, 0.1, 0], [0.2, 0.5, 0], [0.5, 0.5, 0]])
    spec = Contention(enabled=True, cpu_cores_per_gpu=3.0,
                      storage_bytes_per_gpu_iter={"a": 1e6}, param_count={})  # fmt: skip
    c = NodeContention(np.array([[5.0, 1e6, 1e9]]), jobs, spec)
    loads = c.group_loads([0, 1], 2, [(0, 2)], 1.6)
    assert loads[0].tolist() == pytest.approx([3.75, 1.25e6, 0.0])
    assert c.place(7, loads) == set()
    assert c.place(8, c.group_loads([2], 2, [(0, 2)], 1.0)) == {7}
    assert c.stretch(7) == pytest.approx((1.35, 1.0, 1.0))
    assert c.stretch(8) == pytest.approx((1.35, 1.0, 1.0))
    assert c.remove(8) == {7}
    assert c.stretch(7) == pytest.approx((1.25, 1.0, 1.0))
    assert c.remove(7) == set() and c.stretch(7) == (1.0, 1.0, 1.0)
    assert not c.load.any()


def test_negative_capacity_names_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = trace(tmp_path, [ROW.format(i=0, it=10)])
    raw = contended(path, -4.0)
    yaml_path = tmp_path / "s.yaml"
    yaml_path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(yaml_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "s.yaml: workload.inventory[0].cpu_cores: Input should be greater than 0" in err
