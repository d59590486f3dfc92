"""The disk (NVMe) tier of the offload workload: the drive curve against hand-computed
transfer times, bytes conserved across tiers, a FlexGen plan with the KV cache on disk
that writes and reads it there, reads and writes sharing the drive, the MoE refusal, and
runs without a disk unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import hetsim
from hetsim.devices.catalogue import load_link_catalogue
from hetsim.devices.storage import DiskDirection, StorageError, storage_spec
from hetsim.workloads.offload.costs import CopyPaths, DiskPath
from tests.cli_helpers import cli_error

# OPT-30B (workloads/models/dense.yaml): 48 layers, hidden 7168, 56 KV heads of 128, vocab
# 50272, 30e9 params; fp16 weights and KV
LAYERS = 48
LAYER_WEIGHT_BYTES = int((30.0e9 - 2 * 50272 * 7168) / 48 * 2)  # 1_219_970_858
KV_BYTES = 2 * 56 * 128 * 2  # per token and layer: 28_672
BATCH, PROMPT, OUT = 8, 64, 2


def test_drive_curve_by_hand() -> None:
    d = DiskDirection(peak_Bps=2.0e9, latency_s=100e-6)
    mib = 1048576.0
    # QD 1, 1 MiB: one request takes 100 us + 1 MiB / 2 GB/s = 624.288 us -> 1.6796 GB/s
    assert d.bandwidth_Bps(mib, 1) == pytest.approx(mib / 624.288e-6, rel=1e-6)
    # QD 4 would allow 6.72 GB/s: the peak binds
    assert d.bandwidth_Bps(mib, 4) == 2.0e9
    # 4 KiB at QD 1: latency-bound, 4096 / 102.048 us = 40.14 MB/s
    assert d.bandwidth_Bps(4096, 1) == pytest.approx(40.1379e6, rel=1e-4)
    # 1 GB in 1 MiB requests at QD 4: 100 us + 1e9 / 2e9
    assert d.transfer_s(1e9, mib, 4) == pytest.approx(0.5001, rel=1e-9)
    # smaller than one request: one request of its own size
    assert d.transfer_s(4096, mib, 1) == pytest.approx(100e-6 + 4096 / 40.1379e6, rel=1e-4)
    assert d.transfer_s(0, mib, 1) == 0.0


def test_disk_path_pipelines_drive_host_and_pcie() -> None:
    spec = storage_spec("samsung-970-evo-plus", {"read": {"latency_s": 0.0},
                                                  "write": {"latency_s": 0.0}})  # fmt: skip
    link = load_link_catalogue()["pcie3-x16"]
    copies = CopyPaths(link, pageable_Bps=5e9, d2h_bandwidth_ratio=0.854,
                       ssd_bandwidth_Bps=1.0, secure=None)  # fmt: skip
    o_direct = DiskPath(spec, 1048576.0, 4, "o_direct", memcpy_Bps=1e9, staging_pinned=True)
    assert o_direct.read_s(7e9) == pytest.approx(7e9 / 3.5e9)  # bytes / peak
    assert o_direct.write_s(2.9e9) == pytest.approx(1.0)
    # page cache: the CPU memcpy (1 GB/s here) is slower than the drive and binds
    cached = DiskPath(spec, 1048576.0, 4, "page_cache", memcpy_Bps=1e9, staging_pinned=True)
    assert cached.read_s(7e9) == pytest.approx(7.0)
    # disk -> GPU: the slower of the drive and the PCIe leg (pinned: the link's rate,
    # 15.75 GB/s x 0.7728; pageable: 5 GB/s here)
    assert o_direct.to_gpu_s(7e9, copies) == pytest.approx(2.0)
    slow = DiskPath(spec, 1048576.0, 4, "o_direct", memcpy_Bps=1e9, staging_pinned=False)
    pcie = copies.h2d_s(35e9, pinned=False)
    assert slow.to_gpu_s(35e9, copies) == pytest.approx(max(10.0, pcie))
    assert pcie == pytest.approx(5e-6 + 35e9 / 5e9)


def _summary(path: str, over: dict[str, object]) -> dict[str, Any]:
    """The one-row summary of a run as a dict."""
    row: dict[str, Any] = hetsim.run(path, overrides=over).summary.iloc[0].to_dict()  # type: ignore[arg-type]
    return row


def _disk_run(kv_disk: float = 1.0, write_Bps: float = 0.1e9, **extra: object) -> dict[str, Any]:
    over: dict[str, object] = {
        "workload.model": "opt-30b", "workload.batch": BATCH,
        "workload.prompt_tokens": PROMPT, "workload.output_tokens": OUT,
        "workload.disk": {"type": "gcp-t4-vm-ssd",
                          "read": {"peak_Bps": 0.1e9, "latency_s": 0.0},
                          "write": {"peak_Bps": write_Bps, "latency_s": 0.0}},
        "policies.placement": {"name": "fixed", "weights_gpu": 0.0, "weights_cpu": 0.5,
                               "kv_gpu": 0.0, "kv_disk": kv_disk, "attention_on_cpu": True,
                               "gpu_batches": 2, "pinned": False},
    }  # fmt: skip
    over.update(extra)
    return _summary("scenarios/flexgen-disk.yaml", over)


def test_kv_on_disk_is_written_and_read_there() -> None:
    s = _disk_run()
    assert "kv 0%/0%/100%" in str(s["plan"])
    # every token's KV of every layer written to disk once (prefill + decode)
    assert s["disk_write_bytes"] == LAYERS * BATCH * (PROMPT + OUT) * KV_BYTES
    # reads: the first layer's disk half before the run, then every layer-step copies the
    # next layer's half (3 steps); each decode step reads the context's KV of every layer
    weights = (1 + LAYERS * (1 + OUT)) * LAYER_WEIGHT_BYTES * 0.5
    kv = sum(LAYERS * BATCH * (PROMPT + i) * KV_BYTES for i in range(OUT))
    assert s["disk_read_bytes"] == pytest.approx(weights + kv, rel=1e-12)


def test_bytes_are_conserved_across_tiers() -> None:
    full, half = _disk_run(1.0), _disk_run(0.5)
    assert half["disk_write_bytes"] == pytest.approx(0.5 * full["disk_write_bytes"])
    weights = (1 + LAYERS * (1 + OUT)) * LAYER_WEIGHT_BYTES * 0.5
    assert half["disk_read_bytes"] - weights == pytest.approx(
        0.5 * (full["disk_read_bytes"] - weights)
    )
    # the host half of the KV and the disk half together are the whole cache, read once per
    # decode step by the CPU attention: the host-to-GPU copies carry none of it
    assert half["h2d_bytes"] == full["h2d_bytes"]


def test_disk_bound_decode_step_by_hand() -> None:
    # the drive (0.1 GB/s, no latency) is the bottleneck: a decode step at context c takes
    # 48 x (half a layer's weights + 8 c tokens' KV) / read rate + 48 x 8 tokens' KV / write
    s = _disk_run()
    steps = [
        LAYERS * (0.5 * LAYER_WEIGHT_BYTES + BATCH * (PROMPT + i) * KV_BYTES) / 0.1e9
        + LAYERS * BATCH * KV_BYTES / 0.1e9
        for i in range(OUT)
    ]
    assert s["tbt_mean_s"] == pytest.approx(sum(steps) / OUT, rel=0.01)
    assert s["disk_busy_frac"] > 0.97


def test_reads_and_writes_share_the_drive() -> None:
    # halving the write rate lengthens a decode step by the writes' extra time, although
    # the writes are off the compute's path: they hold the drive the reads need
    fast, slow = _disk_run(write_Bps=0.1e9), _disk_run(write_Bps=0.05e9)
    extra = LAYERS * BATCH * KV_BYTES * (1 / 0.05e9 - 1 / 0.1e9)
    assert slow["tbt_mean_s"] - fast["tbt_mean_s"] == pytest.approx(extra, rel=0.05)


def test_flexgen_search_puts_kv_on_disk_when_host_memory_is_short() -> None:
    # OPT-175B at batch 256 (FlexGen's disk run): the KV (0.65 TB) fits neither the GPU
    # nor 208 GiB of host memory, so the search must place it on the disk tier
    s = _summary("scenarios/flexgen-disk.yaml",
                 {"policies.placement": "flexgen", "workload.output_tokens": 2})  # fmt: skip
    plan = str(s["plan"])
    assert "kv 0%/0%/100%" in plan or "kv 0%/50%/50%" in plan, plan
    assert s["disk_write_bytes"] > 0 and s["disk_read_bytes"] > 0


def test_no_disk_tier_leaves_the_run_as_it_was() -> None:
    s = _summary("scenarios/flexgen.yaml", {"workload.output_tokens": 2})
    assert not any(str(k).startswith("disk_") for k in s)
    assert "kv_gpu" in str(s["plan"])


def _flexgen_text(old: str, new: str) -> str:
    text = Path("scenarios/flexgen.yaml").read_text().split("\nsweep:")[0] + "\n"
    assert old in text
    return text.replace(old, new, 1)


def test_offload_refuses_an_moe_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    msg = cli_error(tmp_path, capsys, _flexgen_text("model: opt-30b", "model: mixtral-8x7b"))
    assert msg.startswith("workload: model: mixtral-8x7b is a mixture-of-experts model"), msg
    assert "kind: moe" in msg


def test_kv_on_disk_needs_a_disk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = _flexgen_text("  placement: flexgen", "  placement: {name: fixed, kv_gpu: 0.0, "
                         "kv_disk: 1.0, weights_gpu: 0.0, weights_cpu: 1.0}")  # fmt: skip
    msg = cli_error(tmp_path, capsys, text)
    assert "kv_disk > 0 needs a disk tier (workload.disk)" in msg, msg


def test_bad_disk_fields_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = "  ssd_bandwidth_Bps: 2.0e9"
    msg = cli_error(tmp_path, capsys, _flexgen_text(base, base + "\n  disk: {type: floppy}"))
    assert msg.startswith("workload: disk.type: unknown drive 'floppy'"), msg
    bad = base + "\n  disk: {type: gcp-t4-vm-ssd, read: {peak_Bps: -1}}"
    msg = cli_error(tmp_path, capsys, _flexgen_text(base, bad))
    assert msg.startswith("workload: disk.read.peak_Bps: must be > 0"), msg
    with pytest.raises(StorageError, match=r"disk\.speed: unknown field"):
        storage_spec("gcp-t4-vm-ssd", {"speed": 1})


@pytest.mark.slow
def test_shipped_write_latency_equals_a_refit() -> None:
    from hetsim.devices.storage import storage_catalogue
    from hetsim.devices.storage_calibration import fit, load_points, residuals

    pts = load_points("mixdk-nvme", "write")
    d = fit(pts)
    for drive in storage_catalogue().values():
        assert drive.write.latency_s == pytest.approx(d.latency_s, abs=0.05e-6)
    res = sorted(abs(r) for r in residuals(d, pts))
    assert res[len(res) // 2] < 0.05 and res[-1] < 0.25
