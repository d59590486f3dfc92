"""The shipped device and link catalogues: presence, sources, units, roofline by hand, errors."""

from pathlib import Path

import pytest

import devices  # noqa: F401  (registers the catalogue)
from hetsim.devices.catalogue import (
    CatalogueError,
    device_spec,
    link_spec,
    load_device_catalogue,
    load_fabric_catalogue,
    load_link_catalogue,
    register_catalogue,
    shipped_devices,
    shipped_links,
)
from hetsim.devices.roofline import op_cost, op_time_s
from hetsim.devices.spec import EfficiencyCurve
from hetsim.simulator import registry
from hetsim.simulator.registry import UnknownName

REQUIRED_DEVICES = [
    "v100", "t4", "a10", "l4", "l40s", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie",
    "h200", "h20", "rtx-4090", "mi300x", "ascend-910b", "ascend-310p", "xeon-8480",
    "epyc-9654", "ryzen-7950x", "a800", "h800", "ideal-server",
]  # fmt: skip
REQUIRED_LINKS = [
    "pcie3-x16", "pcie4-x16", "pcie5-x16", "nvlink2", "nvlink3", "nvlink4", "ib-hdr",
    "ib-ndr", "eth-100g", "eth-200g", "eth-400g", "ideal",
]  # fmt: skip


def test_every_required_device_exists_with_a_source() -> None:
    specs = shipped_devices()
    for name in REQUIRED_DEVICES:
        spec = specs[name]
        assert spec.name == name
        assert spec.source.strip() and spec.display_name.strip()
        assert spec.peak_flops


def test_every_required_link_exists_with_a_source_and_sharing() -> None:
    links = shipped_links()
    for name in REQUIRED_LINKS:
        assert links[name].source.strip()
    for name, spec in links.items():
        expected = "fair" if spec.kind == "network" else "fifo"
        assert spec.sharing == expected, name


def test_h100_units() -> None:
    h100 = device_spec("h100-sxm")
    assert h100.peak("bf16") == 989e12  # devices.csv: 989 TFLOP/s dense
    assert h100.peak("fp8") == 1979e12
    assert h100.memory_bytes == 85_899_345_920  # 80 GiB = 80 * 1073741824
    assert h100.memory_bandwidth_Bps == 3.35e12  # 3350 GB/s
    assert h100.tdp_w == 700
    assert h100.price().usd_per_hour == 2.49
    assert h100.price("aws-capacity-blocks-2024").usd_per_hour == 4.916


def test_gpu_memory_is_whole_gib_and_bandwidth_in_bytes_per_second() -> None:
    for spec in shipped_devices().values():
        if spec.kind in ("gpu", "npu"):
            assert spec.memory_bytes % 2**30 == 0, spec.name
            # every GPU/NPU here streams between 0.2 and 8 TB/s (B200: 8 TB/s)
            assert 2e11 <= spec.memory_bandwidth_Bps <= 8e12, spec.name
            assert 1e-6 <= spec.launch_overhead_s <= 2e-5, spec.name


def test_derived_cpu_peaks() -> None:
    ryzen = device_spec("ryzen-7950x")
    assert ryzen.peak("fp32") == pytest.approx(16 * 32 * 4.5e9)  # cores x FLOP/cycle x base clock
    assert ryzen.memory_bandwidth_Bps == pytest.approx(2 * 5200e6 * 8)  # channels x MT/s x 8 B
    xeon = device_spec("xeon-8480")
    assert xeon.peak("bf16") == pytest.approx(56 * 1024 * 2.0e9)  # AMX ops/cycle
    assert xeon.memory_bandwidth_Bps == pytest.approx(8 * 4800e6 * 8)
    assert xeon.cores == 56


def test_link_bandwidth_per_direction() -> None:
    assert link_spec("pcie4-x16").bandwidth_Bps == 31.5e9  # 16 GT/s x 16 x 128/130 / 8
    assert link_spec("pcie5-x16").bandwidth_Bps == 63.0e9
    assert link_spec("nvlink4").bandwidth_Bps == 450e9  # 18 x 25 GB/s
    assert link_spec("ib-ndr").bandwidth_Bps == 50e9  # 400 Gb/s / 8
    # ideal link: 1 GB/s, no latency -> 2.5e9 bytes take 2.5 s
    assert link_spec("ideal").transfer_time_s(2.5e9) == pytest.approx(2.5)


def _hill(curve: EfficiencyCurve, size: float) -> float:
    """The EfficiencyCurve formula, written out again."""
    if curve.half_size == 0:
        return curve.max_eff
    return (
        curve.max_eff
        * size**curve.exponent
        / (size**curve.exponent + curve.half_size**curve.exponent)
    )


def test_roofline_gemm_by_hand_on_a100() -> None:
    a100 = device_spec("a100-80gb")
    n = 8192
    flops = 2 * n**3  # 1,099,511,627,776
    nbytes = 2 * 3 * n * n  # fp16 A, B, C: 402,653,184
    eff_c = _hill(a100.compute_curve("fp16"), flops)
    eff_m = _hill(a100.memory_efficiency, nbytes)
    compute_s = flops / (312e12 * eff_c)  # peak 312 TFLOP/s
    memory_s = nbytes / (2039e9 * eff_m)  # 2039 GB/s
    expected = max(compute_s, memory_s) + a100.launch_overhead_s
    assert op_time_s(a100, flops, nbytes, "fp16") == pytest.approx(expected, rel=1e-12)
    assert op_cost(a100, flops, nbytes, "fp16").bound == "compute"
    # sanity: K02 measured 253.7 TFLOP/s at this size -> about 4.3 ms
    assert flops / expected == pytest.approx(253.7e12, rel=0.1)


def test_roofline_memory_bound_op_by_hand_on_a100() -> None:
    a100 = device_spec("a100-80gb")
    elems = 2**28
    flops = elems  # one add per element
    nbytes = 3 * elems * 2  # read two fp16 vectors, write one: 1,610,612,736 B
    eff_m = _hill(a100.memory_efficiency, nbytes)
    memory_s = nbytes / (2039e9 * eff_m)
    compute_s = flops / (312e12 * _hill(a100.compute_curve("fp16"), flops))
    assert memory_s > compute_s
    expected = memory_s + a100.launch_overhead_s
    assert op_time_s(a100, flops, nbytes, "fp16") == pytest.approx(expected, rel=1e-12)
    assert op_cost(a100, flops, nbytes, "fp16").bound == "memory"


def test_ideal_server_is_exact() -> None:
    ideal = device_spec("ideal-server")
    # 2e12 FLOPs at 1e12 FLOP/s = 2 s; 1e12 bytes at 1e12 B/s = 1 s; no launch
    assert op_time_s(ideal, 2e12, 1e12, "fp32") == 2.0
    assert op_time_s(ideal, 1e9, 3e12, "fp64") == 3.0


def test_registration_is_idempotent_and_documented() -> None:
    register_catalogue()
    register_catalogue()
    for name in REQUIRED_DEVICES:
        entry = registry.device_types.entry(name)
        assert entry.doc.startswith(device_spec(name).display_name)
        assert "GiB" in entry.doc and "GB/s" in entry.doc
    assert "nvlink4" in registry.link_types
    assert "31.5 GB/s" in registry.link_types.entry("pcie4-x16").doc


def test_unknown_names_list_valid_ones() -> None:
    with pytest.raises(UnknownName, match="h100-sxm"):
        device_spec("h100")
    with pytest.raises(UnknownName, match="pcie4-x16"):
        link_spec("pcie9")


GOOD_DEVICE = """
devices:
  x:
    display_name: X
    vendor: V
    kind: gpu
    peak_flops: {bf16: 100e12}
    memory_bytes: 1073741824
    memory_bandwidth_Bps: 1e12
    source: test
"""


def _write(tmp_path: Path, text: str, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_good_entry_loads_and_exponent_strings_are_floats(tmp_path: Path) -> None:
    spec = load_device_catalogue(_write(tmp_path, GOOD_DEVICE, "good.yaml"))["x"]
    assert spec.peak("bf16") == 100e12  # '100e12' is a string to YAML 1.1
    assert spec.memory_bytes == 2**30


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        ("memory_bytes: 1073741824", "memory_bytes: -1", "memory_bytes", "must be > 0"),
        ("memory_bytes: 1073741824", "memory_bytes: 1.5", "memory_bytes", "whole number"),
        ("kind: gpu", "kind: fpga", "kind", "must be one of"),
        ("{bf16: 100e12}", "{bf16: lots}", "peak_flops.bf16", "must be a number"),
        ("{bf16: 100e12}", "{bf16: 0}", "peak_flops.bf16", "must be > 0"),
        ("source: test", "sauce: test", "sauce", "unknown field"),
        ("    vendor: V\n", "", "vendor", "missing required field"),
        (
            "source: test",
            "source: test\n    memory_efficiency: {max_eff: 2.0}",
            "memory_efficiency.max_eff",
            "must be <= 1.5",
        ),
    ],
)
def test_bad_device_entry_names_file_and_field(
    tmp_path: Path, old: str, new: str, field: str, message: str
) -> None:
    path = _write(tmp_path, GOOD_DEVICE.replace(old, new))
    with pytest.raises(CatalogueError) as err:
        load_device_catalogue(path)
    assert str(err.value).startswith(f"bad.yaml: devices.x.{field}: ")
    assert message in str(err.value)


def test_bad_link_and_fabric_entries(tmp_path: Path) -> None:
    link = """
links:
  l: {display_name: L, kind: pcie, bandwidth_Bps: 1e9, latency_s: 1e-6, sharing: lifo, source: t}
"""
    with pytest.raises(CatalogueError, match=r"bad.yaml: links.l.sharing: must be one of"):
        load_link_catalogue(_write(tmp_path, link))
    fabric = """
fabrics:
  f:
    display_name: F
    bandwidth_Bps: 1e9
    algorithms: {nvls: {alpha_s: 0, max_eff: 1}}
    source: t
"""
    with pytest.raises(CatalogueError, match=r"bad.yaml: fabrics.f.algorithms: needs a 'ring'"):
        load_fabric_catalogue(_write(tmp_path, fabric))


def test_invalid_yaml_and_missing_section(tmp_path: Path) -> None:
    with pytest.raises(CatalogueError, match=r"bad\.yaml: not valid YAML"):
        load_device_catalogue(_write(tmp_path, "devices: [unclosed"))
    with pytest.raises(CatalogueError, match=r"bad\.yaml: devices: missing top-level section"):
        load_device_catalogue(_write(tmp_path, "links: {}"))
