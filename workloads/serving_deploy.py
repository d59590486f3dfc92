"""What the deployment policy sees (configs with roofline goodput estimates), GPU price
presets, and how a deployment's instances are placed on the cluster's GPUs.

Goodput estimates (requests/s one instance sustains within the SLOs, for the
workload's mean prompt ``P`` and output ``O`` lengths) are closed forms on the
iteration roofline; they are estimates for sizing, the simulation gives the truth:

* prefill: one prompt per iteration with ``T_i = prefill_s(P_i)`` over a sample of
  the workload's prompts; as an M/G/1 queue (Pollaczek-Khinchine) the mean TTFT is
  ``E[T] + lambda E[T^2] / (2 (1 - lambda E[T]))``; keeping it below ``f x S_ttft``
  (``f = slo_mean_fraction``, a sizing constant: a mean below the tail target) gives
  ``G_P = 2D / (E[T^2] + 2D E[T])`` with ``D = f S_ttft - E[T]`` (for a constant
  ``T`` this is ``rho = 2x / (1 + 2x)``, ``x = D / T``: the M/D/1 closed form);
* decode: the largest batch ``b`` with ``decode_s(b, P + O/2) <= S_tpot`` and
  ``b (P + O) <= KV tokens``; ``G_D = b / (decode_s(b) (O - 1))``;
* colocated: over batch sizes ``b``, the largest rate with GPU time
  ``lambda (T + (O - 1) decode_s(b) / b) <= 1`` and, since prefills pause decodes,
  ``decode_s(b) / (1 - lambda E[T]) <= f S_tpot``, and the prefill bound above.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from devices.catalogue import fabric_spec
from devices.collectives import CollectiveFabric
from devices.spec import DeviceSpec
from schedulers.serving.view import ConfigView, InstanceSpec
from simulator import registry
from workloads.models import ModelSpec
from workloads.serving_cost import IterationCost, pcie_fabric

# $/GPU-hour presets beside the catalogue's own ("catalogue": DeviceSpec.prices default).
# Sources: ../shared/papers/serving.md section 3 (confidence tags kept).
PRICE_PRESETS: dict[str, dict[str, float]] = {
    # AWS on-demand list prices, point in time [page]
    "aws-ondemand": {"l4": 0.81, "a10": 1.00, "l40s": 1.84, "a100-80gb": 4.60, "h100-sxm": 8.22},
    # Melange (2024) Table 1 [recall, verify]
    "melange2024": {"l4": 0.70, "a10": 1.01, "a100-80gb": 3.67, "h100-sxm": 7.5164},
    # RunPod list prices, point in time [page]
    "runpod": {"l40s": 1.03, "a100-80gb": 1.94, "h100-sxm": 3.99},
}


def gpu_price(spec: DeviceSpec, preset: str) -> float:
    """$/hour of one GPU of ``spec`` under ``preset`` (KeyError names what is missing)."""
    if preset == "catalogue":
        return spec.price("default").usd_per_hour
    if preset not in PRICE_PRESETS:
        raise KeyError(
            f"price_preset: unknown {preset!r}; valid: catalogue, {', '.join(PRICE_PRESETS)}"
        )
    table = PRICE_PRESETS[preset]
    if spec.name not in table:
        raise KeyError(f"price_preset: {preset} has no price for {spec.name}; has {sorted(table)}")
    return table[spec.name]


@dataclass(frozen=True)
class Slo:
    """Latency targets of a request."""

    ttft_s: float
    tpot_s: float


def tp_fabric(spec: DeviceSpec, fabrics: dict[str, str]) -> CollectiveFabric:
    """The TP all-reduce fabric of ``spec``: the named catalogue fabric, or a ring over
    its PCIe generation's link for GPUs without one."""
    if spec.name in fabrics:
        return fabric_spec(fabrics[spec.name])
    return pcie_fabric(registry.link_types.get(f"pcie{spec.pcie_gen or 4}-x16"))


def prefill_moments(cost: IterationCost, prompts: np.ndarray) -> tuple[float, float]:
    """E[T] and E[T^2] of whole-prompt prefill times over ``prompts``."""
    t = np.array([cost.prefill_s(int(p)) for p in prompts])
    return float(t.mean()), float((t * t).mean())


def prefill_rps(moments: tuple[float, float], ttft_s: float) -> float:
    """``G_P`` of the module docstring for a mean-TTFT target ``ttft_s``."""
    et, et2 = moments
    d = ttft_s - et
    return 2 * d / (et2 + 2 * d * et) if d > 0 else 0.0


def _max_batch(cost: IterationCost, ctx: float, limit: int, slo: Slo) -> int:
    """Largest b <= limit with decode_s(b, ctx) <= S_tpot (0 if none); bisection."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cost.decode_s(mid, ctx) <= slo.tpot_s:
            lo = mid
        else:
            hi = mid - 1
    return lo


def decode_rps(
    cost: IterationCost, prompt: float, output: float, kv: int, slo: Slo, cap: int
) -> float:
    """``G_D`` of the module docstring."""
    b = _max_batch(cost, prompt + output / 2, min(cap, int(kv // (prompt + output))), slo)
    if b == 0:
        return 0.0
    return b / (cost.decode_s(b, prompt + output / 2) * max(output - 1.0, 1.0))


def colocated_rps(
    cost: IterationCost,
    moments: tuple[float, float],
    prompt: float,
    output: float,
    kv: int,
    slo: Slo,
    cap: int,
) -> float:
    """Colocated goodput of the module docstring (batch sizes on a doubling grid)."""
    t = moments[0]
    bound = prefill_rps(moments, slo.ttft_s)
    if bound <= 0:
        return 0.0
    bmax = min(cap, int(kv // (prompt + output)))
    best, b = 0.0, 1
    while b <= bmax:
        d = cost.decode_s(b, prompt + output / 2)
        if d < slo.tpot_s:
            util = 1.0 / (t + max(output - 1.0, 0.0) * d / b)
            best = max(best, min(util, (1.0 - d / slo.tpot_s) / t, bound))
        b = b * 2 if b * 2 <= bmax or b == bmax else bmax
    return best


@dataclass(frozen=True)
class Config:
    """A candidate (GPU type, TP) with its cost model and KV capacity."""

    cost: IterationCost
    kv_tokens: int
    view: ConfigView


def candidate_configs(
    model: ModelSpec,
    dtype: str,
    gpus: dict[str, tuple[DeviceSpec, int, int]],
    tp_options: list[int],
    fabrics: dict[str, str],
    mem_fraction: float,
    prompts: np.ndarray,
    output: float,
    slo: Slo,
    preset: str,
    cap: int,
) -> list[Config]:
    """Every (type, TP) that fits the model; ``gpus``: type -> (spec, count, memory);
    ``prompts``: a sample of prompt lengths; ``slo``: already scaled by the fraction."""
    prompt = float(prompts.mean())
    out: list[Config] = []
    short: list[str] = []
    for name, (spec, count, memory) in gpus.items():
        price = gpu_price(spec, preset)
        for tp in tp_options:
            if tp > count:
                continue
            cost = IterationCost(
                model, spec, tp, dtype, tp_fabric(spec, fabrics) if tp > 1 else None
            )
            try:
                kv = cost.kv_capacity_tokens(memory, mem_fraction)
            except ValueError as e:
                short.append(str(e))
                continue
            mom = prefill_moments(cost, prompts)
            view = ConfigView(
                name, tp, tp, tp * price, kv, prefill_rps(mom, slo.ttft_s),
                decode_rps(cost, prompt, output, kv, slo, cap),
                colocated_rps(cost, mom, prompt, output, kv, slo, cap),
            )  # fmt: skip
            out.append(Config(cost, kv, view))
    if not out:
        raise ValueError("; ".join(short) or "no GPU in the cluster for the serving workload")
    return out


def place(
    specs: tuple[InstanceSpec, ...], free: dict[str, dict[str, list[str]]]
) -> list[list[str]]:
    """Device names of each instance: ``tp`` free GPUs of its type on one node.

    ``free``: type -> node -> free device names (consumed). ValueError when the
    deployment asks for more than the cluster has."""
    out: list[list[str]] = []
    for s in specs:
        nodes = free.get(s.gpu_type, {})
        node = next((n for n, devs in nodes.items() if len(devs) >= s.tp), None)
        if node is None:
            raise ValueError(
                f"deployment: no node with {s.tp} free {s.gpu_type} GPU(s) for instance {len(out)}"
            )
        out.append([nodes[node].pop(0) for _ in range(s.tp)])
    return out
