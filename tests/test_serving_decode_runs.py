"""Decode runs (workloads/serving/instance.py): advancing a run of decode-only
iterations in one event gives exactly the tables of one event per iteration."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

import hetsim
from hetsim.devices.catalogue import device_spec
from hetsim.devices.kernels import LaunchModel
from hetsim.devices.precision import Precision
from hetsim.workloads.models.dense import model_spec
from hetsim.workloads.models.transformer_cost import EngineOverheads, TransformerCost
from hetsim.workloads.serving.instance import Instance

_RUN_DONE, _SETTLE = Instance._run_done, Instance.settle
EAGER = EngineOverheads(LaunchModel(cpu_launch_s=2e-4, cuda_graphs=False))


@pytest.mark.parametrize(
    ("model", "gpu", "kw"),
    [
        ("llama-2-7b", "a100-80gb", {}),
        ("llama-3-8b", "h100-sxm", {"precision": Precision.uniform("fp8", kv_cache="fp16")}),
        ("llama-2-7b", "a100-80gb", {"overheads": EAGER}),  # the launch floor binds
        ("llama-2-70b", "a100-80gb", {"tp": 4}),
    ],
)
def test_decode_steps_are_step_s_bit_for_bit(model: str, gpu: str, kw: dict[str, Any]) -> None:
    cost = TransformerCost(model_spec(model), device_spec(gpu), **kw)
    for seqs in (1, 3, 64, 128, cost.table_tokens + 1):
        for ctx in (0, 17, 40_000):
            steps = cost.decode_steps_s(seqs, ctx, 12)
            want = [
                cost.step_s(seqs, seqs, 0, 0, 0.0, 0.0, seqs, ctx + seqs + k * seqs)
                for k in range(12)
            ]
            assert steps == want  # exact: the same floats, not approximately


def _scenario(tmp_path: Any, name: str, **changes: Any) -> Any:
    """A shipped serving scenario, shortened, written next to the test."""
    from pathlib import Path

    src = Path(__file__).resolve().parent.parent / "scenarios" / f"{name}.yaml"
    sc = yaml.safe_load(src.read_text())
    for dotted, value in changes.items():
        node = sc
        *head, last = dotted.split(".")
        for k in head:
            node = node.setdefault(k, {})
        node[last] = value
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sc))
    return path


def _run(path: Any, runs: bool, monkeypatch: Any) -> tuple[dict[str, str], list[int]]:
    """Every table of a run as CSV text (17 digits), the decode runs it finished and
    those in flight when it stopped."""
    monkeypatch.setattr(Instance, "decode_runs", runs)
    count = [0, 0]
    done, settle = _RUN_DONE, _SETTLE

    def counted(self: Instance, ev: object) -> None:
        count[0] += 1
        done(self, ev)

    def settled(self: Instance, end_s: float) -> None:
        count[1] += self._run is not None
        settle(self, end_s)

    monkeypatch.setattr(Instance, "_run_done", counted)
    monkeypatch.setattr(Instance, "settle", settled)
    res = hetsim.run(path)
    out = {"summary": res.summary.to_csv(index=False, float_format="%.17g")}
    for k, df in res.tables.items():
        out[k] = df.to_csv(index=False, float_format="%.17g")
    return out, count


CASES = {
    # Vidur's workload: round-robin, Sarathi chunked prefill, 4 colocated A100s
    "vidur": ("vidur-workload", {"workload.requests.num_requests": 300}),
    # stopped mid-run by until_s: runs in flight are applied up to the stop
    "until": ("vidur-workload", {"workload.requests.num_requests": 300, "until_s": 11.3}),
    # KV pressure: preemptions; least-outstanding routing reads the instances
    "preempt": (
        "vidur-workload",
        {
            "workload.requests.num_requests": 200,
            "workload.mem_fraction": 0.22,
            "workload.requests.rate_per_s": 30,
            "policies.routing": "least-outstanding",
            "policies.batching": {"name": "vllm"},
        },
    ),
    # KV pressure under chunked prefill: a preempted request waits while decodes run
    "preempt-chunked": (
        "vidur-workload",
        {
            "workload.requests.num_requests": 200,
            "workload.mem_fraction": 0.2,
            "workload.requests.rate_per_s": 20,
        },
    ),
    # disaggregated: decode instances receive hand-offs; jsq reads free KV
    "disagg": (
        "disaggregation",
        {
            "workload.requests.num_requests": 150,
            "policies.deployment": {
                "name": "fixed",
                "instances": [
                    {"role": "prefill", "gpu_type": "a100-80gb", "tp": 1, "count": 1},
                    {"role": "decode", "gpu_type": "a100-80gb", "tp": 1, "count": 1},
                ],
            },
        },
    ),
}
FEATURE = {  # what each case must exercise, from its summary
    "preempt": "preemptions",
    "preempt-chunked": "preemptions",
    "disagg": "kv_transfer_bytes",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_decode_runs_give_the_step_by_step_tables(
    tmp_path: Any, monkeypatch: Any, case: str
) -> None:
    name, changes = CASES[case]
    path = _scenario(tmp_path, name, **changes)
    step, none = _run(path, False, monkeypatch)
    fast, runs = _run(path, True, monkeypatch)
    assert none == [0, 0] and runs[0] > 20  # runs were taken, and only when on
    if case == "until":
        assert runs[1] > 0  # a run was in flight at the stop
    if case in FEATURE:
        row = hetsim.run(path).summary.iloc[0]
        assert row[FEATURE[case]] > 0
    assert fast.keys() == step.keys()
    for table in step:
        assert fast[table] == step[table], table
