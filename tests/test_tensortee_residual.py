"""TensorTEE's residual costs, and the step's task graph against the closed-form flow shop."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import hetsim
from hetsim.workloads.tee.collab_costs import step_tasks
from hetsim.workloads.tee.dag import makespan_s
from hetsim.workloads.tee.pipeline import flow_shop

TT = "tensortee"


def _run(**kw: object) -> dict:
    res = hetsim.run(TT, workload__model="gpt3-1.3b", workload__steps=2, **kw)
    return res.summary.iloc[0].to_dict()


def test_residual_costs_move_the_overhead() -> None:
    base = _run(policies__protection="tensortee")
    # undetected tensor bytes fall back to cacheline protection: more metadata, slower
    miss = _run(policies__protection="tensortee", workload__detect_miss_rate=0.5)
    assert miss["metadata_bytes"] > 10 * base["metadata_bytes"]
    assert miss["step_s"] > base["step_s"]
    # more interleaved streams than the detector tracks: Adam's 4-array streams fall back
    blind = _run(policies__protection="tensortee", workload__detector_streams=2)
    assert blind["metadata_bytes"] > base["metadata_bytes"]
    # a MAC engine far faster than HBM removes the accumulation bound
    fast = _run(policies__protection="tensortee", workload__accel_mac_Bps=1e15)
    assert fast["step_s"] <= base["step_s"]
    # the commit barrier sits on the send stage of every layer's gradients: 24 layers,
    # pipelined behind the CPU, so it adds at most 24 x 1 ms
    slow = _run(policies__protection="tensortee", workload__commit_latency_s=1e-3)
    assert 0 < slow["step_s"] - base["step_s"] <= 24e-3 + 1e-9


def test_one_cpu_thread_budget_for_adam_and_reencryption() -> None:
    one = _run(policies__protection="cacheline", workload__cpu_threads=1)
    four = _run(policies__protection="cacheline", workload__cpu_threads=4)
    # re-encryption is 4 crypto passes per byte moved; 4 threads cut it about 4x
    assert four["reencrypt_s"] == pytest.approx(one["reencrypt_s"] / 4, rel=0.15)
    assert four["reencrypt_bytes"] == one["reencrypt_bytes"]
    # the default budget is every core (56 on the Xeon 8480), for every protection
    full = {s: _run(policies__protection=s) for s in ("cacheline", "tensortee", "none")}
    assert {r["cpu_threads"] for r in full.values()} == {56}
    # Adam runs on the same threads: one thread slows the unprotected step too
    # (Adam's 32 B/param of traffic at one core's 25 GB/s instead of the socket's)
    plain_one = _run(policies__protection="none", workload__cpu_threads=1)
    assert plain_one["step_s"] > 2 * full["none"]["step_s"]
    # with equal budgets the cacheline baseline's re-encryption shrinks with the threads:
    # at the full socket it is 4 x 2 x 2.6 GB of AES-GCM at 56 x 3.125 GB/s, about 0.12 s
    assert full["cacheline"]["reencrypt_s"] < 0.2 * one["reencrypt_s"]
    assert full["cacheline"]["step_s"] < 2 * full["tensortee"]["step_s"]


def test_task_graph_equals_the_flow_shop() -> None:
    # 3 layers, 2 micro-batches: forward 1 s per layer and micro-batch, backward 2 s;
    # the last backward flows through 6 stages (uneven so queues form)
    cfg = SimpleNamespace(shape=SimpleNamespace(layers=3), micro_batches=2)
    row = [2.0, 0.5, 1.0, 3.0, 1.0, 0.5]
    tasks = step_tasks(cfg, row, 1.0, 2.0)  # type: ignore[arg-type]
    times = np.repeat(np.asarray(row)[:, None], 3, axis=1)
    # 6 forwards + 3 backwards, then the flow shop: stage 3 (3 s) bounds it:
    # 2 + 0.5 + 1 + 3 x 3 + 1 + 0.5 = 14
    assert flow_shop(times).makespan_s == pytest.approx(14.0)
    assert makespan_s(tasks) == pytest.approx(6 * 1.0 + 3 * 2.0 + 14.0)
