"""The eager Hugging Face engine of validation rows E03-E06: its settings come from the
host-side measurements of devices/data/host_dispatch_points.csv, and the cost model turns
them into a launch-bound decode step worked out by hand."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import yaml

from hetsim.devices.catalogue import device_spec
from hetsim.devices.kernels import LaunchModel
from hetsim.devices.precision import Precision
from hetsim.workloads.models.dense import model_spec
from hetsim.workloads.models.transformer_cost import (
    KERNELS_PER_LAYER,
    EngineOverheads,
    TransformerCost,
    decode_batch,
)

ROOT = Path(__file__).resolve().parents[1]
POINTS = ROOT / "devices" / "data" / "host_dispatch_points.csv"
ROWS = ("e03", "e04", "e05", "e06")


def _points() -> dict[str, float]:
    lines = [ln for ln in POINTS.read_text(encoding="utf-8").splitlines() if not ln.startswith("#")]
    return {r["id"]: float(r["value"]) for r in csv.DictReader(lines)}


def _engine(row: str) -> dict[str, object]:
    raw = yaml.safe_load((ROOT / "validation" / f"{row}.yaml").read_text(encoding="utf-8"))
    return dict(raw["workload"])


@pytest.mark.parametrize("row", ROWS)
def test_eager_rows_take_their_engine_from_the_host_measurements(row: str) -> None:
    h = _points()
    w = _engine(row)
    assert w["cuda_graphs"] is False and w["split_projections"] is True
    # 13 kernels in the cost model's table + K, V and gate as GEMMs of their own
    assert w["extra_kernels_per_layer"] == h["H01"] - (KERNELS_PER_LAYER + 3)
    launch = h["H02"] / h["H01"] + h["H05"]
    assert float(w["cpu_launch_s"]) == pytest.approx(launch, rel=0.01)  # type: ignore[arg-type]
    n = int(w["requests"]["output_tokens"])  # type: ignore[index]
    # the text decode of the response so far at every token, its mean over the response
    decode = h["H09"] + h["H08"] * (n + 1) / 2
    outside = h["H04"] + h["H03"] * h["H05"] + h["H07"] + h["H06"] * h["H05"] + decode
    assert float(w["framework_overhead_s"]) == pytest.approx(outside, rel=0.01)  # type: ignore[arg-type]


def test_the_eager_7b_decode_step_is_launch_bound_on_an_a100() -> None:
    """47 kernels per layer x 32 layers + 4 per iteration, each at the per-launch host
    time, take longer than the GPU's kernels; the step is that floor plus the host time
    outside the layers and of the text decode (the GPU waits for both)."""
    w = _engine("e03")
    launch_s, outside_s = float(w["cpu_launch_s"]), float(w["framework_overhead_s"])  # type: ignore[arg-type]
    over = EngineOverheads(
        LaunchModel(cpu_launch_s=launch_s, cuda_graphs=False), outside_s,
        split_projections=True, extra_kernels_per_layer=int(w["extra_kernels_per_layer"]),  # type: ignore[call-overload]
    )  # fmt: skip
    cost = TransformerCost(
        model_spec("llama-2-7b"), device_spec("a100-80gb"), 1,
        Precision("fp16", "fp16", "fp16", 16), None, over,
    )  # fmt: skip
    floor = (47 * 32 + 4) * launch_s
    assert np.isclose(cost._launch_floor_s, floor, rtol=1e-12)
    b = decode_batch(1, 700)
    gpu = sum(v for k, v in cost.breakdown(b).items() if k != "framework")
    assert gpu < floor
    assert np.isclose(cost.iteration_s(b), floor + outside_s, rtol=1e-12)
