"""Topology: routes, alpha-beta copy times by hand, SimPy copies that pay every hop."""

from collections.abc import Generator
from typing import Any

import pytest
import simpy

from hetsim.devices.spec import EfficiencyCurve, LinkSpec
from hetsim.devices.topology import (
    CopyMode,
    Topology,
    TopologyLinks,
    from_dict,
    nvlink_server,
    pcie_workstation,
    route_time_s,
)
from hetsim.simulator.engine import Simulation

PCIE4 = LinkSpec("pcie4-test", "PCIe 4.0 x16", "pcie", 31.5e9, 2e-6, EfficiencyCurve(0.8))
NVLINK4 = LinkSpec("nvlink4-test", "NVLink 4", "nvlink", 450e9, 1e-6, EfficiencyCurve(0.84))
NET = LinkSpec("ib-test", "IB", "network", 25e9, 5e-6, sharing="fair")
SPECS = {"pcie4": PCIE4, "nvlink4": NVLINK4, "ib": NET}


def _run_copy(
    topo: Topology, src: str, dst: str, nbytes: int, n: int = 1
) -> tuple[Simulation, list[float]]:
    sim = Simulation()
    links = TopologyLinks(sim, topo)
    ends: list[float] = []

    def go(i: int) -> Generator[simpy.Event, Any, None]:
        yield links.transfer(src, dst, nbytes, f"c{i}")
        ends.append(sim.now)

    for i in range(n):
        sim.env.process(go(i))
    sim.run()
    return sim, ends


def test_nvlink_server_routes_gpu_to_gpu_through_the_switch() -> None:
    topo = nvlink_server(
        8, gpu_type="h100-sxm", cpu_type="xeon-8480", nvlink_spec=NVLINK4, pcie_spec=PCIE4
    )
    assert len(topo.devices()) == 9  # 8 GPUs + 1 CPU; the NVSwitch is not a device
    hops = topo.path("server/gpu0", "server/gpu5")
    assert [(h.src, h.dst) for h in hops] == [
        ("server/gpu0", "server/nvswitch"),
        ("server/nvswitch", "server/gpu5"),
    ]
    assert topo.path("server/cpu", "server/gpu3")[0].spec is PCIE4
    # pipelined over two NVLink hops: 2 * 1e-6 + 1e9 / (0.84 * 450e9) = 2e-6 + 1e9/378e9
    # = 2e-6 + 0.0026455026455... = 0.0026475026455...
    assert topo.copy_time_s("server/gpu0", "server/gpu5", 10**9) == pytest.approx(
        0.0026475026455026, rel=1e-12
    )


def test_workstation_host_to_gpu_copy_is_alpha_beta() -> None:
    topo = pcie_workstation(gpu_type="rtx-a6000", cpu_type="xeon-5220r", pcie_spec=PCIE4)
    # 2e-6 + 1e9 / (0.8 * 31.5e9) = 2e-6 + 1/25.2 = 0.0396845396825...
    expected = 0.0396845396825397
    assert topo.copy_time_s("workstation/cpu", "workstation/gpu", 10**9) == pytest.approx(
        expected, rel=1e-12
    )
    _, ends = _run_copy(topo, "workstation/cpu", "workstation/gpu", 10**9, n=2)
    assert ends == pytest.approx([expected, 2 * expected], rel=1e-12)  # FIFO on the link


def _two_hop(mode: CopyMode) -> Topology:
    fast = LinkSpec("fast", "fast", "ideal", 10e9, 1e-3)
    slow = LinkSpec("slow", "slow", "ideal", 5e9, 2e-3)
    topo = Topology(mode=mode)
    for name in "abc":
        topo.add_device(name, "t", "n")
    topo.add_link("a", "b", fast)
    topo.add_link("b", "c", slow)
    return topo


def test_two_hop_copy_pays_both_hops_store_and_forward() -> None:
    topo = _two_hop("store_and_forward")
    # (1e-3 + 1e9/10e9) + (2e-3 + 1e9/5e9) = 0.101 + 0.202 = 0.303
    assert topo.copy_time_s("a", "c", 10**9) == pytest.approx(0.303, rel=1e-12)
    sim, ends = _run_copy(topo, "a", "c", 10**9)
    assert ends == [pytest.approx(0.303, rel=1e-12)]
    copies = sim.recorder.tables()["copies"]
    assert list(copies["link"]) == ["a<->b:a->b", "b<->c:b->c"]
    assert copies["end_s"].iloc[0] == pytest.approx(0.101)  # hop 2 starts when hop 1 ends


def test_two_hop_copy_pipelined() -> None:
    topo = _two_hop("pipelined")
    # latencies 1e-3 + 2e-3, bottleneck 5e9: 3e-3 + 1e9/5e9 = 0.203
    assert topo.copy_time_s("a", "c", 10**9) == pytest.approx(0.203, rel=1e-12)
    sim, ends = _run_copy(topo, "a", "c", 10**9, n=2)
    # both hops held by c0 over [0, 0.203], then by c1 to 0.406
    assert ends == pytest.approx([0.203, 0.406], rel=1e-12)
    assert len(sim.recorder.tables()["copies"]) == 4  # 2 copies x 2 hops
    assert route_time_s([], 10) == 0.0


def test_from_dict_heterogeneous_cluster() -> None:
    cfg = {
        "nodes": [
            {
                "name": "hgx",
                "devices": {
                    "gpu": {"type": "h100-sxm", "count": 2},
                    "nvswitch": {"type": "nvswitch"},
                    "cpu": {"type": "xeon-8480", "cores": 56},
                },
                "links": [
                    {"type": "nvlink4", "between": ["gpu", "nvswitch"]},
                    {"type": "pcie4", "between": ["gpu", "cpu"]},
                ],
            },
            {
                "name": "ws",
                "devices": {"gpu": {"type": "rtx-a6000"}, "cpu": {"type": "xeon-5220r"}},
                "links": [{"spec": PCIE4, "between": ["gpu", "cpu"]}],
            },
        ],
        "network": {"type": "ib", "attach": "cpu"},
    }
    topo = from_dict(cfg, SPECS)
    assert [d.name for d in topo.devices("hgx")] == ["hgx/gpu0", "hgx/gpu1", "hgx/cpu"]
    assert topo.device("hgx/cpu").params == {"cores": 56}
    assert [h.dst for h in topo.path("hgx/gpu0", "hgx/gpu1")] == ["hgx/nvswitch", "hgx/gpu1"]
    hops = topo.path("hgx/gpu1", "ws/gpu")
    assert [h.dst for h in hops] == ["hgx/cpu", "fabric", "ws/cpu", "ws/gpu"]
    # The route is staged where the sharing discipline changes: PCIe (fifo), then the
    # two IB hops as one fair-shared flow, then PCIe again.
    # PCIe: 2e-6 + 1e9 / (0.8 * 31.5e9) = 2e-6 + 0.0396825397 = 0.0396845397
    # IB:   5e-6 + 5e-6 + 1e9 / 25e9   = 1e-5 + 0.04        = 0.04001
    # total 2 * 0.0396845397 + 0.04001 = 0.1193790794
    pcie = 2e-6 + 1e9 / (0.8 * 31.5e9)
    expected = 2 * pcie + (1e-5 + 1e9 / 25e9)
    assert topo.copy_time_s("hgx/gpu1", "ws/gpu", 10**9) == pytest.approx(expected, rel=1e-12)


def test_from_dict_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"nodes\[n\]\.devices\.gpu: missing 'type'"):
        from_dict({"nodes": [{"name": "n", "devices": {"gpu": {}}}]}, SPECS)
    bad_link = {"type": "pcie4", "between": ["gpu", "tpu"]}
    cfg = {"nodes": [{"name": "n", "devices": {"gpu": {"type": "x"}}, "links": [bad_link]}]}
    with pytest.raises(ValueError, match="no device 'tpu'"):
        from_dict(cfg, SPECS)
    with pytest.raises(KeyError, match="unknown link type"):
        bad = {"type": "nvlink9", "between": ["gpu", "gpu"]}
        from_dict(
            {"nodes": [{"name": "n", "devices": {"gpu": {"type": "x"}}, "links": [bad]}]}, SPECS
        )


def test_unreachable_device() -> None:
    topo = Topology()
    topo.add_device("a", "t", "n")
    topo.add_device("b", "t", "n")
    with pytest.raises(ValueError, match="no route"):
        topo.path("a", "b")
    assert topo.path("a", "a") == []


def test_catalogue_link_names_resolve() -> None:
    catalogue = pytest.importorskip("devices.catalogue")
    topo = pcie_workstation(gpu_type="rtx-a6000", cpu_type="xeon-5220r", pcie_spec="pcie4-x16")
    spec = catalogue.link_spec("pcie4-x16")
    (hop,) = topo.path("workstation/gpu", "workstation/cpu")
    assert hop.spec == spec
    # one hop: the catalogue entry's own alpha-beta time, latency + n / (bw * eff(n))
    n = 10**9
    expected = spec.latency_s + n / (spec.bandwidth_Bps * spec.efficiency(n))
    assert topo.copy_time_s("workstation/cpu", "workstation/gpu", n) == pytest.approx(expected)


def test_network_hops_share_fairly_while_pcie_hops_queue() -> None:
    """Two 1e9-byte copies cpu->cpu across the IB fabric (two hops via the switch, fair):
    both flows share 25e9 B/s, so both end at 5e-6 + 5e-6 + 2e9 / 25e9 = 0.08001 s.
    The same two copies over one PCIe link (fifo) end at t and 2t, t = 0.0396845397 s."""
    cfg = {
        "nodes": [
            {"name": "a", "devices": {"cpu": {"type": "x"}}},
            {"name": "b", "devices": {"cpu": {"type": "x"}}},
        ],
        "network": {"type": "ib", "attach": "cpu"},
    }
    _, ends = _run_copy(from_dict(cfg, SPECS), "a/cpu", "b/cpu", 10**9, n=2)
    assert ends == pytest.approx([0.08001, 0.08001], rel=1e-9)
    _, ends = _run_copy(pcie_workstation(gpu_type="g", cpu_type="c", pcie_spec=PCIE4),
                        "workstation/cpu", "workstation/gpu", 10**9, n=2)  # fmt: skip
    t = 2e-6 + 1e9 / (0.8 * 31.5e9)
    assert ends == pytest.approx([t, 2 * t], rel=1e-12)
