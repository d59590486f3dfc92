"""The clock regime (``gpu_clocks``, devices/sustained.py) is one decision, exposed with
the same field in every workload that prices GPU GEMMs through the kernel layer: one BF16
GEMM under the same regime is one price in every domain. The reference price is the
hand-worked H100 GEMM class of tests/test_clock_regime.py (kernels.yaml constants)."""

from __future__ import annotations

import numpy as np
import pytest

import hetsim
from hetsim.devices.catalogue import device_spec
from hetsim.devices.kernels import gemm_time_s
from hetsim.devices.precision import Precision
from hetsim.devices.sustained import GPU_CLOCKS_DESCRIPTION
from hetsim.workloads.models.dense import model_spec
from hetsim.workloads.models.moe import load_moe_models
from hetsim.workloads.models.transformer_cost import TransformerCost, prefill_batch
from hetsim.workloads.moe.costs import MoECosts
from hetsim.workloads.moe.workload import MoEParams
from hetsim.workloads.observability.telemetry import TrainingModel
from hetsim.workloads.queueing.demand import LLMPrefillDemand, prefill_cost
from hetsim.workloads.serving.params import ServingParams
from hetsim.workloads.training.model import TransformerSpec
from hetsim.workloads.training.op_cost import OpPricer
from hetsim.workloads.training.ops import Variant
from hetsim.workloads.training.pipeline import PipelineParams
from hetsim.workloads.training.pipeline_cost import layer_costs
from hetsim.workloads.training.step import ParallelTrainingParams
from hetsim.workloads.training.step_cost import StepKnobs
from hetsim.workloads.training.workload import TrainingParams
from tests.conftest import ROOT
from tests.test_clock_regime import _h100_gemm_s

H100 = device_spec("h100-sxm")
BF16 = Precision("bf16", "bf16", "bf16")
M, N, K = 4096.0, 12288.0, 4096.0  # compute-bound: the clock regime shows in full


def _domain_gemms_s(clocks: str) -> dict[str, float]:
    """The same ``(M x K) @ (K x N)`` BF16 GEMM on one H100, priced by the cost object
    each domain builds from its workload fields at regime ``clocks``."""
    serving = ServingParams.model_validate({"model": "llama-3-8b", "gpu_clocks": clocks})
    tc = TransformerCost(model_spec("llama-3-8b"), H100, precision=BF16,
                         overheads=serving.overheads())  # fmt: skip
    demand = LLMPrefillDemand(model="llama-3-8b", dtype="bf16", gpu_clocks=clocks)
    moe = MoECosts(
        load_moe_models()["mixtral-8x7b"], H100, device_spec("xeon-8480"), 0.001,
        expert_bits=16, dense_bits=16, gpu_dtype="bf16", cpu_dtype="fp32", max_tokens=16,
        gpu_clocks=MoEParams.model_validate({"gpu_clocks": clocks}).gpu_clocks,
    )  # fmt: skip
    gpt = TransformerSpec(layers=2, seq_len=4096)
    pipe = layer_costs(H100, gpt, 1, "bf16", np.array([0.0, 1.0]),
                       gpu_clocks=PipelineParams(gpu_clocks=clocks).gpu_clocks)[0]  # fmt: skip
    ops = OpPricer(H100, gpt, Variant(4096), "bf16",
                   StepKnobs(gpu_clocks=TrainingParams(gpu_clocks=clocks).gpu_clocks))  # fmt: skip
    return {
        "serving": float(tc._gemm(M, N, K)),
        "queueing": float(prefill_cost(demand, H100)._gemm(M, N, K)),
        "moe": float(gemm_time_s(H100, moe.fits.fits.gemm, M, N, K, BF16)),
        "training-pipeline": pipe._gemm(M, N, K),
        "training": ops.gemm_s(M, N, K),
    }


@pytest.mark.parametrize(("clocks", "factor"), [("sustained", 0.848), ("boost", 1.0)])
def test_one_gemm_is_one_price_in_every_domain(clocks: str, factor: float) -> None:
    hand = _h100_gemm_s(M, N, K, 989e12 * factor, 2.0)  # BF16 peak x the regime's factor
    for domain, t in _domain_gemms_s(clocks).items():
        assert t == pytest.approx(hand, rel=1e-9), domain


def test_every_workload_exposes_the_same_field_with_one_description() -> None:
    kinds = (ServingParams, LLMPrefillDemand, MoEParams, PipelineParams, TrainingParams,
             ParallelTrainingParams, TrainingModel)  # fmt: skip
    for cls in kinds:
        field = cls.model_fields["gpu_clocks"]
        assert field.default == "sustained", cls.__name__
        assert field.description == GPU_CLOCKS_DESCRIPTION, cls.__name__
    with pytest.raises(ValueError, match="gpu_clocks"):
        LLMPrefillDemand(model="llama-3-8b", gpu_clocks="turbo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="gpu_clocks"):
        MoEParams.model_validate({"gpu_clocks": "turbo"})
    # a roofline pricing has no clock regime: asking for one is an error, not ignored
    with pytest.raises(ValueError, match="gpu_clocks: boost needs an architecture"):
        TrainingModel(gpu_clocks="boost")


def test_prefill_of_a_queueing_demand_speeds_up_at_boost_only_where_a_ratio_is_measured() -> None:
    def prefill_s(device: str, clocks: str) -> float:
        d = LLMPrefillDemand(model="llama-3-8b", dtype="bf16", gpu_clocks=clocks)
        return float(prefill_cost(d, device_spec(device)).iteration_s(prefill_batch(4096)))

    assert prefill_s("h100-sxm", "boost") < 0.95 * prefill_s("h100-sxm", "sustained")
    assert prefill_s("a100-80gb", "boost") == prefill_s("a100-80gb", "sustained")  # ratio 1.0


def test_pipeline_and_moe_runs_take_the_regime_from_their_scenario() -> None:
    # slimpipe: one H100 per stage; its chunks are GEMM- and attention-bound
    path = ROOT / "scenarios" / "slimpipe.yaml"
    sus = hetsim.run(path).summary.iloc[0]
    boost = hetsim.run(path, overrides={"workload.gpu_clocks": "boost"}).summary.iloc[0]
    assert float(boost["iteration_s"]) < 0.95 * float(sus["iteration_s"])
    assert "h100-sxm.sustained<-h200" in str(sus["borrowed_fits"])
    assert "sustained" not in str(boost["borrowed_fits"])
    # moe-cc: Mixtral on an H100; the run lists the ratio it priced with
    path = ROOT / "scenarios" / "moe-cc.yaml"
    over = {"workload.output_tokens": 2}
    sus = hetsim.run(path, overrides=over).summary.iloc[0]
    boost = hetsim.run(path, overrides={**over, "workload.gpu_clocks": "boost"}).summary.iloc[0]
    assert "h100-sxm.sustained<-h200" in str(sus["borrowed_fits"])
    assert "sustained" not in str(boost["borrowed_fits"])
    assert float(boost["ttft_s"]) <= float(sus["ttft_s"])
