"""Energy of the moe, offload and tee kinds (workloads/metered.py, EnergyMeter.window):
conservation against the power model worked out by hand from each run's busy times,
idle-only and TDP-only bounds, direction of effect, and declared metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import hetsim
from hetsim.devices.catalogue import device_spec
from hetsim.devices.energy import power_series
from hetsim.devices.energy_meter import EnergyMeter
from hetsim.devices.kernels import kernel_fits
from hetsim.devices.power import compute_roof_flops, dram_W, power_model
from hetsim.simulator.recorder import Recorder
from hetsim.simulator.registry import workloads
from hetsim.workloads.tee.models import dnn_table
from tests.conftest import ROOT

SC = ROOT / "scenarios"


def _run(name: str, **over: Any) -> Any:
    return hetsim.run(SC / f"{name}.yaml", overrides=over)


def _rows(res: Any) -> dict[str, Any]:
    return {r["device"]: r for r in res.tables["energy"].to_dict("records")}


def _series_J(res: Any, device: str, end_s: float, idle_W: float) -> float:
    """Integral of a device's power step function over [0, end_s], idle outside it."""
    t, w = power_series(res.recorder, device)
    if len(t) == 0:
        return idle_W * end_s
    return float(np.sum(w[:-1] * np.diff(t))) + idle_W * (t[0] + end_s - t[-1])


def test_window_books_one_interval_and_draws_its_mean() -> None:
    pm = power_model(device_spec("a100-80gb"))
    rec = Recorder()
    m = EnergyMeter(pm, rec, "gpu")
    # 2 s of kernels inside [1, 5], 0.5 s of them at the compute roof
    power = m.window(1.0, 5.0, 2.0, 0.5)
    extra = 2.0 * (pm.memory_W - pm.idle_W) + 0.5 * (pm.limit_W - pm.memory_W)
    assert m.active_J == pytest.approx(extra) and m.busy_s == 2.0
    assert power == pytest.approx(pm.memory_W + (pm.limit_W - pm.memory_W) * 0.25)
    assert m.peak_W == power
    assert m.window(5.0, 6.0, 0.0, 0.0) == pm.idle_W  # nothing busy: nothing booked
    t, w = power_series(rec, "gpu")
    assert list(t) == [1.0, 5.0]
    assert w[0] == pytest.approx(pm.idle_W + extra / 4.0) and w[1] == pm.idle_W
    assert m.energy_J(10.0) == pytest.approx(pm.idle_W * 10.0 + extra)


def test_tee_verify_energy_by_hand() -> None:
    res = _run("tee_verify", **{"workload.batches": 2, "outputs.spans": True})
    row = res.summary_row
    T, n = row["makespan_s"], 2
    gpu, cpu = power_model(device_spec("titan-xp")), power_model(device_spec("core-i7-6700"))
    # per batch the GPU runs gpu_s of linear layers (VGG16-ImageNet FLOPs x 16 images at
    # its fp32 roof), the enclave tee_s on the CPU at its TDP; copies draw nothing extra
    flops = float(dnn_table("vgg16-imagenet").fwd_flops.sum()) * 16
    c = flops / compute_roof_flops(device_spec("titan-xp"), "fp32")
    d = row["gpu_s"]
    gpu_J = gpu.idle_W * T + n * (
        (gpu.memory_W - gpu.idle_W) * d + (gpu.limit_W - gpu.memory_W) * min(c, d)
    )
    cpu_J = cpu.idle_W * T + n * (cpu.limit_W - cpu.idle_W) * row["tee_s"]
    rows = _rows(res)
    assert rows["box/gpu"]["energy_J"] == pytest.approx(gpu_J, rel=1e-9)
    assert rows["box/cpu"]["energy_J"] == pytest.approx(cpu_J, rel=1e-9)
    dram = dram_W(device_spec("core-i7-6700").memory_bytes) * T  # catalogue memory
    assert row["energy_J"] == pytest.approx(gpu_J + cpu_J + dram, rel=1e-9)
    assert row["energy_devices_J"] == pytest.approx(row["energy_J"], rel=1e-12)  # one box
    assert row["energy_per_image_J"] == pytest.approx(row["energy_J"] / 32, rel=1e-12)
    assert row["energy_per_batch_J"] == pytest.approx(row["energy_J"] / 2, rel=1e-12)
    # the power track integrates to the same energy
    assert _series_J(res, "box/gpu", T, gpu.idle_W) == pytest.approx(gpu_J, rel=1e-9)
    assert _series_J(res, "box/cpu", T, cpu.idle_W) == pytest.approx(cpu_J, rel=1e-9)


def _bounds(res: Any) -> None:
    """Every device between idle all along and its power limit all along; the device's
    busy draw between memory-bound and compute-bound."""
    row, T = res.summary_row, None
    for name, r in _rows(res).items():
        pm = power_model(device_spec(r["type"]))
        T = r["energy_J"] / r["avg_power_W"] if r["avg_power_W"] > 0 else T
        assert T is not None
        busy = r["busy_s"]
        lo = pm.idle_W * T + (pm.memory_W - pm.idle_W) * busy
        hi = pm.idle_W * T + (pm.limit_W - pm.idle_W) * busy
        assert lo * (1 - 1e-9) <= r["energy_J"] <= hi * (1 + 1e-9), name
        assert pm.idle_W * T * (1 - 1e-9) <= r["energy_J"] <= pm.limit_W * T * (1 + 1e-9)
    assert row["energy_J"] >= sum(r["energy_J"] for r in _rows(res).values())


def test_moe_gpu_and_cpu_energy_follow_the_busy_times() -> None:
    """HybriMoE on an A6000 + Xeon: experts on both; the meters hold the mechanism's busy
    times, the CPU at its TDP while busy, the GPU between its memory-bound and limit draw,
    and the power tracks integrate to the meters."""
    res = _run("hybrimoe", **{"workload.output_tokens": 4, "outputs.spans": True})
    row = res.summary_row
    rows = _rows(res)
    T = rows["workstation/gpu"]["energy_J"] / rows["workstation/gpu"]["avg_power_W"]
    assert rows["workstation/gpu"]["busy_s"] == pytest.approx(row["gpu_busy_frac"] * T, rel=1e-9)
    assert rows["workstation/cpu"]["busy_s"] == pytest.approx(row["cpu_busy_frac"] * T, rel=1e-9)
    assert row["cpu_busy_frac"] > 0
    cpu = power_model(device_spec("xeon-gold-5220r"))
    cpu_J = cpu.idle_W * T + (cpu.limit_W - cpu.idle_W) * row["cpu_busy_frac"] * T
    assert rows["workstation/cpu"]["energy_J"] == pytest.approx(cpu_J, rel=1e-9)
    _bounds(res)
    for name, r in rows.items():
        idle = power_model(device_spec(r["type"])).idle_W
        assert _series_J(res, name, T, idle) == pytest.approx(r["energy_J"], rel=1e-9)
    tokens = 4 * res.scenario["workload"]["batch"]
    assert row["energy_per_output_token_J"] == pytest.approx(row["energy_devices_J"] / tokens)
    assert row["tokens_per_J"] == pytest.approx(tokens / row["energy_devices_J"])


def test_moe_decode_gpu_energy_by_hand() -> None:
    """AdapMoE's Mixtral-8x7B decode on an RTX 4090, every expert on the GPU: the GPU's
    energy is idle over the run, memory_W over its busy time, and the limit's excess over
    memory_W for the time its FLOPs take at the compute roof, the FLOPs counted from the
    model's shapes (32 layers, h 4096, attention 41,943,040 weights, experts 3 h 14336,
    vocab 32,000; one token per step over a context of 64 + step)."""
    res = _run("adapmoe", **{"workload.phase": "decode", "workload.output_tokens": 4})
    row, rows = res.summary_row, _rows(res)
    gpu = rows["desktop/gpu"]
    T = gpu["energy_J"] / gpu["avg_power_W"]
    layers, h, attn, ffn, vocab = 32, 4096, 41943040, 14336, 32000
    pairs = int(res.tables["layers"]["gpu_experts"].sum())  # one token: pairs = experts
    assert row["gpu_expert_share"] == 1.0
    flops = sum(layers * (2 * attn + 4 * (64 + i + 1) * h) + 2 * vocab * h for i in range(4))
    flops += pairs * 6 * h * ffn
    spec = device_spec("rtx-4090")
    roof = compute_roof_flops(spec, "fp16", kernel_fits(spec).clock_ratio)
    pm = power_model(spec)
    busy = row["gpu_busy_frac"] * T
    expect = pm.idle_W * T + (pm.memory_W - pm.idle_W) * busy
    expect += (pm.limit_W - pm.memory_W) * flops / roof  # decode: below the roof throughout
    assert gpu["energy_J"] == pytest.approx(expect, rel=1e-9)
    assert gpu["busy_s"] == pytest.approx(busy, rel=1e-9)


def test_moe_more_tokens_more_energy_and_tp_peers_counted() -> None:
    few = _run("adapmoe", **{"workload.output_tokens": 4}).summary_row
    more = _run("adapmoe", **{"workload.output_tokens": 8}).summary_row
    assert more["energy_J"] > few["energy_J"] and more["energy_devices_J"] > few["energy_devices_J"]
    assert more["carbon_operational_g"] > few["carbon_operational_g"]
    res = _run("kt-decode-robustness", **{"workload.output_tokens": 2, "workload.batch": 1})
    rows = _rows(res)
    assert len([d for d in rows if d.startswith("host/gpu")]) == 8  # the GPU and 7 peers
    peers = [r for d, r in rows.items() if d.startswith("host/gpu tp")]
    assert all(r["energy_J"] == rows["host/gpu"]["energy_J"] for r in peers)
    row = res.summary_row
    assert row["energy_accelerator_J"] == pytest.approx(8 * rows["host/gpu"]["energy_J"])


def test_offload_energy_follows_the_busy_times_and_the_tokens() -> None:
    res = _run("flexgen", **{"workload.output_tokens": 4, "outputs.spans": True})
    row, rows = res.summary_row, _rows(res)
    T = rows["vm/gpu"]["energy_J"] / rows["vm/gpu"]["avg_power_W"]
    assert rows["vm/gpu"]["busy_s"] == pytest.approx(row["gpu_busy_frac"] * T, rel=1e-9)
    cpu = power_model(device_spec("xeon-gold-5220r"))
    cpu_busy = row["cpu_busy_frac"] * T
    assert cpu_busy > 0  # FlexGen's CPU attention
    assert rows["vm/cpu"]["energy_J"] == pytest.approx(
        cpu.idle_W * T + (cpu.limit_W - cpu.idle_W) * cpu_busy, rel=1e-9)  # fmt: skip
    _bounds(res)
    for name, r in rows.items():
        idle = power_model(device_spec(r["type"])).idle_W
        assert _series_J(res, name, T, idle) == pytest.approx(r["energy_J"], rel=1e-9)
    more = _run("flexgen", **{"workload.output_tokens": 8}).summary_row
    assert more["energy_J"] > row["energy_J"]
    tokens = 4 * res.scenario["workload"]["batch"]
    assert row["energy_per_output_token_J"] == pytest.approx(row["energy_devices_J"] / tokens)


def test_offload_gpu_energy_by_hand() -> None:
    """OPT-30B streamed from host memory to a T4 (weights on the CPU, KV and attention on
    the GPU, one micro-batch of 8): the GPU's FLOPs from the model's shapes (48 layers,
    h 7168, 30e9 parameters less the 2 V h embeddings, vocab 50,272), a prompt of 512 and
    two decode steps."""
    plan = {"name": "fixed", "weights_gpu": 0.0, "weights_cpu": 1.0, "overlap": True,
            "pinned": True}  # fmt: skip
    res = _run("flexgen", **{"policies.placement": plan, "workload.batch": 8,
                             "workload.output_tokens": 2})  # fmt: skip
    row, gpu = res.summary_row, _rows(res)["vm/gpu"]
    assert row["plan"].endswith("att gpu overlap 1 mb 1 pinned 1") and row["cpu_busy_frac"] == 0
    T = gpu["energy_J"] / gpu["avg_power_W"]
    L, h, V, B = 48, 7168, 50272, 8
    per_layer = (30.0e9 - 2 * V * h) / L
    flops = 0.0
    for new, ctx in ((512, 0), (1, 512), (1, 513)):
        att = 4.0 * B * new * (ctx + (new + 1) / 2.0) * h
        flops += L * (2.0 * per_layer * B * new + att) + 2.0 * V * h * B
    spec = device_spec("t4")
    pm = power_model(spec)
    busy = row["gpu_busy_frac"] * T
    expect = pm.idle_W * T + (pm.memory_W - pm.idle_W) * busy
    expect += (pm.limit_W - pm.memory_W) * flops / compute_roof_flops(spec, "fp16")
    assert gpu["energy_J"] == pytest.approx(expect, rel=1e-9)


def test_offload_all_cpu_plan_leaves_the_gpu_out_of_the_run_devices() -> None:
    row = _run("cpu-tee", **{"workload.output_tokens": 4}).summary_row
    assert row["energy_devices_J"] == pytest.approx(row["energy_host_J"], rel=1e-12)
    assert row["energy_J"] > row["energy_devices_J"]  # the unused L4 idles


def test_tee_nna_energy_by_hand_and_steps() -> None:
    res = _run("tee_nna", **{"workload.steps": 2})
    row, rows = res.summary_row, _rows(res)
    T = row["makespan_s"]
    cpu = power_model(device_spec("xeon-8480"))
    cpu_J = cpu.idle_W * T + (cpu.limit_W - cpu.idle_W) * 2 * row["tee_work_s"]
    assert rows["box/cpu"]["energy_J"] == pytest.approx(cpu_J, rel=1e-9)
    _bounds(res)
    nna = sum(r["busy_s"] for d, r in rows.items() if d != "box/cpu")
    assert 0 < nna <= 2 * row["nna_work_s"] * (1 + 1e-12)  # the link time draws no extra
    more = _run("tee_nna", **{"workload.steps": 4}).summary_row
    assert more["energy_J"] > row["energy_J"]
    assert more["energy_per_step_J"] == pytest.approx(row["energy_per_step_J"], rel=1e-9)


def _tensortee_on(tmp_path: Path, device: str, steps: int) -> Any:
    raw = yaml.safe_load((SC / "tensortee.yaml").read_text())
    raw["cluster"]["nodes"][0]["devices"]["npu"]["type"] = device
    raw["workload"].update(steps=steps, model="gpt3-1.3b")
    raw.pop("sweep")
    path = tmp_path / f"tt-{device}-{steps}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return hetsim.run(path)


def test_tee_collab_energy_per_step_and_an_unpriced_npu(tmp_path: Path) -> None:
    two = _tensortee_on(tmp_path, "h100-sxm", 2)
    row, rows = two.summary_row, _rows(two)
    T = row["makespan_s"]
    cpu = power_model(device_spec("xeon-8480"))
    busy = rows["box/cpu"]["busy_s"]
    assert 0 < busy < T
    assert rows["box/cpu"]["energy_J"] == pytest.approx(
        cpu.idle_W * T + (cpu.limit_W - cpu.idle_W) * busy, rel=1e-9)  # fmt: skip
    # the accelerator is busy for its forward and backward kernels (at most the step)
    assert rows["box/npu"]["busy_s"] <= row["accel_utilisation"] * T * (1 + 1e-12)
    _bounds(two)
    four = _tensortee_on(tmp_path, "h100-sxm", 4).summary_row
    assert four["energy_J"] > row["energy_J"]
    assert four["energy_per_step_J"] == pytest.approx(row["energy_per_step_J"], rel=1e-9)
    tokens = 2 * 8 * 2048
    assert row["tokens_per_J"] == pytest.approx(tokens / row["energy_devices_J"])
    # the Ascend 910B has no board power in the catalogue: named, and the totals absent
    npu = _tensortee_on(tmp_path, "ascend-910b", 2).summary_row
    assert npu["energy_unpriced"] == "ascend-910b"
    assert npu["energy_J"] is None and npu["energy_per_step_J"] is None
    assert "energy_J: not computable" in npu["absent_metrics"]
    assert npu["energy_host_J"] > 0


@pytest.mark.parametrize("kind", ["moe", "offload", "tee-collab", "tee-nna", "tee-verify"])
def test_energy_metrics_are_declared(kind: str) -> None:
    metrics = workloads.get(kind).metrics
    for key in ("energy_J", "energy_accelerator_J", "energy_host_J", "avg_power_W",
                "peak_power_W", "avg_power_W_by_type", "peak_power_W_by_type",
                "energy_devices_J", "energy_unpriced", "carbon_operational_g", "carbon_g"):  # fmt: skip
        assert metrics.get(key), (kind, key)
    per = [k for k in metrics if k.startswith(("energy_per_", "carbon_per_"))]
    assert len(per) >= 2 and all(metrics[k] for k in per)


@pytest.mark.parametrize("name", ["adapmoe", "flexgen", "tee_verify", "tee_nna", "tensortee"])
def test_every_energy_column_of_a_run_is_declared(name: str) -> None:
    res = _run(name)
    kind = res.scenario["workload"]["kind"]
    metrics = workloads.get(kind).metrics
    keys = [k for k in res.summary_row if k.startswith(("energy", "carbon", "tokens_per"))
            or "power" in k]  # fmt: skip
    assert keys and all(k in metrics for k in keys), [k for k in keys if k not in metrics]
