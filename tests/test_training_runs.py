"""Short seeded runs of the training scenarios: the papers' directions, and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

import hetsim
from hetsim.simulator.cli import main
from tests.conftest import ROOT

CH = ROOT / "scenarios" / "chameleon.yaml"
SP = ROOT / "scenarios" / "slimpipe.yaml"
BRANCH = {"every_iters": 8, "seq_lens": [131072], "branch_ops": 6, "branch_prob": 1.0,
          "moe_ops_max": 0}  # fmt: skip


def _ch(policy: str | dict, size: float, iters: int = 8, **over: object) -> dict:
    o = {"policies.swap": policy, "workload.size_x_hbm": size, "workload.iterations": iters}
    o.update(over)
    return hetsim.run(CH, overrides=o).summary.iloc[0].to_dict()


NO_PLAN = {"name": "none", "forced_swap_on_oom": True}  # the runtime's OOM fallback alone


def test_chameleon_trains_where_none_and_recompute_cannot() -> None:
    # paper: up to 4x HBM. At ~4.3x none and full recompute OOM, Chameleon trains
    assert _ch("none", 4.0, 2)["oom"] == 1
    assert _ch("recompute", 4.0, 2)["oom"] == 1
    big = _ch("chameleon", 4.0, 3)
    assert big["oom"] == 0 and big["footprint_x_hbm"] > 4.0


@pytest.mark.parametrize("victims", ["lru", "largest"])
def test_chameleon_plan_beats_the_runtime_fallback_alone(victims: str) -> None:
    # Training at ~4.3x HBM is not the plan's doing by itself: a run with no plan, whose
    # OOMs the runtime's fallback turns into synchronous swaps, trains the same model.
    # What the plan must show is that it needs far fewer forced swaps and is faster
    # once STABLE (2 warm-up + 3 searching steps), whichever victim order the fallback
    # uses; and with a fallback that fails the allocation the no-plan run is an OOM.
    fb = {"workload.oom_fallback.victims": victims}
    for seed in (0, 1, 2):
        over = {**fb, "seed": seed}
        ch = hetsim.run(CH, overrides={"policies.swap": "chameleon", "workload.size_x_hbm": 4.0,
                                       "workload.iterations": 8, **over})  # fmt: skip
        bare = hetsim.run(CH, overrides={"policies.swap": NO_PLAN, "workload.size_x_hbm": 4.0,
                                         "workload.iterations": 2, **over})  # fmt: skip
        c, b = ch.summary.iloc[0], bare.summary.iloc[0]
        assert c["oom"] == b["oom"] == 0
        steady = ch.tables["iterations"].iloc[5:]
        assert (steady.forced_swaps < 0.5 * b["last_forced_swaps"]).all()
        assert c["last_iteration_s"] < 0.97 * b["last_iteration_s"]
    failing = {"workload.oom_fallback.victims": "fail"}
    assert _ch(NO_PLAN, 4.0, 1, **failing)["oom"] == 1


def test_chameleon_faster_than_full_recompute_at_2x() -> None:
    # paper: up to 38.94% faster than recomputation; here, at ~2.1x HBM, in steady state
    ch = _ch("chameleon", 2.0, 8)
    rc = _ch("recompute", 2.0, 2)
    assert ch["oom"] == rc["oom"] == 0
    assert ch["last_iteration_s"] < 0.95 * rc["iteration_s"]
    assert rc["recompute_s"] > 0 and ch["recompute_s"] == 0


def test_static_plan_breaks_after_op_count_change_chameleon_recovers() -> None:
    over = {"workload.variability": BRANCH}
    runs = {}
    pols = {"index": {"name": "static-swap", "keying": "index"}, "capuchin": "static-swap",
            "chameleon": "chameleon"}  # fmt: skip
    for label, pol in pols.items():
        res = hetsim.run(CH, overrides={"policies.swap": pol, "workload.size_x_hbm": 2.0,
                                           "workload.iterations": 16, **over})  # fmt: skip
        runs[label] = res.tables["iterations"]
    st, cap, ch = runs["index"], runs["capuchin"], runs["chameleon"]
    assert st.op_count[7] != st.op_count[8]  # the branch switched on at iteration 8
    # a plan frozen in op indices stalls more after the change than before it
    assert st.stall_s[8:].min() > 1.5 * st.stall_s[1:8].max()
    # keyed as Capuchin keys it (tensor identity, triggering operation) it survives
    assert cap.stall_s[8:].max() < 1.1 * cap.stall_s[1:8].max()
    assert (cap.forced_swaps[8:] == 0).all()
    # Chameleon re-profiles; it ends faster than either static plan (its plan is better,
    # not its keying)
    assert ch.profiled[8:].sum() >= 2
    # (stall, not step time: the step's compute is the same under every plan)
    assert ch.stall_s.iloc[-1] < 0.5 * st.stall_s.iloc[-1]
    assert ch.step_s.iloc[-1] < st.step_s.iloc[-1]
    assert ch.step_s.iloc[-1] < cap.step_s.iloc[-1]


def test_profiling_overhead_is_a_fraction_of_profiling_every_step() -> None:
    # paper: -84.25%; here the state machine profiles only around sequence changes
    var = {"every_iters": 20, "seq_lens": [131072], "branch_ops": 0, "moe_ops_max": 0}
    a = _ch("chameleon", 1.0, 20, **{"workload.variability": var})
    b = _ch({"name": "chameleon", "profile_every_step": True}, 1.0, 20,
            **{"workload.variability": var})  # fmt: skip
    assert b["profile_s"] > 0 and a["profile_s"] < 0.5 * b["profile_s"]


def _sp(schedule: str, seq: int, recompute: str, **more: object) -> dict:
    o = {"policies.schedule": schedule, "workload.model.seq_len": seq,
         "workload.recompute": recompute, **more}  # fmt: skip
    return hetsim.run(SP, overrides=o).summary.iloc[0].to_dict()


def test_slimpipe_fits_longer_contexts_than_1f1b() -> None:
    # 1F1B stage 0 holds p = 8 microbatches, SlimPipe one microbatch plus (p-1)/n of one
    short = {s: _sp(s, 32768, "none") for s in ("1f1b", "gpipe")}
    short["slimpipe"] = _sp("slimpipe", 32768, "none", **{"policies.schedule.balance": "none"})
    assert short["1f1b"]["oom"] == short["gpipe"]["oom"] == 1 and short["slimpipe"]["oom"] == 0
    ratio = short["slimpipe"]["peak_act_stage0_bytes"] / short["1f1b"]["peak_act_stage0_bytes"]
    assert ratio == pytest.approx((16 + 8 - 1) / 16 / 8)
    assert _sp("1f1b", 524288, "full")["oom"] == 1
    slim = _sp("slimpipe", 524288, "full")
    assert slim["oom"] == 0 and slim["mfu"] > _sp("slimpipe", 524288, "full", **{
        "policies.schedule.balance": "none"})["mfu"]  # fmt: skip


def test_slimpipe_balance_and_fair_512k_baseline() -> None:
    # equal-cost slices: bubble near (p-1)/(m n + p - 1) = 7/135 (P2P and kernel effects
    # allowed 30%); uniform slices under the causal mask leave a much larger bubble.
    # Attention priced from FlashAttention-3's published H100 kernel profile: the fitted
    # attention_prefill class, 128x past its 4K-token fit here, prices a late slice's
    # attention at 79% of peak against 29% for the whole causal sequence, so FLOP-balanced
    # slices are not time-balanced under it (docs/training.md)
    fa3 = {"workload.attention_kernel": "fa3"}
    bal = _sp("slimpipe", 524288, "full", **{"policies.schedule.balance": "equal-cost"}, **fa3)
    uni = _sp("slimpipe", 524288, "full", **{"policies.schedule.balance": "none"}, **fa3)
    assert bal["bubble"] == pytest.approx(7 / 135, rel=0.3) and uni["bubble"] > 2 * bal["bubble"]
    # the default, uniform slices with workload redistribution: heavy slices hand part of
    # their attention to the stage running the mirror slice, whose time is simulated (it
    # runs the share between its own layers and its own units wait), so the bubble shrinks
    # from uniform slices' but stays well above equal-cost slices', with uniform slices'
    # smaller warm-up memory; queueing the share after the partner's unit, or putting the
    # exchange on the heavy device's stream, is slower
    red = _sp("slimpipe", 524288, "full", **fa3)
    assert bal["bubble"] < red["bubble"] < uni["bubble"] and red["exchange_bytes"] > 0
    assert red["iteration_s"] < uni["iteration_s"]
    assert red["peak_act_stage0_bytes"] == uni["peak_act_stage0_bytes"]
    assert red["peak_act_stage0_bytes"] < bal["peak_act_stage0_bytes"]
    bare = {"policies.schedule.exchange_overlap": "none"}
    assert _sp("slimpipe", 524288, "full", **bare, **fa3)["iteration_s"] > red["iteration_s"]
    queue = {"policies.schedule.partner_priority": "queue"}
    assert _sp("slimpipe", 524288, "full", **queue, **fa3)["iteration_s"] > red["iteration_s"]
    # a baseline that fits at 512K on the same 64 GPUs: 1F1B, 4 stages x TP 16, full
    # recompute, holds 4 microbatches; SlimPipe's MFU beats it (paper: up to 1.57x)
    base = _sp("1f1b", 524288, "full", **{"workload.stages": 4, "workload.tp": 16}, **fa3)
    assert base["oom"] == 0 and 1.0 < bal["mfu"] / base["mfu"] < 1.57 * 1.2
    assert red["mfu"] > base["mfu"]


def test_bad_model_explains_what_does_not_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(CH.read_text().replace("size_x_hbm: 2.0", "size_x_hbm: 40.0"))
    assert main(["run", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "workload" in err and "cannot fit even with every activation swapped" in err
    assert "B over the" in err and "model states" in err
    assert not (tmp_path / "out").exists()


def test_unknown_schedule_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(SP.read_text().replace("schedule: slimpipe", "schedule: zb-v"))
    assert main(["validate", str(bad)]) == 2
    assert "zb-v" in capsys.readouterr().err


def test_chameleon_holds_stable_at_2x_without_forced_swaps() -> None:
    # issue 19: the generator counts swap-in buffers and queued swap-outs, so the plan it
    # keeps at ~2.1x HBM needs no forced swap and the state machine stays STABLE
    res = hetsim.run(CH, overrides={"policies.swap": "chameleon", "workload.size_x_hbm": 2.0,
                                    "workload.iterations": 10,
                                    "workload.variability": {"every_iters": 0}})  # fmt: skip
    it = res.tables["iterations"]
    assert it.forced_swaps.iloc[0] > 0  # warm-up: no plan yet, OOMs become forced swaps
    steady = it.iloc[5:]  # 2 warm-up + 3 searching steps, then STABLE
    assert (steady.forced_swaps == 0).all() and (steady.profiled == 0).all()
    assert steady.step_s.max() == pytest.approx(steady.step_s.min(), rel=1e-9)
