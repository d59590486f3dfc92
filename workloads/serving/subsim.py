"""Goodput of a candidate deployment unit measured by simulation (mechanism side).

Cauchy (as reconstructed in ``../shared/papers/serving.md`` §1.2 step 3, after
DistServe's ``simdistserve``) finds a combo's goodput as the largest Poisson rate the
combo sustains with SLO attainment >= ``attainment``, by bisection over simulated
runs. :class:`SubSimGoodput` does that with short seeded sub-simulations of the same
serving workload (same model, lengths, SLOs, batching) on a cluster holding only the
unit's GPUs, deployed as given (``fixed``, one routing group), and caches the result
per unit. With ``workload.sizing_estimator: simulate`` every deployment policy receives
it as ``DeploymentView.simulate`` and calls it only for the candidates it shortlists;
the roofline estimate is the bisection's starting bracket.

Simplifications (constants are fields): a run has ``max(num_requests, rate x
duration_s)`` requests (300, 60 s) and is judged on the requests arriving after the
first ``warmup_fraction`` (0.25) of its span, so that an overloaded unit's queue has
time to build. A short run from an empty system overstates goodput: a first version
judging whole 300-request runs credited 2 H100-TP2 prefill + 1 decode with 223 req/s
(a 1.3 s run); with 20 s runs the deployments it led to missed the 0.9 attainment
in the full 1500-request scenario at 32 and 64 req/s (0.744, 0.787), with 60 s runs
they meet it (docs/serving.md). ``steps`` bisection steps (the result is within
``hi / 2^steps`` of the threshold), routing ``jsq`` inside the unit, weights
preloaded (steady state), an ``ib-ndr`` network between the GPUs, one seed for every
run (common random numbers across rates and units).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsim.workloads.serving.view import InstanceSpec


@dataclass
class SubSimGoodput:
    """Callable ``(unit instances, estimate req/s) -> measured goodput req/s``.

    ``workload``: the parent's ``workload:`` block (a dict, as validated);
    ``gpus``: GPU type -> memory bytes of one GPU; ``base_dir``: where the parent
    scenario's relative paths (traces) resolve; ``run``: runs a scenario given as a dict
    (with the folder its paths resolve in) and returns its result, normally the
    simulation's :attr:`~hetsim.simulator.engine.Simulation.run_nested`."""

    workload: dict[str, Any]
    gpus: dict[str, int]
    base_dir: Path
    num_requests: int = 300
    duration_s: float = 60.0
    warmup_fraction: float = 0.25
    attainment: float = 0.9
    steps: int = 6
    seed: int = 0
    routing: str = "jsq"
    run: Callable[[dict[str, Any], Path], Any] | None = None
    runs: int = 0
    cache: dict[tuple[InstanceSpec, ...], float] = field(default_factory=dict)

    def __call__(self, unit: tuple[InstanceSpec, ...], estimate_rps: float) -> float:
        """Largest rate (req/s) with attainment >= target, bisected; cached per unit."""
        key = tuple(sorted(s._replace(group=0) for s in unit))
        if key not in self.cache:
            self.cache[key] = self._bisect(key, estimate_rps)
        return self.cache[key]

    def _bisect(self, unit: tuple[InstanceSpec, ...], estimate_rps: float) -> float:
        hi = 2.0 * estimate_rps if estimate_rps > 0 else 1.0
        for _ in range(4):  # widen until the upper end fails
            if not self.meets(unit, hi):
                break
            hi *= 2.0
        lo = 0.0
        for _ in range(self.steps):
            mid = (lo + hi) / 2
            if self.meets(unit, mid):
                lo = mid
            else:
                hi = mid
        return lo

    def meets(self, unit: tuple[InstanceSpec, ...], rate_per_s: float) -> bool:
        """Whether one seeded run of ``unit`` at ``rate_per_s`` meets the attainment."""
        if self.run is None:
            raise RuntimeError("SubSimGoodput needs a nested runner (Simulation.run_nested)")
        self.runs += 1
        req = self.run(self.scenario(unit, rate_per_s), self.base_dir).tables["requests"]
        steady = req.arrival_s >= self.warmup_fraction * req.arrival_s.max()
        return bool(req.meets_slo[steady].mean() >= self.attainment)

    def scenario(self, unit: tuple[InstanceSpec, ...], rate_per_s: float) -> dict[str, Any]:
        """The sub-simulation's scenario: the unit's GPUs, one node per type."""
        need: dict[str, int] = {}
        for s in unit:
            need[s.gpu_type] = need.get(s.gpu_type, 0) + s.tp
        nodes = [
            {"name": t, "devices": {"gpu": {"type": t, "count": n, "memory_bytes": self.gpus[t]}}}
            for t, n in sorted(need.items())
        ]
        n = max(self.num_requests, int(rate_per_s * self.duration_s))
        req = dict(self.workload["requests"], num_requests=n)
        req.update(arrivals="poisson", rate_per_s=rate_per_s, surge=None)
        wl = dict(self.workload, requests=req, deployment_rate_per_s=None, gpus=None)
        wl["load_weights"] = False
        wl["sizing_estimator"] = "analytic"  # no sub-simulations inside a sub-simulation
        wl["sizing_source"] = "holdout"  # the unit is fixed: no sizing window to set aside
        entries = [{"role": s.role, "gpu_type": s.gpu_type, "tp": s.tp} for s in unit]
        for e, s in zip(entries, unit, strict=True):
            if s.power_cap_w is not None:
                e["power_cap_w"] = s.power_cap_w
        return {
            "name": "subsim",
            "seed": self.seed,
            "cluster": {"nodes": nodes, "network": {"type": "ib-ndr", "attach": "gpu"}},
            "workload": wl,
            "policies": {
                "deployment": {"name": "fixed", "instances": entries, "one_group": True},
                "routing": self.routing,
            },
            "outputs": {"spans": False},
        }
