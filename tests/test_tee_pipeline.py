"""Pipelines on hand-made 3-layer cases: pipelined = max of the stages, unpipelined = sum."""

import numpy as np
import pytest

from hetsim.workloads.tee.pipeline import buffered_pipeline, flow_shop


def test_buffered_pipeline_three_layers() -> None:
    tee = np.array([1.0, 1.0, 1.0])
    nna = np.array([2.0, 2.0, 2.0])
    # unpipelined: every layer's TEE part then NNA part: 3 * (1 + 2) = 9
    assert buffered_pipeline(tee, nna, 0).makespan_s == 9.0
    # pipelined: fill (first TEE part, 1) + one max(1, 2) = 2 per layer: 1 + 3 * 2 = 7
    sched = buffered_pipeline(tee, nna, 1)
    assert sched.makespan_s == 7.0
    # the steady-state spacing of NNA starts is the max of the stages
    assert np.diff(sched.start_s[1]).tolist() == [2.0, 2.0]


def test_buffered_pipeline_tee_bound_and_uneven() -> None:
    # TEE-bound: 3 * max(2, 1) + last NNA part 1 = 7
    assert buffered_pipeline(np.full(3, 2.0), np.full(3, 1.0), 1).makespan_s == 7.0
    # uneven, by hand with depth 1:
    # L0: TEE 0-3, NNA 3-4; L1: TEE 3-4, NNA 4-6; L2: TEE 4-6 (gate: NNA started L1 at 4),
    # NNA 6-7
    s = buffered_pipeline(np.array([3.0, 1.0, 2.0]), np.array([1.0, 2.0, 1.0]), 1)
    assert s.start_s.tolist() == [[0, 3, 4], [3, 4, 6]]
    assert s.makespan_s == 7.0
    assert (
        buffered_pipeline(np.array([3.0, 1.0, 2.0]), np.array([1.0, 2.0, 1.0]), 0).makespan_s == 10
    )


def test_depth_bounds_the_run_ahead() -> None:
    # NNA bound (4 per layer), TEE 1 per layer: with depth 1 the TEE may prepare layer j only
    # once the NNA has started layer j-1
    s = buffered_pipeline(np.ones(4), np.full(4, 4.0), 1)
    assert s.start_s[0].tolist() == [0, 1, 5, 9]
    s2 = buffered_pipeline(np.ones(4), np.full(4, 4.0), 2)
    assert s2.start_s[0].tolist() == [0, 1, 2, 5]
    assert s.makespan_s == s2.makespan_s == 17.0  # 1 + 4 * 4
    with pytest.raises(ValueError):
        buffered_pipeline(np.ones(2), np.ones(3), 1)


def test_flow_shop_by_hand() -> None:
    # 2 stages x 3 jobs: stage 0 takes 1, stage 1 takes 2: 1 + 3 * 2 = 7
    s = flow_shop(np.array([[1.0, 1, 1], [2.0, 2, 2]]))
    assert s.end_s.tolist() == [[1, 2, 3], [3, 5, 7]]
    # uneven: stage 0 [2, 1, 3], stage 1 [1, 3, 1]
    # s0 ends 2, 3, 6; s1: 2-3, 3-6, 6-7
    s = flow_shop(np.array([[2.0, 1, 3], [1.0, 3, 1]]), release_s=1.0)
    assert s.end_s.tolist() == [[3, 4, 7], [4, 7, 8]]
