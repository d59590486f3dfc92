"""kt-kernel's layerwise INT4 expert load (workloads/moe/layer_load.py): the write /
copy / repack / host pipeline by hand in its three regimes, and its direction on a run."""

from __future__ import annotations

import pytest

import hetsim
from hetsim.workloads.moe.layer_load import LayerLoadStages, load_layer


class _Fifo:
    """A copy engine taking one copy of ``copy_s`` at a time, in request order."""

    def __init__(self, copy_s: float) -> None:
        self.copy_s, self.free_s = copy_s, 0.0

    def copy(self, start_s: float) -> tuple[float, float]:
        start = max(self.free_s, start_s)
        self.free_s = start + self.copy_s
        return start, self.free_s


@pytest.mark.parametrize(
    ("host", "repack", "want", "copies"),
    [
        # copy-bound: write of expert 0, three back-to-back copies, the last repack
        (0.5, 0.3, 0.2 + 3 * 1.0 + 0.3, [(0.2, 1.2), (1.2, 2.2), (2.2, 3.2)]),
        # host-bound: each copy waits for the Python loop's previous iteration (2 s)
        (2.0, 0.3, 0.2 + 3 * 2.0, [(0.2, 1.2), (2.2, 3.2), (4.2, 5.2)]),
        # repack-bound: the loop blocks on repack(e - 1), so copy e + 1 waits for it
        (0.5, 2.0, 0.2 + 1.0 + 3 * 2.0, [(0.2, 1.2), (1.2, 2.2), (3.2, 4.2)]),
    ],
)
def test_three_experts_by_hand(
    host: float, repack: float, want: float, copies: list[tuple[float, float]]
) -> None:
    st = LayerLoadStages(host_s=host, write_s=0.2, repack_s=repack)
    end, got = load_layer(_Fifo(1.0), 0.0, 3, st)
    assert end == pytest.approx(want)
    assert [c for pair in got for c in pair] == pytest.approx([c for pair in copies for c in pair])
    assert load_layer(_Fifo(1.0), 5.0, 0, st) == (5.0, [])
    with pytest.raises(ValueError, match="layer load stages"):
        LayerLoadStages(host_s=-1.0, write_s=0.0, repack_s=0.0)


@pytest.mark.slow  # three Mixtral prefills, about 3 s
def test_slow_host_loop_slows_layerwise_prefill() -> None:
    # Mixtral prefill with every expert copied per layer, the fused MoE after the copies
    over = {
        "workload.phase": "prefill", "workload.prompt_tokens": 64,
        "workload.cache_fraction": 0.0, "workload.experts_after_layer_copies": True,
        "policies.placement": "gpu", "policies.prefetch": "none",
    }  # fmt: skip
    scen = "scenarios/mixtral-offload.yaml"
    plain = hetsim.run(scen, overrides=over).summary  # type: ignore[arg-type]
    staged = hetsim.run(scen, overrides={**over, "workload.layer_load_stages": True}).summary  # type: ignore[arg-type]
    slow = hetsim.run(
        scen, overrides={**over, "workload.layer_load_stages": True,
                         "workload.layer_load_host_op_s": 1e-3}
    ).summary  # type: ignore[arg-type]  # fmt: skip
    col = "prefill_tokens_per_s"
    assert slow[col].iloc[0] < staged[col].iloc[0] <= plain[col].iloc[0]
