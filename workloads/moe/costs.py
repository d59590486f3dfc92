"""Costs of MoE work on one GPU + CPU + PCIe node, priced by the devices' rooflines.

Every time here is :func:`devices.roofline.op_times_s` of an op's FLOPs and bytes on a
device spec, or the topology's copy time over the GPU's PCIe link; nothing is a
constant of a paper. Expert times are tabulated once for every token load a step can
produce (``0..max_tokens``), so the hot path indexes an array.

Ops (``h`` hidden size, ``I`` expert FFN, ``n`` tokens, ``b`` bits per weight):

- routed expert: ``6 h I n`` FLOPs; bytes = weights ``3 h I b / 8`` + activations
  ``4 h n`` (fp16 input and output);
- attention of one layer over ``n`` new tokens with ``c`` tokens of context (mean over the
  new tokens): ``2 P_att n + 4 n c h`` FLOPs (projections, then QK^T and AV with the query
  width taken as ``h``: an approximation for MLA); bytes = weights + KV of the context;
- shared experts / dense FFN: ``6 h F n`` FLOPs, their weights in bytes;
- LM head on the last token: ``2 V h`` FLOPs, its weights in bytes.

Software overheads (parameters, default 0: the pure roofline): a fixed time per expert
call on the GPU and on the CPU, and a CPU intercept once per layer in which the CPU runs
experts (thread-pool wake-up; HybriMoE's profile has it as a first-expert intercept).
With ``cpu_model`` (a :class:`devices.cpu.CpuModel`, scenario ``cpu_model: kernels``)
CPU experts, CPU attention and CPU shared experts are priced by the CPU kernel model
(quantised GEMV/GEMM efficiencies, thread scaling, NUMA, per-call overhead) instead of
the CPU roofline.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from hetsim.devices.cpu import CpuModel
from hetsim.devices.roofline import op_time_s, op_times_s
from hetsim.devices.spec import DeviceSpec
from hetsim.workloads.models.moe import MoEModel


def cpu_override(spec: DeviceSpec, cores: int | None, bandwidth_Bps: float | None) -> DeviceSpec:
    """A CPU spec limited to ``cores`` cores (peaks scaled by cores / spec.cores) and/or a
    different DRAM bandwidth: how a scenario models a core-limited or other host CPU
    until the catalogue has it (reconstruction: linear core scaling)."""
    if cores is None and bandwidth_Bps is None:
        return spec
    peaks = dict(spec.peak_flops)
    n = spec.cores
    if cores is not None:
        if not n:
            raise ValueError(f"cpu_cores: device {spec.name} has no core count to scale")
        if cores > n:
            raise ValueError(f"cpu_cores: {cores} is more than {spec.name}'s {n} cores")
        peaks = {k: v * cores / n for k, v in peaks.items()}
        n = cores
    bw = bandwidth_Bps if bandwidth_Bps is not None else spec.memory_bandwidth_Bps
    return dataclasses.replace(spec, peak_flops=peaks, cores=n, memory_bandwidth_Bps=bw)


@dataclass(frozen=True)
class StepCosts:
    """Per-layer dense work of one step (seconds), on the GPU and on the CPU."""

    attention_gpu_s: float
    attention_cpu_s: float
    shared_gpu_s: float
    shared_cpu_s: float
    dense_ffn_gpu_s: float
    lm_head_s: float


_UNIT: dict[int, np.ndarray] = {}


def read_only(a: np.ndarray) -> np.ndarray:
    """``a`` with its writeable flag cleared (views hand policies read-only arrays)."""
    a.setflags(write=False)
    return a


def unit_loads(n: int) -> np.ndarray:
    """Read-only int64 loads of ``n`` experts with one token each (every decode layer-step
    under top-k gating), built once and shared."""
    a = _UNIT.get(n)
    if a is None:
        a = _UNIT[n] = read_only(np.ones(n, dtype=np.int64))
    return a


class MoECosts:
    """Roofline prices of a model's ops on one GPU and one CPU, plus the expert copy time."""

    def __init__(
        self,
        model: MoEModel,
        gpu: DeviceSpec,
        cpu: DeviceSpec,
        copy_s: float,
        *,
        expert_bits: float,
        dense_bits: float,
        gpu_dtype: str,
        cpu_dtype: str,
        max_tokens: int,
        gpu_expert_overhead_s: float = 0.0,
        cpu_expert_overhead_s: float = 0.0,
        cpu_layer_overhead_s: float = 0.0,
        cpu_model: CpuModel | None = None,
        cpu_format: str = "q4_k",
        cpu_calls_per_expert: int = 2,
    ) -> None:
        self.model, self.gpu, self.cpu = model, gpu, cpu
        self.copy_s = copy_s
        self.dense_bits = dense_bits
        self.gpu_dtype, self.cpu_dtype = gpu_dtype, cpu_dtype
        self.expert_bytes = model.expert_bytes(expert_bits)
        loads = np.arange(max_tokens + 1, dtype=float)
        flops = model.expert_flops(1) * loads
        nbytes = self.expert_bytes + 4.0 * model.hidden * loads
        self.gpu_expert_s = op_times_s(gpu, flops, nbytes, gpu_dtype)
        self.cpu_model, self.cpu_format = cpu_model, cpu_format
        if cpu_model is None:
            self.cpu_expert_s = op_times_s(cpu, flops, nbytes, cpu_dtype)
        else:  # cpu_calls_per_expert kernel calls (0: one fused call per layer)
            self.cpu_expert_s = (
                cpu_model.matmul_times_s(
                    model.expert_params(), loads, self.expert_bytes, cpu_format, 4.0 * model.hidden
                )
                + (cpu_calls_per_expert - 1) * cpu_model.k.call_overhead_s
            )
        self.gpu_expert_s[1:] += gpu_expert_overhead_s
        self.cpu_expert_s[1:] += cpu_expert_overhead_s
        self.gpu_expert_s[0] = self.cpu_expert_s[0] = 0.0
        self.cpu_first_s = cpu_layer_overhead_s
        self._unit_times: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def expert_times(self, loads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Read-only (GPU, CPU) seconds of experts at ``loads`` tokens each; built once per
        length for the shared arrays of :func:`unit_loads`."""
        n = len(loads)
        if loads is _UNIT.get(n):
            hit = self._unit_times.get(n)
            if hit is None:
                hit = self._unit_times[n] = self._times(loads)
            return hit
        return self._times(loads)

    def _times(self, loads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return read_only(self.gpu_expert_s[loads]), read_only(self.cpu_expert_s[loads])

    def _ffn(self, spec: DeviceSpec, dtype: str, ffn: int, tokens: int) -> float:
        params = 3 * self.model.hidden * ffn
        if params == 0:
            return 0.0
        nbytes = params * self.dense_bits / 8 + 4.0 * self.model.hidden * tokens
        if spec is self.cpu and self.cpu_model is not None:
            return self.cpu_model.matmul_time_s(params, tokens, nbytes, self.cpu_format)
        return op_time_s(spec, 2.0 * params * tokens, nbytes, dtype)

    def _attention(
        self, spec: DeviceSpec, dtype: str, tokens: int, context: int, seqs: int = 1
    ) -> float:
        m = self.model
        new = tokens / seqs  # new tokens per sequence
        mean_ctx = context + (new + 1) / 2.0
        flops = 2.0 * m.attention_params * tokens + 4.0 * tokens * mean_ctx * m.hidden
        kv = m.kv_bytes_per_token / m.layers * seqs * (context + new)
        weights = m.attention_params * self.dense_bits / 8
        nbytes = weights + kv + 4.0 * m.hidden * tokens
        if spec is self.cpu and self.cpu_model is not None:
            proj = self.cpu_model.matmul_time_s(m.attention_params, tokens, weights,
                                                self.cpu_format)  # fmt: skip
            return proj + self.cpu_model.stream_time_s(
                kv, flops - 2.0 * m.attention_params * tokens
            )
        return op_time_s(spec, flops, nbytes, dtype)

    def step(self, tokens: int, context: int, seqs: int = 1) -> StepCosts:
        """Dense per-layer work of a step over ``tokens`` new tokens of ``seqs``
        sequences after ``context`` tokens each."""
        m = self.model
        g, c = (self.gpu, self.gpu_dtype), (self.cpu, self.cpu_dtype)
        shared = m.shared_experts * m.shared_ffn
        lm_params = m.vocab * m.hidden
        return StepCosts(
            attention_gpu_s=self._attention(*g, tokens, context, seqs),
            attention_cpu_s=self._attention(*c, tokens, context, seqs),
            shared_gpu_s=self._ffn(*g, shared, tokens),
            shared_cpu_s=self._ffn(*c, shared, tokens),
            dense_ffn_gpu_s=self._ffn(*g, m.dense_ffn, tokens),
            lm_head_s=op_time_s(
                self.gpu, 2.0 * lm_params, lm_params * self.dense_bits / 8, self.gpu_dtype
            ),
        )
