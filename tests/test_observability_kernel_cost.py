"""Observability telemetry priced kernel by kernel when the model names an architecture."""

from __future__ import annotations

import pytest

from hetsim.devices.catalogue import device_spec
from hetsim.workloads.observability.telemetry import CommConfig, TrainingModel, base_times
from hetsim.workloads.training.parallel_comm import Fabrics, Layout
from hetsim.workloads.training.step import dense_model
from hetsim.workloads.training.step_cost import MicroBatchCost, StepKnobs


class _Gpu:
    """The part of a ComputeDevice base_times reads."""

    def __init__(self, name: str) -> None:
        self.spec = device_spec(name)


def test_architecture_prices_passes_as_the_training_step_does() -> None:
    comm = CommConfig(link="ib-hdr")
    model = TrainingModel(architecture="llama-2-7b", tokens_per_rank=8192, seq_len=4096)
    got = base_times(model, comm, _Gpu("a100-80gb"), ranks=16)  # type: ignore[arg-type]
    fab = comm.fabric_spec()
    mb = MicroBatchCost(device_spec("a100-80gb"), dense_model("llama-2-7b"), Layout(),
                        Fabrics(fab, fab, fab.bandwidth_Bps), StepKnobs(2, 4096, False))  # fmt: skip
    layers = 32
    assert got.forward_s == pytest.approx(layers * mb.layer_fwd_s() + mb.embedding[0] + mb.head[0])
    assert got.backward_s == pytest.approx(layers * mb.layer_bwd_s() + mb.embedding[1] + mb.head[1])
    # the gradient all-reduce carries the architecture's parameters, not the default P
    assert model.grad_bytes() == int(dense_model("llama-2-7b").params * 2)
    # backward is dgrad + wgrad: about twice the forward
    assert 1.8 < got.backward_s / got.forward_s < 2.6
