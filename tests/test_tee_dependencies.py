"""DAC'23 task graph by hand, and Nappa's DP against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hetsim.schedulers.tee.nappa import NappaExecution, NappaParams
from hetsim.workloads.tee.dag import Task, makespan_s, task_ends_s
from hetsim.workloads.tee.nna_schedule import step_tasks
from hetsim.workloads.tee.view import DECOMPOSE, TEE, ExecutionView, MicroTimes, OpView

RNG = np.random.default_rng(0)


def _toy(n: int = 3) -> ExecutionView:
    # per op: tee 10; offloaded: mask 3, meta-key 3, unmask+nonlinear 3 (protect 9),
    # NNA 6; forward gets 1/3 of every pass, backward 2/3; the meta-key is whole
    op = OpView("op", True, 10.0, 9.0, (6.0,), (0.0,), 3.0, 3.0)
    return ExecutionView(("nna",), tuple(op._replace(name=f"op{i}") for i in range(n)), 0.0)


def test_dag_priority_and_dependencies() -> None:
    tasks = [
        Task("bg", "r", 3.0, (), 1),  # background, ready at 0: defers to 'a'
        Task("a", "r", 1.0),
        Task("b", "", 2.0, (1,)),  # no resource: a delay after 'a'
        Task("c", "r", 1.0, (0, 2)),
    ]
    assert task_ends_s(tasks) == [4.0, 1.0, 3.0, 5.0]
    assert makespan_s(tasks) == 5.0


def test_dac23_critical_path_on_three_layers_equals_the_hand_schedule() -> None:
    view = _toy()
    # TEE only: 3 x 10
    assert makespan_s(step_tasks(view, (TEE,) * 3, 0)) == pytest.approx(30.0)
    # no prefetch: per op forward key 3 + mask 1 + NNA 2 + unmask 1 = 7, backward
    # mask 2 + NNA 4 + unmask 2 = 8: 3 x 7 + 3 x 8 = 45
    assert makespan_s(step_tasks(view, (0,) * 3, 0)) == pytest.approx(45.0)
    # prefetch depth 1 (hand list schedule): mask0 [0,1], key0 [1,4] while NNA0 [1,3],
    # unmask0 [4,5], key1 [5,8], mask1 [8,9], NNA1 [9,11], key2 [9,12], unmask1
    # [12,13], mask2 [13,14], NNA2 [14,16], unmask2 [16,17], backward 3 x 8 = 24: 41
    ends = task_ends_s(step_tasks(view, (0,) * 3, 1))
    assert max(ends) == pytest.approx(41.0)
    # the masking of layer j+1 never starts before layer j is unmasked
    tasks = step_tasks(view, (0,) * 3, 1)
    starts = {t.name: e - t.duration_s for t, e in zip(tasks, ends, strict=True)}
    finish = {t.name: e for t, e in zip(tasks, ends, strict=True)}
    assert starts["op1 fwd mask"] >= finish["op0 fwd unmask"]
    assert starts["op2 fwd mask"] >= finish["op1 fwd unmask"]


def _brute(view: ExecutionView, depth: int) -> float:
    per_op = [[TEE, *range(len(view.nnas)), DECOMPOSE] for _ in view.ops]
    best = float("inf")
    for pl in itertools.product(*per_op):
        ok = all(
            k == TEE
            or (op.offloadable and np.isfinite(op.nna_s if k == DECOMPOSE else op.nna_s[k]).all())
            for op, k in zip(view.ops, pl, strict=True)
        )
        if ok:
            best = min(best, makespan_s(step_tasks(view, pl, depth)))
    return best


def test_nappa_equals_brute_force_on_four_operators() -> None:
    inf = float("inf")
    ops = (
        OpView("conv", True, 12.0, 6.0, (3.0, 4.0), (1.0, 0.5), 2.0, 2.5),
        OpView("attn", False, 2.0, 0.0, (inf, inf), (0.0, 0.0)),
        OpView("fc1", True, 9.0, 7.0, (2.0, 6.0), (0.5, 0.5), 1.0, 4.0),
        OpView("fc2", True, 1.5, 3.0, (0.5, inf), (0.2, 0.2), 1.0, 1.0),
    )
    for toll in (0.0, 0.7):
        base = ExecutionView(("gpu", "npu"), ops, toll)
        view = base._replace(estimate_s=lambda pl, d, v=base: makespan_s(step_tasks(v, pl, d)))
        for depth in (0, 1):
            plan = NappaExecution(NappaParams(depth=depth), RNG).plan(view)
            got = makespan_s(step_tasks(view, plan.placement, depth))
            assert got == _brute(view, depth), (toll, depth, plan)


def test_nappa_decomposes_when_metakeys_dominate() -> None:
    # meta-keys cost 8 per op; decomposing onto both NNAs drops them at the price of the
    # slower NNA: chain 1 + max(2, 3) + 1 = 5 and TEE 2, vs masked 1 + 2 + 1 (+8 of keys)
    op = OpView("fc", True, 40.0, 10.0, (2.0, 3.0), (0.0, 0.0), 1.0, 8.0)
    base = ExecutionView(("a", "b"), (op, op._replace(name="fc2")), 0.0)
    view = base._replace(estimate_s=lambda pl, d: makespan_s(step_tasks(base, pl, d)))
    plan = NappaExecution(NappaParams(), RNG).plan(view)
    assert plan.placement == (DECOMPOSE, DECOMPOSE)
    assert makespan_s(step_tasks(base, plan.placement, 1)) == pytest.approx(10.0)  # 2 x 5


def _one_op(crossings_s: float = 0.0) -> ExecutionView:
    # one op: mask 3, unmask + nonlinear 3 (of it crossings_s per interaction), NNA 6;
    # at 2 micro-batches the NNA takes 3 per micro-batch (no link time)
    op = OpView("op", True, 10.0, 6.0, (6.0,), (0.0,), 3.0, 0.0, crossings_s, 1.0)
    micro = {2: (MicroTimes((3.0,), (0.0,)),)}
    return ExecutionView(("nna",), (op,), 0.0, micro_batch_options=(1, 2), micro=micro)


def test_micro_batch_interleaving_equals_the_hand_schedule() -> None:
    view = _one_op()
    # one batch: forward mask 1 + NNA 2 + unmask 1, backward 2 + 4 + 2: 12 in series
    assert makespan_s(step_tasks(view, (0,), 1)) == pytest.approx(12.0)
    # two micro-batches (hand list schedule, TEE FIFO): fwd mask0 [0,.5], mask1 [.5,1],
    # NNA0 [.5,1.5], NNA1 [1.5,2.5], unmask0 [1.5,2]; bwd mask0 [2,3]; fwd unmask1
    # [3,3.5]; bwd NNA0 [3,5], bwd mask1 [3.5,4.5], bwd NNA1 [5,7], bwd unmask0 [5,6],
    # bwd unmask1 [7,8]
    assert makespan_s(step_tasks(view, (0,), 1, 2)) == pytest.approx(8.0)


def test_micro_batches_conserve_work_and_pay_crossings_per_micro_batch() -> None:
    view = _one_op(crossings_s=0.6)

    def tee_busy(m: int, **kw: bool) -> float:
        return sum(t.duration_s for t in step_tasks(view, (0,), 1, m, **kw) if t.resource == "tee")

    # masking, unmasking and nonlinear work split over the micro-batches; each
    # micro-batch pays its own ECALL/OCALLs (0.6 per op and step): +0.6 at m = 2
    assert tee_busy(1) == pytest.approx(6.0)
    assert tee_busy(2) == pytest.approx(6.6)
    # without the protection overhead only the nonlinear work (1.0) is left on the TEE
    assert tee_busy(2, overhead=False) == pytest.approx(1.0)
    assert tee_busy(1, overhead=False) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="4 micro-batches"):
        step_tasks(view, (0,), 1, 4)
