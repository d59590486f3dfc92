"""ZeRO-Offload optimizer offload: device memory saved and the step's time, worked by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import hetsim
from hetsim.schedulers.training.recompute import FULL_NAMES
from hetsim.schedulers.training.zero_offload import ZeroOffload, ZeroOffloadParams
from hetsim.simulator.cli import main
from hetsim.workloads.training.model import TransformerSpec
from hetsim.workloads.training.offload import (
    CpuAdamCost,
    cpu_adam_s,
    offload_step,
    place_states,
)
from hetsim.workloads.training.ops import Variant, build_sequence
from tests.conftest import ROOT
from tests.test_training_mechanism import TINY, _executor

CH = ROOT / "scenarios" / "chameleon.yaml"
PCIE_BPS = 31.5e9 * 0.8094  # pcie4-x16 bandwidth x fitted efficiency (links.yaml)


def test_policy_asks_for_offload_every_iteration() -> None:
    pol = ZeroOffload(ZeroOffloadParams(), rng=np.random.default_rng(0))
    d = pol.decide(None)
    assert d.plan.offload is not None and d.plan.offload.overlap_grad_copy and not d.profile
    assert d.plan.recompute == () and d.plan.swaps == ()
    full = ZeroOffload(ZeroOffloadParams(recompute="full", max_layers=2), np.random.default_rng(0))
    assert len(full.decide(None).plan.recompute) == 2 * len(FULL_NAMES)


def test_placement_saves_12_bytes_per_param() -> None:
    # TINY: 2 layers x (4*16^2 + 2*16*64 = 3072) + 2*10*16 = 6464 params.
    # device 16 x 6464 = 103424 B; offloaded 4 x 6464 = 25856 B; host 12 x 6464 = 77568 B
    _, ex, _ = _executor()
    params = TransformerSpec(**TINY).params
    assert params == 6464
    place_states(ex.pool, ex.host_pool, params, offloaded=False)
    assert ex.pool.usage_by_tag()["states"] == 103424
    place_states(ex.pool, ex.host_pool, params, offloaded=True)
    assert ex.pool.usage_by_tag()["states"] == 25856
    assert ex.host_pool.usage_by_tag()["optimizer"] == 77568 == 103424 - 25856
    place_states(ex.pool, ex.host_pool, params, offloaded=False)  # and back
    assert ex.pool.usage_by_tag()["states"] == 103424 and not ex.host_pool.usage_by_tag()


def test_run_peak_drops_by_12_bytes_per_param() -> None:
    # same op sequence and activations, so the device peak differs by the states only
    over = {"workload.model": TINY, "workload.size_x_hbm": None, "workload.iterations": 2,
            "workload.variability": {}}  # fmt: skip
    a = hetsim.run(CH, overrides={**over, "policies.swap": "none"}).summary.iloc[0]
    b = hetsim.run(CH, overrides={**over, "policies.swap": "zero-offload"}).summary.iloc[0]
    assert a.device_state_bytes - b.device_state_bytes == 12 * 6464
    assert a.peak_bytes - b.peak_bytes == 12 * 6464
    assert b.offload_d2h_bytes == b.offload_h2d_bytes == 2 * (2 * 6464)  # 2 iterations x 2P


# 2 layers, h 4096, f 16384, v 10, s 1024: per layer 4h^2 + 2hf = 201326592 params,
# embedding and head 10 x 4096 = 40960 each, P = 2 x 201326592 + 81920 = 402735104.
BIG = TransformerSpec(layers=2, hidden=4096, heads=32, ffn=16384, vocab=10, seq_len=1024)
P_LAYER, P_EMB = 201326592, 40960
TAU = 2e-4  # every op 0.2 ms


def _copy_s(nbytes: int) -> float:
    return 5e-6 + nbytes / PCIE_BPS  # alpha-beta time of pcie4-x16


def _adam_s(params: int) -> float:
    # xeon-8480 roofline, fp32: 12 FLOP/param at 7.168 TF x 0.7; 28 B/param at
    # 307.2 GB/s x 0.7922 (memory bound); no launch overhead
    return max(12 * params / (7.168e12 * 0.7), 28 * params / (307.2e9 * 0.7922))


@pytest.mark.parametrize("overlap", [False, True])
def test_iteration_time_by_hand(overlap: bool) -> None:
    # ops: embed 0, layer 0 fwd 1-10, layer 1 fwd 11-20, head 21, head_bwd 22,
    # layer 1 bwd 23-36, layer 0 bwd 37-50, embed_bwd 51, Adam 52-54 (skipped: on the CPU)
    assert BIG.params == 2 * P_LAYER + 2 * P_EMB
    lt = build_sequence(BIG, Variant(1024))
    assert lt.seq.n_ops == 55
    sim, ex, cluster = _executor()
    adam = cpu_adam_s(cluster, "box/cpu", BIG.params, CpuAdamCost())
    assert adam == pytest.approx(_adam_s(BIG.params))
    step = offload_step(BIG, lt, adam)
    op_s = np.full(lt.seq.n_ops, TAU)
    place_states(ex.pool, ex.host_pool, BIG.params, offloaded=True)
    plan = ZeroOffload(ZeroOffloadParams(overlap_grad_copy=overlap), np.random.default_rng(0))
    proc = sim.env.process(ex.run(lt, op_s, plan.decide(None).plan, False, step))
    sim.run()
    st = proc.value
    h2d = _copy_s(2 * BIG.params)
    if overlap:
        # FIFO D2H: end_k = max(ready_k, end_{k-1}) + copy_k, ready at the layer's last bwd op
        end = 23 * TAU + _copy_s(2 * P_EMB)  # head grads after op 22
        end = max(37 * TAU, end) + _copy_s(2 * P_LAYER)  # layer 1 after op 36
        end = max(51 * TAU, end) + _copy_s(2 * P_LAYER)  # layer 0 after op 50
        end = max(52 * TAU, end) + _copy_s(2 * P_EMB)  # embedding after op 51
        expected = end + adam + h2d
    else:  # sum: 52 compute ops, one copy of all 2P grad bytes, Adam, the 2P param copy
        expected = 52 * TAU + _copy_s(2 * BIG.params) + adam + h2d
    assert st.step_s == pytest.approx(expected, rel=1e-12)
    assert st.offload_d2h_bytes == st.offload_h2d_bytes == 2 * BIG.params
    assert st.cpu_adam_s == adam and st.stall_s == 0


def test_overlap_hides_all_but_the_tail_when_copies_are_short() -> None:
    # copies much shorter than the backward gaps: only the embedding's copy (ready at the
    # last bwd op) is exposed, so step = 52 tau + copy(2 v h) + Adam + copy(2P)
    lt = build_sequence(BIG, Variant(1024))
    op_s = np.full(lt.seq.n_ops, 0.1)  # 14 bwd ops x 0.1 s = 1.4 s > 16 ms per layer copy
    sim, ex, _ = _executor()
    step = offload_step(BIG, lt, 0.5)
    plan = ZeroOffload(ZeroOffloadParams(), np.random.default_rng(0)).decide(None).plan
    proc = sim.env.process(ex.run(lt, op_s, plan, False, step))
    sim.run()
    expected = 52 * 0.1 + _copy_s(2 * P_EMB) + 0.5 + _copy_s(2 * BIG.params)
    assert proc.value.step_s == pytest.approx(expected, rel=1e-12)


def test_bad_offload_param_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        CH.read_text().replace("  swap: chameleon", "  swap: {name: zero-offload, recompute: half}")
    )
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "recompute" in err and "Traceback" not in err
