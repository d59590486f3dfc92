"""Alpha-beta collective costs: closed forms, bus-bandwidth relation, fitted fabrics."""

import math

import pytest

from hetsim.devices.catalogue import fabric_spec
from hetsim.devices.collectives import (
    AlgorithmFit,
    CollectiveFabric,
    bus_bandwidth_Bps,
    collective_time_s,
)
from hetsim.devices.spec import EfficiencyCurve

ALPHA = 1e-6
B = 1e9  # 1 GB/s per rank per direction
S = 10**9  # 1 GB message


def _fabric(mesh_links: int = 0, bandwidth_Bps: float = B) -> CollectiveFabric:
    fit = AlgorithmFit(ALPHA, EfficiencyCurve(1.0))
    return CollectiveFabric(
        "test", "test", bandwidth_Bps, {"ring": fit, "nvls": fit}, mesh_links=mesh_links
    )


def test_ring_all_reduce_two_ranks() -> None:
    # 2(n-1) = 2 steps; 2(n-1)/n * S = S bytes on the wire -> 2 us + 1 s
    assert collective_time_s("all_reduce", 2, S, _fabric()) == pytest.approx(2e-6 + 1.0)


def test_ring_all_reduce_eight_ranks() -> None:
    # 14 steps of 1 us; 2*7/8 = 1.75 S on the wire -> 14 us + 1.75 s
    assert collective_time_s("all_reduce", 8, S, _fabric()) == pytest.approx(14e-6 + 1.75)


def test_other_ops_closed_forms() -> None:
    f = _fabric()
    # all-gather / reduce-scatter / all-to-all on 4 ranks: 3 steps, 3/4 S
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert collective_time_s(op, 4, S, f) == pytest.approx(3e-6 + 0.75)
    # pipelined ring broadcast on 4 ranks: 3 steps, S
    assert collective_time_s("broadcast", 4, S, f) == pytest.approx(3e-6 + 1.0)
    # tree broadcast on 5 ranks: ceil(log2 5) = 3 steps, S
    assert collective_time_s("broadcast", 5, S, f, "tree") == pytest.approx(3e-6 + 1.0)
    # tree all-reduce on 8 ranks: 2 * 3 steps, 2 S (reduce up, broadcast down)
    assert collective_time_s("all_reduce", 8, S, f, "tree") == pytest.approx(6e-6 + 2.0)
    # NVLS all-reduce: 2 steps, S per rank whatever n
    assert collective_time_s("all_reduce", 8, S, f, "nvls") == pytest.approx(2e-6 + 1.0)


def test_trivial_cases() -> None:
    f = _fabric()
    assert collective_time_s("all_reduce", 1, S, f) == 0.0
    assert collective_time_s("all_reduce", 4, 0, f) == pytest.approx(6e-6)  # latency only


def test_bus_bandwidth_relation() -> None:
    # nccl-tests: busbw = algbw * 2(n-1)/n for all-reduce. With alpha = 0 and eff = 1 a
    # ring all-reduce has busbw equal to the link bandwidth: S / (1.75 S / B) * 1.75 = B.
    f = CollectiveFabric("t", "t", B, {"ring": AlgorithmFit(0.0, EfficiencyCurve(1.0))})
    t = collective_time_s("all_reduce", 8, S, f)
    assert bus_bandwidth_Bps("all_reduce", 8, S, t) == pytest.approx(B)
    assert bus_bandwidth_Bps("all_gather", 4, 100, 1.0) == pytest.approx(75.0)  # 100 * 3/4
    assert bus_bandwidth_Bps("broadcast", 4, 100, 2.0) == pytest.approx(50.0)


def test_mesh_uses_links_to_peers_only() -> None:
    # 7 links of 28 GB/s: 2 ranks use one link (28 GB/s), 8 ranks all 7 (196 GB/s)
    f = _fabric(mesh_links=7, bandwidth_Bps=196e9)
    assert f.rank_bandwidth_Bps(2) == pytest.approx(28e9)
    assert f.rank_bandwidth_Bps(8) == pytest.approx(196e9)
    t2 = collective_time_s("all_reduce", 2, S, f)
    assert t2 == pytest.approx(2e-6 + S / 28e9)


def test_bad_names_list_valid_ones() -> None:
    f = _fabric()
    with pytest.raises(ValueError, match="valid: all_reduce, all_gather"):
        collective_time_s("allreduce", 4, S, f)
    with pytest.raises(ValueError, match="valid: ring, tree, nvls"):
        collective_time_s("all_reduce", 4, S, f, "butterfly")
    with pytest.raises(ValueError, match=r"valid: ring$"):
        collective_time_s("all_gather", 4, S, f, "tree")
    ring_only = CollectiveFabric("r", "r", B, {"ring": AlgorithmFit(0.0, EfficiencyCurve(1.0))})
    with pytest.raises(ValueError, match="no 'nvls' fit"):
        collective_time_s("all_reduce", 8, S, ring_only, "nvls")


def _busbw(fabric: str, n: int, nbytes: int, algorithm: str) -> float:
    t = collective_time_s("all_reduce", n, nbytes, fabric_spec(fabric), algorithm)
    return bus_bandwidth_Bps("all_reduce", n, nbytes, t)


@pytest.mark.parametrize(
    ("fabric", "algorithm", "nbytes", "measured_Bps"),
    [  # microbenchmarks.csv C01 / C02 (8 GiB headline and the settings sweep; C01's 1 MiB
        # point is contested by Vidur's sweep: tests/test_calibration.py)
        ("a100-nvswitch", "ring", 8 * 2**30, 231.58e9),
        ("a100-nvswitch", "ring", 2**30, 228.10e9),
        ("a100-nvswitch", "ring", 16 * 2**20, 109.22e9),
        ("h100-nvswitch", "nvls", 8 * 2**30, 478.87e9),
        ("h100-nvswitch", "nvls", 2**30, 466.35e9),
        ("h100-nvswitch", "nvls", 16 * 2**20, 234.45e9),
        ("h100-nvswitch", "nvls", 2**20, 43.70e9),
    ],
)
def test_fitted_fabrics_reproduce_c01_c02(
    fabric: str, algorithm: str, nbytes: int, measured_Bps: float
) -> None:
    assert _busbw(fabric, 8, nbytes, algorithm) == pytest.approx(measured_Bps, rel=0.10)


def test_nvls_beats_ring_and_line_rate_on_h100() -> None:
    ring = _busbw("h100-nvswitch", 8, 8 * 2**30, "ring")
    nvls = _busbw("h100-nvswitch", 8, 8 * 2**30, "nvls")
    assert ring < 450e9 < nvls  # README A.3: NVLS busbw exceeds the 450 GB/s line rate


def test_small_messages_are_latency_bound() -> None:
    # time grows far slower than size below 1 MiB: 1 KiB -> 64 KiB is < 3x the time
    f = fabric_spec("a100-nvswitch")
    t_small = collective_time_s("all_reduce", 8, 1024, f)
    t_mid = collective_time_s("all_reduce", 8, 64 * 1024, f)
    assert t_mid < 3 * t_small
    assert math.isfinite(t_small) and t_small > 14 * f.fit("ring").alpha_s
