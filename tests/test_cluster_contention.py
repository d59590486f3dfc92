"""Node contention (CPU, storage, NIC) between groups on one node: stretch factors and
completion times worked out by hand, the off switch, and a bad capacity from the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from hetsim.simulator.cli import main
from hetsim.workloads.cluster.contention import NodeContention
from hetsim.workloads.cluster.jobs import JobTable
from hetsim.workloads.cluster.params import Contention
from tests.test_cluster_runs import run_log, scenario, trace

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


# Two data-bound 4-GPU dqn jobs: data 1.0 s, GPU 0.5 s, 1.5 s alone (stage_sum), 30
# iterations each; one node, 2 cores per GPU in the data stage. Interleaved in Muri's
# 4-phase cycle (stage model, beta 0, no group factor): job 0's data spans phases 0-1 and
# job 1's phases 1-2 (the data column spans two phases, so the two overlap in phase 1: one
# on storage, one on the CPU in Muri's model), then job 0's GPU stage in phase 2 and job
# 1's in phase 3. The binding cycle is job 0's data + both GPU stages: d + 2p = 1.0 + 2 x
# 0.5 = 2.0 s per iteration (placing them two phases apart costs 2d = 2.0 as well).
PAIR = [f"{i},4,0,30,dqn,128,1,0,1500,1000,500,0,0" for i in (0, 1)]
EXEC = {"solo_time": "stage_sum", "interference_model": "stage", "stage_beta": [0, 0, 0]}


def pair_run(tmp_path: Path, packing: str, cores: float | None, gpus: int = 4, **pol: Any) -> Any:
    """The pair on one ``gpus``-GPU node with ``cores`` cores (None: contention off)."""
    raw = scenario(trace(tmp_path, PAIR), gpus=gpus, **EXEC)
    if cores is not None:
        raw["workload"]["inventory"][0]["cpu_cores"] = cores
        raw["workload"]["contention"] = {"enabled": True, "cpu_cores_per_gpu": 2.0}
    raw["policies"] = {"packing": packing}
    if pol:
        raw["policies"] = {"packing": {"name": packing, **pol}}
    return run_log(raw)


def test_share_estimate_by_hand(tmp_path: Path) -> None:
    # One 8-GPU node with 12 cores: a 4-GPU group's share is 4/8 x 12 = 6 cores. Alone a job
    # loads 2 x 4 x 1.0 / 1.5 = 5.33 cores < 6: 1.5 s. The pair loads 2 x (2 x 4 x 1.0) /
    # 2.0 = 8 cores: data stretch 8 / 6 = 4/3, so data 1.333 s each and the cycle
    # min(d' + 2p, 2d') = min(1.333 + 1.0, 2.667) = 2.333 s. Muri's coarse estimate: 2.0.
    wl = pair_run(tmp_path, "none", 12.0, gpus=8)
    share = wl.share
    assert share.stretch_on((0, 1), 0, 2.0) == pytest.approx((4 / 3, 1.0, 1.0))
    assert share.iter_on((0, 1), 0) == pytest.approx(7 / 3)
    assert share.iter_on((0,), 0) == pytest.approx(1.5)
    assert wl.est.ref_iter_s((0, 1)) == pytest.approx(2.0)
    assert pair_run(tmp_path, "none", None).share is None  # contention off: not offered


def test_cuckoo_contention_aware_does_not_pair_muri_does(tmp_path: Path) -> None:
    # One 4-GPU node, 6 cores (the pair's share is the whole node). Without contention both
    # policies interleave (2.0 s < 3.0 s; Cuckoo's weight U - 0.5 x slowdown = 3 / (4 x 2)
    # - 0.5 x 2 x (2 / 1.5 - 1) = 0.042 > 0): both end at 30 x 2.0 = 60 s.
    for packing in ("muri", "cuckoo"):
        assert pair_run(tmp_path, packing, None).finish.tolist() == pytest.approx([60, 60])
    # With contention: 8 cores / 6 -> data stretch 4/3, 2.333 s per packed iteration (the
    # stage-stretched cycle, as in test_share_estimate_by_hand). Muri's coarse estimate is
    # blind (2.0 < 3.0): it packs and both end at 30 x 7/3 = 70 s. Cuckoo's weight on the
    # contention-aware estimate: 3 / (4 x 7/3) - 0.5 x 2 x (14/9 - 1) = 0.321 - 0.556 < 0,
    # no edge: FIFO runs job 0 alone (5.33 cores < 6, 1.5 s) to 45 s, then job 1 to 90 s.
    muri = pair_run(tmp_path, "muri", 6.0)
    assert muri.finish.tolist() == pytest.approx([70.0, 70.0])
    stretched = muri.sim.recorder.tables()["contention"]  # one packed group, one interval
    assert stretched["data_stretch"].tolist() == pytest.approx([4 / 3])
    assert pair_run(tmp_path, "cuckoo", 6.0).finish.tolist() == pytest.approx([45.0, 90.0])
    # The ablation (contention: false) prices blind and packs like Muri.
    blind = pair_run(tmp_path, "cuckoo", 6.0, contention=False)
    assert blind.finish.tolist() == pytest.approx([70.0, 70.0])
