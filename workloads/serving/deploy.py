"""What the deployment policy sees (configs with goodput estimates), GPU price
presets, and how a deployment's instances are placed on the cluster's GPUs.

Every goodput in a :class:`ConfigView` (prefill-only, decode-only, colocated, and
colocated per request-size bucket for Melange) comes from ONE predictor,
:class:`workloads.serving_estimate.Estimator`: the largest Poisson rate whose predicted
SLO attainment reaches the sizing attainment (``sizing_attainment``, 0.9), on a held-out
sample of the workload's (prompt, output) lengths, never the measured requests
(``workload.sizing_source``; see that module for the formulas). So the
colocated (vLLM), DistServe, Cauchy and Melange policies size with the same rule.

Request-size buckets (Melange's input for its integer program): the sample is cut at
``PROMPT_EDGES`` x ``OUTPUT_EDGES`` tokens; for each non-empty bucket, the colocated
goodput of one instance serving that bucket's requests alone (Melange profiles each
bucket alone on real GPUs; summing bucket loads linearly is Melange's model, and it
ignores that mixing sizes in one instance widens the prefill-time spread).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property, partial

import numpy as np

from hetsim.devices.catalogue import fabric_spec
from hetsim.devices.collectives import CollectiveFabric
from hetsim.devices.power import compute_roof_flops, power_model
from hetsim.devices.precision import Precision
from hetsim.devices.prices import preset_price, price_presets
from hetsim.devices.spec import DeviceSpec
from hetsim.simulator import registry
from hetsim.workloads.models.dense import ModelSpec
from hetsim.workloads.models.transformer_cost import EngineOverheads
from hetsim.workloads.serving.cost import IterationCost, pcie_fabric
from hetsim.workloads.serving.estimate import Estimator, Lengths, Targets
from hetsim.workloads.serving.view import BucketEstimate, ConfigView, InstanceSpec

DEFAULT_PRICE_PRESET = "aws-ondemand"
"""The preset a scenario that names none gets: one provider (AWS), the only provider in
``devices/prices.yaml`` that rents every serving GPU type of the shipped scenarios."""


def gpu_price(spec: DeviceSpec, preset: str) -> float:
    """$/hour of one GPU of ``spec`` under ``preset``: a provider preset of
    ``devices/prices.yaml`` (KeyError naming the preset and the GPU type when that
    provider has no price for it); ``catalogue``: the device catalogue's default price
    (whichever provider listed each type: mixes providers, and the run warns); ``none``
    prices nothing (0 $/h: cost metrics are 0, for runs about speed only)."""
    if preset == "none":
        return 0.0
    if preset == "catalogue":
        return spec.price("default").usd_per_hour
    if preset not in price_presets():
        raise KeyError(
            f"price_preset: unknown {preset!r}; valid: {', '.join(price_presets())}, "
            "catalogue, none"
        )
    return preset_price(preset, spec.name)


@dataclass(frozen=True)
class Slo:
    """Latency targets of a request."""

    ttft_s: float
    tpot_s: float


def tp_fabric(spec: DeviceSpec, fabrics: dict[str, str]) -> CollectiveFabric:
    """The TP all-reduce fabric of ``spec``: ``fabrics[spec.name]`` (the scenario's
    override) if given, else the device catalogue's ``scaleup_fabric``: a named fabric,
    ``pcie`` (a ring over its PCIe generation's link) or ``link`` (a ring over its
    ``scaleup_link``). A device with none known gets the PCIe ring, and
    :func:`missing_fabrics` names it for the run's warning."""
    name = fabrics.get(spec.name) or spec.scaleup_fabric
    if name == "link" and spec.scaleup_link:
        return pcie_fabric(registry.link_types.get(spec.scaleup_link))
    if name and name not in ("pcie", "link"):
        return fabric_spec(name)
    return pcie_fabric(registry.link_types.get(f"pcie{spec.pcie_gen or 4}-x16"))


def missing_fabrics(
    gpus: dict[str, tuple[DeviceSpec, int, int]], tp_options: list[int], fabrics: dict[str, str]
) -> list[str]:
    """One warning line per GPU type that could run TP > 1 but whose catalogue entry
    names no ``scaleup_fabric`` (and the scenario's ``tp_fabrics`` none)."""
    out = []
    for name, (spec, count, _) in gpus.items():
        if spec.scaleup_fabric or name in fabrics:
            continue
        if not any(1 < tp <= count for tp in tp_options):
            continue
        out.append(
            f"device {name} has no scaleup_fabric in its catalogue entry: its TP "
            f"all-reduces are priced as a ring over PCIe Gen{spec.pcie_gen or 4}; give it "
            "one (a fabric of `hetsim list fabrics`, pcie, or link) or set "
            f"workload.tp_fabrics.{name}"
        )
    return out


# Request-size bucket edges in tokens (bucket i holds edges[i-1] <= n < edges[i]):
# log-spaced like Melange's size grid, coarse enough that each bucket of a
# 256-request sample of the Azure conversation trace holds requests.
PROMPT_EDGES: tuple[int, ...] = (256, 1024, 2048)
OUTPUT_EDGES: tuple[int, ...] = (128, 512)


def bucket_key(prompts: np.ndarray, outputs: np.ndarray) -> np.ndarray:
    """Size-bucket id of each request: prompt bucket x (len(OUTPUT_EDGES) + 1) + output
    bucket (bucket i holds edges[i-1] <= n < edges[i])."""
    pb = np.searchsorted(PROMPT_EDGES, prompts, side="right")
    ob = np.searchsorted(OUTPUT_EDGES, outputs, side="right")
    return pb * (len(OUTPUT_EDGES) + 1) + ob


def size_buckets(
    lengths: Lengths, predicted: np.ndarray | None = None
) -> list[tuple[int, Lengths, float]]:
    """Non-empty size buckets of a sample: (key, its requests, its share). Requests are
    bucketed by ``predicted`` output lengths when given (what routing will see), their
    true lengths in each bucket price its goodput."""
    keys = bucket_key(lengths.prompts, lengths.outputs if predicted is None else predicted)
    out = []
    for key in sorted(set(keys.tolist())):
        sel = keys == key
        out.append((key, Lengths(lengths.prompts[sel], lengths.outputs[sel]), float(sel.mean())))
    return out


def instance_power_W(cost: IterationCost, rate_rps: float, prompt_tokens: float,
                     output_tokens: float) -> float:  # fmt: skip
    """Draw of one instance's GPUs serving ``rate_rps`` requests/s of these mean lengths,
    W, by the power model the run integrates (devices/power.py; the instance's energy in
    ``workloads/serving/instance.py``): busy throughout (continuous batching at its sizing
    rate), at the compute utilisation of the weight GEMMs' FLOPs (2 x active parameters
    per prompt and output token) over the clock model's compute roof, capped at 1. The
    engine's host time between iterations is not taken off (an upper bound)."""
    pm = power_model(cost.spec)
    roof = compute_roof_flops(cost.spec, cost.precision.math_dtype(),
                              cost.transformer.fits.clock_ratio)  # fmt: skip
    active = float(getattr(cost.model, "active_params", cost.model.params))
    s_per_token = 2.0 * active / (cost.tp * roof) if roof > 0 else 0.0
    u = min(1.0, rate_rps * (prompt_tokens + output_tokens) * s_per_token)
    return cost.tp * pm.busy_W(u)


def config_view(
    name: str,
    tp: int,
    usd_per_hour: float,
    est: Estimator,
    buckets: list[tuple[int, Lengths, float]],
    power_cap_w: float | None = None,
) -> ConfigView:
    """The view of one config: its three role goodputs and its per-bucket ones."""
    per_bucket = tuple(
        BucketEstimate(
            float(b.prompts.mean()), float(b.outputs.mean()), share,
            replace(est, lengths=b).goodput("mixed"), key,
        )
        for key, b, share in buckets
    )  # fmt: skip
    mixed = est.goodput("mixed")
    lengths = est.lengths
    watts = instance_power_W(est.cost, mixed, float(lengths.prompts.mean()),
                             float(lengths.outputs.mean()))  # fmt: skip
    return ConfigView(
        name, tp, tp, usd_per_hour, est.kv_tokens, est.goodput("prefill"),
        est.goodput("decode"), mixed, per_bucket, power_cap_w, watts,
    )  # fmt: skip


@dataclass(frozen=True)
class Config:
    """A candidate (GPU type, TP) with its cost model and KV capacity; its
    :class:`ConfigView` (the goodput estimates) is worked out on first use, so a run whose
    policies never read it (a fixed deployment) does not pay for it."""

    gpu_type: str
    tp: int
    cost: IterationCost
    kv_tokens: int
    estimate: Callable[[], ConfigView] = field(repr=False, compare=False)
    power_cap_w: float | None = None

    @cached_property
    def view(self) -> ConfigView:
        """The config's goodput estimates (computed once, on first use)."""
        return self.estimate()


def priced_config(
    model: ModelSpec,
    precision: Precision,
    spec: DeviceSpec,
    tp: int,
    fabrics: dict[str, str],
    memory: int,
    mem_fraction: float,
    overheads: EngineOverheads | None = None,
) -> tuple[IterationCost, int]:
    """The cost model and KV capacity (tokens) of ``model`` on ``tp`` GPUs of ``spec``;
    ValueError naming the failed check: a precision the GPU lacks, a TP degree the heads
    do not split, weights past memory."""
    precision.check(spec)
    cost = IterationCost(
        model, spec, tp, precision, tp_fabric(spec, fabrics) if tp > 1 else None,
        overheads or EngineOverheads(),
    )  # fmt: skip
    cost.transformer  # noqa: B018 (a TP degree the heads do not split raises here)
    return cost, cost.kv_capacity_tokens(memory, mem_fraction)


def candidate_configs(
    model: ModelSpec,
    precision: Precision,
    gpus: dict[str, tuple[DeviceSpec, int, int]],
    tp_options: list[int],
    fabrics: dict[str, str],
    mem_fraction: float,
    lengths: Lengths,
    targets: Targets,
    preset: str,
    cap: int,
    overheads: EngineOverheads | None = None,
    predicted: np.ndarray | None = None,
    power_caps_w: tuple[float | None, ...] = (None,),
) -> list[Config]:
    """Every (type, TP) that fits the model; ``gpus``: type -> (spec, count, memory);
    ``lengths``: a held-out sample of the workload's requests; ``targets``: the SLOs and
    the sizing attainment; ``cap``: the largest decode batch; ``predicted``: the
    sample's predicted output lengths, which the size buckets are cut by;
    ``power_caps_w``: board power limits each (type, TP) is offered at (None: the TDP;
    a cap at or above a type's TDP is the TDP and not offered twice)."""
    buckets = size_buckets(lengths, predicted)
    out: list[Config] = []
    short: list[str] = []
    for name, (base, count, memory) in gpus.items():
        price = gpu_price(base, preset)
        for watts in _caps(base, power_caps_w):
            spec = base if watts is None else replace(base, power_cap_w=watts)
            for tp in tp_options:
                if tp > count:
                    continue
                try:
                    cost, kv = priced_config(
                        model, precision, spec, tp, fabrics, memory, mem_fraction, overheads
                    )
                except ValueError as e:
                    short.append(str(e))
                    continue
                est = Estimator(cost, lengths, kv, cap, targets)
                view = partial(config_view, name, tp, tp * price, est, buckets, watts)
                out.append(Config(name, tp, cost, kv, view, watts))
    if not out:
        raise ValueError(
            "; ".join(short) or "no GPU or NPU in the cluster for the serving workload"
        )
    return out


def _caps(spec: DeviceSpec, caps: tuple[float | None, ...]) -> list[float | None]:
    """The distinct power limits ``spec`` is offered at: None (its TDP) for a cap at or
    above the TDP (or a device with no TDP), else the cap; a cap at or below the idle
    draw is a ValueError (devices/power.py)."""
    out: list[float | None] = []
    for c in caps:
        w = None if c is None or spec.tdp_w <= 0 or c >= spec.tdp_w else float(c)
        if w is not None:
            try:
                power_model(replace(spec, power_cap_w=w))  # a cap at or below idle
            except ValueError as e:
                raise ValueError(f"power_cap_options_w: {spec.name}: {e}") from None
        if w not in out:
            out.append(w)
    return out


def config_key(s: InstanceSpec | ConfigView | Config) -> tuple[str, int] | tuple[str, int, float]:
    """The key of a config (and of the instances of it): (GPU type, TP) at the TDP,
    (GPU type, TP, power cap W) under a cap."""
    return (s.gpu_type, s.tp) if s.power_cap_w is None else (s.gpu_type, s.tp, s.power_cap_w)


def config_problem(
    model: ModelSpec,
    precision: Precision,
    gpus: dict[str, tuple[DeviceSpec, int, int]],
    tp_options: list[int],
    fabrics: dict[str, str],
    mem_fraction: float,
    gpu_type: str,
    tp: int,
    overheads: EngineOverheads | None = None,
) -> str:
    """Why (``gpu_type``, ``tp``) is not a config :func:`candidate_configs` offers: no
    such GPU in the cluster, a TP degree not in ``tp_options`` or above the GPU count,
    or the check that failed (precision, head split, weights and KV past memory)."""
    if gpu_type not in gpus:
        return f"no {gpu_type} in the cluster (it has: {', '.join(sorted(gpus)) or 'none'})"
    spec, count, memory = gpus[gpu_type]
    if tp not in tp_options:
        return f"tp={tp} is not in tp_options {sorted(tp_options)}"
    if tp > count:
        return f"tp={tp} needs {tp} {gpu_type} GPUs; the cluster has {count}"
    try:
        priced_config(model, precision, spec, tp, fabrics, memory, mem_fraction, overheads)
    except ValueError as e:
        return str(e)
    return "it was not offered"


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
