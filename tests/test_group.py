"""Collectives on a device group: alpha-beta time from the fabric, issue-order streams."""

from __future__ import annotations

import pytest

from hetsim.devices.collectives import AlgorithmFit, CollectiveFabric
from hetsim.devices.group import CommGroup
from hetsim.devices.spec import EfficiencyCurve
from hetsim.simulator.engine import Simulation

# an ideal ring fabric: B = 100e9 B/s per rank, alpha = 1e-5 s per step, efficiency 1
FABRIC = CollectiveFabric(
    name="test-ring",
    display_name="test",
    bandwidth_Bps=100e9,
    algorithms={"ring": AlgorithmFit(1e-5, EfficiencyCurve(1.0))},
)


def test_ring_all_reduce_on_eight_ranks_back_to_back() -> None:
    """Ring all-reduce of S = 1e9 B on n = 8: 2(n-1) = 14 steps of alpha and
    2(n-1)/n * S = 1.75e9 B on the wire: 14e-5 + 1.75e9 / 100e9 = 0.01764 s.
    Two collectives issued together run one after the other: 0.01764 and 0.03528."""
    sim = Simulation()
    group = CommGroup(sim, "dp", [f"gpu{i}" for i in range(8)], FABRIC)
    first = group.run("all_reduce", 10**9, "ring")
    second = group.run("all_reduce", 10**9, "ring")
    sim.run()
    assert first.value == pytest.approx(0.01764, rel=1e-12)
    assert second.value == pytest.approx(0.03528, rel=1e-12)
    rows = sim.recorder.tables()["collectives"]
    assert rows["start_s"].tolist() == pytest.approx([0.0, 0.01764], rel=1e-12)


def test_group_errors() -> None:
    sim = Simulation()
    with pytest.raises(ValueError, match="distinct devices"):
        CommGroup(sim, "g", ["a", "a"], FABRIC)
    group = CommGroup(sim, "g", ["a", "b"], FABRIC)
    with pytest.raises(ValueError, match="unknown collective 'gossip'"):
        group.run("gossip", 10)
    assert CommGroup(sim, "solo", ["a"], FABRIC).time_s("all_reduce", 10**9) == 0.0


def test_cluster_group_uses_the_catalogue_fabric() -> None:
    from hetsim.devices.catalogue import fabric_spec
    from hetsim.devices.cluster import Cluster, ClusterConfig
    from hetsim.devices.collectives import collective_time_s

    cfg = ClusterConfig.model_validate(
        {"nodes": [{"name": "n", "devices": {"gpu": {"type": "a100-80gb", "count": 8}}}]}
    )
    sim = Simulation()
    cluster = Cluster(sim, cfg)
    group = cluster.group("dp", cluster.device_names(["gpu"]), "a100-nvswitch")
    expected = collective_time_s("all_reduce", 8, 2**30, fabric_spec("a100-nvswitch"), "ring")
    assert group.time_s("all_reduce", 2**30) == expected
    # C01 measured 228.10 GB/s busbw at 1 GiB: the calibrated time is within 10% of
    # S * 2(n-1)/n / busbw = 2**30 * 1.75 / 228.10e9
    assert expected == pytest.approx(2**30 * 1.75 / 228.10e9, rel=0.10)
    with pytest.raises(KeyError):
        cluster.group("bad", ["n/gpu0", "n/nothing"], "a100-nvswitch")
