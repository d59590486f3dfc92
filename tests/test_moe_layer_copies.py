"""kt-kernel's layerwise GPU prefill by hand: a layer's routed experts start on the GPU
only once every copy of the layer has landed (``after_all_copies``), against the default
where each expert starts as its own weights land."""

from __future__ import annotations

import numpy as np
import pytest

from hetsim.workloads.moe.costs import StepCosts
from hetsim.workloads.moe.layer import timeline
from hetsim.workloads.moe.residency import Residency
from hetsim.workloads.moe.view import Placement, PlacementView

A = np.asarray


def _layer(after_all: bool) -> tuple[float, float, float, list[tuple[str, str, float, float]]]:
    # experts 0 and 1, both uncached: copy 2 s each (FIFO), GPU 1 s each; no CPU experts.
    # Layer starts at 10; attention 0.5 -> router 10.5; shared experts 0.25 -> GPU free 10.75.
    view = PlacementView(0, "prefill", A([0, 1]), A([1, 1]), A([False, False]), A([0.0, 0.0]),
                         A([1.0, 1.0]), A([9.0, 9.0]), 0.3, 2.0, 0.25, 0.0, 0.0, False,
                         0.75, 2.0)  # fmt: skip
    res = Residency((2,), 2, 2.0)
    step = StepCosts(0.5, 1.5, 0.25, 0.5, 0.0, 0.0)
    _, end, _, _, stall, copies, spans = timeline(
        view, Placement((0, 1), ()), res, 10.0, step, True, None, after_all
    )
    assert copies == 2
    return end, stall, res.pcie_free_s, spans


def test_experts_wait_for_the_whole_layer_of_copies() -> None:
    # as they land: copy 10.5-12.5, E0 12.5-13.5; copy 12.5-14.5, E1 14.5-15.5;
    # stall 1.75 + 1.0
    end, stall, pcie, spans = _layer(False)
    assert (end, stall, pcie) == (15.5, pytest.approx(2.75), 14.5)
    assert ("gpu", "L0E0", 12.5, 13.5) in spans
    # after all copies: the same copies, then E0 14.5-15.5, E1 15.5-16.5; stall 3.75
    end, stall, pcie, spans = _layer(True)
    assert (end, stall, pcie) == (16.5, pytest.approx(3.75), 14.5)
    assert ("pcie", "copy L0E1", 12.5, 14.5) in spans and ("gpu", "L0E0", 14.5, 15.5) in spans
