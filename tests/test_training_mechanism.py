"""Training mechanism: model states, Korthikanti activations, lifetimes, swap stalls."""

from __future__ import annotations

from collections.abc import Generator
from typing import cast

import numpy as np
import pytest

from hetsim.devices.cluster import Cluster, ClusterConfig
from hetsim.devices.memory import OutOfMemory
from hetsim.simulator.engine import Simulation
from hetsim.workloads.training.exec import Executor, IterationStats
from hetsim.workloads.training.model import (
    STATE_BYTES_PER_PARAM,
    TransformerSpec,
    activation_bytes_per_layer,
)
from hetsim.workloads.training.oom_fallback import OomFallback, victims
from hetsim.workloads.training.ops import Variant, build_sequence
from hetsim.workloads.training.view import SwapOrder, SwapPlan

TINY = dict(layers=2, hidden=16, heads=4, ffn=64, vocab=10, seq_len=8, micro_batch=2)


def test_model_states_16_bytes_per_param() -> None:
    # M01: 7.5B params x 16 B = 120 GB per GPU; M02: ZeRO-3 over 64 ranks, 120/64 = 1.875 GB
    assert pytest.approx(120e9) == STATE_BYTES_PER_PARAM * 7.5e9
    assert pytest.approx(1.9e9, rel=0.02) == STATE_BYTES_PER_PARAM * 7.5e9 / 64
    m = TransformerSpec(**TINY)
    # per layer 4*16^2 + 2*16*64 = 1024 + 2048 = 3072; embeddings 2*10*16 = 320
    assert m.params == 2 * 3072 + 320
    assert m.state_bytes() == 16 * 6464
    assert m.state_bytes(shards=4) == 16 * 6464 // 4


@pytest.mark.parametrize("flash, expected", [(False, 11264), (True, 8704)])
def test_stored_activations_match_korthikanti(flash: bool, expected: int) -> None:
    # s=8, b=2, h=16, a=4, f=4h: s*b*h = 256; eager 256*(34 + 5*4*8/16) = 256*44 = 11264,
    # flash attention drops the 5as^2b term: 256*34 = 8704
    lt = build_sequence(TransformerSpec(**TINY, flash_attention=flash), Variant(8))
    keys = lt.seq.t_key
    layer0 = [t for t in np.flatnonzero(lt.stored) if keys[t][0] == 0]
    assert int(lt.size[layer0].sum()) == expected
    assert activation_bytes_per_layer(8, 2, 16, 4, 64, flash=flash) == expected


def test_lifetimes_and_memory_timeline_two_layers() -> None:
    # ops: embed, 2 x 10 forward, head, head_bwd, 2 x 14 backward, embed_bwd, 3 Adam = 55
    lt = build_sequence(TransformerSpec(**TINY, flash_attention=True), Variant(8))
    assert lt.seq.n_ops == 55
    a1 = lt.key_index[(0, "a1")]  # LN1 output of layer 0: made by op 1, read by qkv (2)
    assert (lt.producer[a1], lt.last_fwd_use[a1], lt.first_bwd_use[a1]) == (1, 2, 49)
    assert lt.seq.op_name[49] == "qkv_wgrad" and lt.last_use[a1] == 49
    mem = lt.memory_timeline()
    # embed: x0 (2sbh = 512); ln1: + a1 512; qkv: + qk 1024 + v 512; head (op 21): x0 +
    # 2 layers x 34 sbh + logits 2*s*b*v = 512 + 17408 + 320
    assert mem[:3].tolist() == [512, 1024, 2560]
    assert mem[21] == 512 + 2 * 8704 + 320
    assert mem[-1] == 0  # nothing live in the optimizer phase


def _executor() -> tuple[Simulation, Executor, Cluster]:
    sim = Simulation(0, record_spans=False)
    cfg = ClusterConfig.model_validate(
        {
            "nodes": [
                {
                    "name": "box",
                    "devices": {"npu": {"type": "ascend-910b"}, "cpu": {"type": "xeon-8480"}},
                    "links": [{"type": "pcie4-x16", "between": ["npu", "cpu"]}],
                }
            ]
        }
    )
    cluster = Cluster(sim, cfg)
    return sim, Executor(cluster, "box/npu", "box/cpu", 0.0), cluster


@pytest.mark.parametrize("prefetch_op, gap_ops", [(46, 2), (47, 1), (48, 0)])
def test_swap_stall_is_copy_minus_gap(prefetch_op: int, gap_ops: int) -> None:
    m = TransformerSpec(
        layers=2, hidden=4096, heads=32, ffn=16384, vocab=10, seq_len=1024, micro_batch=1
    )
    lt = build_sequence(m, Variant(1024))
    op_s = np.full(lt.seq.n_ops, 2e-4)
    sim, ex, cluster = _executor()
    # a1 of layer 0 (8 MiB) leaves after op 2 and comes back after op `prefetch_op`; its
    # consumer (op 49) is ready when op 48 ends: gap = (48 - prefetch_op) ops of 0.2 ms
    plan = SwapPlan((SwapOrder((0, "a1"), in_at_op=prefetch_op),))
    proc = sim.env.process(ex.run(lt, op_s, plan, False))
    sim.run()
    st = proc.value
    copy_s = cluster.copy_time_s("box/cpu", "box/npu", 2 * 1024 * 4096)
    assert copy_s == pytest.approx(5e-6 + 8388608 / (31.5e9 * 0.8094))
    assert st.stall_s == pytest.approx(max(0.0, copy_s - gap_ops * 2e-4), abs=1e-12)
    assert st.d2h_bytes == st.h2d_bytes == 8388608
    assert st.step_s == pytest.approx(lt.seq.n_ops * 2e-4 + st.stall_s)


def _catching(ex: Executor, lt: object, op_s: np.ndarray, plan: SwapPlan,
              out: list[object]) -> Generator:  # fmt: skip
    try:
        out.append((yield from ex.run(lt, op_s, plan, False)))  # type: ignore[arg-type]
    except OutOfMemory as e:  # the workload catches it the same way
        out.append(e)


def test_forced_swap_rather_than_oom_when_allowed() -> None:
    m = TransformerSpec(layers=2, hidden=4096, heads=32, ffn=16384, vocab=10, seq_len=1024)
    lt = build_sequence(m, Variant(1024))
    op_s = np.full(lt.seq.n_ops, 2e-4)
    peak = int(lt.memory_timeline().max())
    for forced in (False, True):
        sim, ex, _ = _executor()
        ex.pool.allocate("states", ex.pool.capacity_bytes - peak + (64 << 20))  # 64 MiB short
        out: list[object] = []
        sim.env.process(_catching(ex, lt, op_s, SwapPlan(forced_swap_on_oom=forced), out))
        sim.run()
        if not forced:
            assert isinstance(out[0], OutOfMemory) and out[0].tag == "activations"
        else:
            assert out[0].forced_swaps >= 1 and out[0].stall_s > 0  # type: ignore[union-attr]


def test_fallback_victims_read_only_the_past() -> None:
    # tensors 0..3: produced at ops 0, 1, 2, 3; consumers (uses) below; at op 5:
    # last touches 0 -> 4, 1 -> 1, 2 -> 5, 3 -> 3; next uses 0 -> 9, 1 -> 6, 2 -> 8, 3 -> 7
    uses = [[4, 9], [1, 6], [5, 8], [3, 7]]
    producer, size = [0, 1, 2, 3], [10, 40, 30, 40]
    assert victims("lru", range(4), 5, uses, producer, size) == [1, 3, 0, 2]
    assert victims("largest", range(4), 5, uses, producer, size) == [1, 3, 2, 0]
    assert victims("oracle-farthest-next-use", range(4), 5, uses, producer, size) == [0, 2, 3, 1]
    # the LRU order does not change when only the future changes
    later = [[4, 6], [1, 9], [5, 7], [3, 8]]
    assert victims("lru", range(4), 5, later, producer, size) == [1, 3, 0, 2]
    assert victims("fail", range(4), 5, uses, producer, size) == []
    # fragmentation f: need / (1 - f) bytes evicted, rounded up
    assert OomFallback(fragmentation=0.0).bytes_to_evict(100) == 100
    assert OomFallback(fragmentation=0.2).bytes_to_evict(100) == 125
    assert OomFallback(fragmentation=0.15).bytes_to_evict(85) == 100


def test_fallback_costs_sync_per_failed_allocation_and_fails_when_told() -> None:
    m = TransformerSpec(layers=2, hidden=4096, heads=32, ffn=16384, vocab=10, seq_len=1024)
    lt = build_sequence(m, Variant(1024))
    op_s = np.full(lt.seq.n_ops, 2e-4)
    peak = int(lt.memory_timeline().max())
    got = {}
    for name, fb in {"free": OomFallback(sync_s=0.0, fragmentation=0.0),
                     "sync": OomFallback(sync_s=0.01, fragmentation=0.0),
                     "frag": OomFallback(sync_s=0.0, fragmentation=0.5),
                     "fail": OomFallback(victims="fail")}.items():  # fmt: skip
        sim, ex, _ = _executor()
        ex.fallback = fb
        ex.pool.allocate("states", ex.pool.capacity_bytes - peak + (16 << 20))  # 16 MiB short
        out: list[object] = []
        sim.env.process(_catching(ex, lt, op_s, SwapPlan(forced_swap_on_oom=True), out))
        sim.run()
        got[name] = out[0]
    assert isinstance(got["fail"], OutOfMemory)
    free, sync, frag = (cast(IterationStats, got[k]) for k in ("free", "sync", "frag"))
    assert free.forced_events >= 1
    # same victims, each failed allocation adds its synchronisation cost to the stall
    assert sync.forced_swaps == free.forced_swaps
    assert sync.stall_s == pytest.approx(free.stall_s + 0.01 * free.forced_events, rel=1e-9)
    # half the evicted bytes unusable: 16 MiB short takes 32 MiB of victims, not 16 + 8
    assert frag.d2h_bytes > free.d2h_bytes
