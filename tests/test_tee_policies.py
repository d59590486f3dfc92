"""TEE policies on hand-built views (no simulation)."""

import math

import numpy as np

from hetsim.schedulers.tee.cacheline import CachelineParams, CachelineProtection
from hetsim.schedulers.tee.h100_cc import H100CCParams, H100CCProtection
from hetsim.schedulers.tee.nappa import NappaExecution, NappaParams
from hetsim.schedulers.tee.none import NoneParams, NoProtection
from hetsim.schedulers.tee.offload import OffloadExecution, OffloadParams
from hetsim.schedulers.tee.pipelined import PipelinedExecution, PipelinedParams
from hetsim.schedulers.tee.tee_only import TeeOnlyExecution, TeeOnlyParams
from hetsim.schedulers.tee.tensortee import TensorTEEParams, TensorTEEProtection
from hetsim.workloads.tee.view import TEE, ExecutionView, OpView, ProtectionView, StreamView

RNG = np.random.default_rng(0)
VIEW = ProtectionView(
    "xeon-8480", "ascend-910b", "npu",
    (StreamView("weights", "accel", 1e9, True, False),
     StreamView("scratch", "cpu", 1e6, False, True),
     StreamView("optimizer", "cpu", 1e9, True, True)),
)  # fmt: skip


def test_protection_plans() -> None:
    none = NoProtection(NoneParams(), RNG).plan(VIEW)
    assert none.stream_enclaves == (None, None, None) and none.transfer == "plain"
    cl = CachelineProtection(CachelineParams(), RNG).plan(VIEW)
    assert cl.stream_enclaves == ("tnpu-like", "sgx-mee", "sgx-mee")
    assert (cl.transfer, cl.verify) == ("reencrypt", "sync")
    tt = TensorTEEProtection(TensorTEEParams(), RNG).plan(VIEW)
    # tensors at tensor granularity; the non-tensor CPU stream falls back to cacheline
    assert tt.stream_enclaves == ("tensor", "sgx-mee", "tensor")
    assert (tt.transfer, tt.verify) == ("direct", "delayed")
    cc = H100CCProtection(H100CCParams(), RNG).plan(VIEW)
    assert cc.stream_enclaves == ("h100-cc", "tdx", "tdx") and cc.transfer == "bounce"


INF = math.inf
OPS = (
    # tee_s, protect_s, nna_s per NNA, xfer_s per NNA
    OpView("conv", True, 10.0, 1.0, (2.0, 1.0), (1.0, 1.0)),  # NNA0: 4, NNA1: 3
    OpView("tiny", True, 0.5, 1.0, (0.1, INF), (0.1, 0.1)),  # TEE 0.5 beats NNA0 1.2
    OpView("attn", False, 3.0, 0.0, (INF, INF), (0.0, 0.0)),
    OpView("fc", True, 8.0, 1.0, (1.0, 5.0), (1.0, 1.0)),  # NNA0: 3, NNA1: 7
)


def test_execution_baselines() -> None:
    view = ExecutionView(("gpu", "npu"), OPS, 0.01)
    assert TeeOnlyExecution(TeeOnlyParams(), RNG).plan(view).placement == (TEE,) * 4
    off = OffloadExecution(OffloadParams(), RNG).plan(view)
    # fastest NNA per offloadable op; attention stays in the TEE
    assert off.placement == (1, 0, TEE, 0) and off.depth == 0
    fixed = OffloadExecution(OffloadParams(nna=1), RNG).plan(view)
    assert fixed.placement == (1, TEE, TEE, 1)  # 'tiny' unsupported on NNA 1
    pipe = PipelinedExecution(PipelinedParams(depth=3), RNG).plan(view)
    assert pipe.placement == off.placement and pipe.depth == 3


def test_nappa_allocation_by_affinity_and_switch_cost() -> None:
    # small toll: each op where it is cheapest: conv NNA1 (3), tiny TEE (0.5), attn TEE, fc NNA0
    cheap = NappaExecution(NappaParams(), RNG).plan(ExecutionView(("gpu", "npu"), OPS, 0.01))
    assert cheap.placement == (1, TEE, TEE, 0) and cheap.depth == 1
    # toll 2 per device change: conv on NNA1 costs 2 + 3 + 2 = 7 < 10 still; fc: 2 + 3 + 2
    # = 7 < 8; moving tiny out (1.2 + tolls) never pays
    mid = NappaExecution(NappaParams(), RNG).plan(ExecutionView(("gpu", "npu"), OPS, 2.0))
    assert mid.placement == (1, TEE, TEE, 0)
    # toll 5: conv 5 + 3 + 5 = 13 > 10, fc 5 + 3 + 5 = 13 > 8: everything in the TEE
    far = NappaExecution(NappaParams(depth=0), RNG).plan(ExecutionView(("gpu", "npu"), OPS, 5.0))
    assert far.placement == (TEE,) * 4 and far.depth == 0
