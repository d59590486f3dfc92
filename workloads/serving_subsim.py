"""Goodput of a candidate deployment unit measured by simulation (mechanism side).

Cauchy (as reconstructed in ``../shared/papers/serving.md`` §1.2 step 3, after
DistServe's ``simdistserve``) finds a combo's goodput as the largest Poisson rate the
combo sustains with SLO attainment >= ``attainment``, by bisection over simulated
runs. :class:`SubSimGoodput` does that with short seeded sub-simulations of the same
serving workload (same model, lengths, SLOs, batching) on a cluster holding only the
unit's GPUs, deployed as given (``fixed``, one routing group), and caches the result
per unit. A deployment policy receives it as ``DeploymentView.measure`` and calls it
only for the candidates it shortlists; the roofline estimate is the bisection's
starting bracket.

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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedulers.serving.view import InstanceSpec


@dataclass
class SubSimGoodput:
    """Callable ``(unit instances, estimate req/s) -> measured goodput req/s``.

    ``workload``: the parent's ``workload:`` block (a dict, as validated);
    ``gpus``: GPU type -> memory bytes of one GPU; ``base_dir``: where the parent
    scenario's relative paths (traces) resolve."""

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
        from simulator.runner import simulate
        from simulator.scenario import from_dict

        self.runs += 1
        sc = from_dict(self.scenario(unit, rate_per_s), "<sub-simulation>", self.base_dir)
        req = simulate(sc).tables["requests"]
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
        wl["goodput"] = "estimate"  # no sub-simulations inside a sub-simulation
        entries = [{"role": s.role, "gpu_type": s.gpu_type, "tp": s.tp} for s in unit]
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


def _fixed(specs: tuple[InstanceSpec, ...]) -> dict[str, Any]:
    """A ``fixed`` deployment block reproducing ``specs`` with their groups."""
    entries = [
        {"role": s.role, "gpu_type": s.gpu_type, "tp": s.tp, "group": s.group} for s in specs
    ]
    return {"name": "fixed", "instances": entries}


def compare(
    path: str, rates: list[float], overrides: dict[str, Any], **fields: Any
) -> list[dict[str, Any]]:
    """Cauchy's deployment from the roofline estimates vs from measured goodput, at
    each rate of the scenario at ``path``; both deployments then run in the full
    scenario (as ``fixed`` deployments with Cauchy's groups). One measurement cache
    serves every rate; ``fields`` set :class:`SubSimGoodput`'s constants."""
    import simulator
    from schedulers.serving.deploy_cauchy import CauchyDeployment, CauchyParams
    from schedulers.serving.view import DeploymentView
    from simulator.engine import Simulation
    from simulator.runner import build

    rows: list[dict[str, Any]] = []
    measure: SubSimGoodput | None = None
    for rate in rates:
        over = dict(overrides, **{"workload.requests.rate_per_s": rate})
        sc = simulator.load_scenario(path, over)
        w = build(sc, Simulation(sc.seed, record_spans=False))
        if measure is None:
            gpus = {t: mem for t, (_, _, mem) in w.gpu_types.items()}
            measure = SubSimGoodput(w.params.model_dump(mode="json"), gpus, sc.base_dir, **fields)
        view = DeploymentView(
            rate, float(w.times.prompt.mean()), float(w.times.output.mean()),
            w.slo.ttft_s, w.slo.tpot_s,
            tuple((t, c) for t, (_, c, _) in w.gpu_types.items()),
            tuple(c.view for c in w.configs.values()),
        )  # fmt: skip
        params = CauchyParams(**sc.policies["deployment"].params.model_dump())
        for mode, v in (("estimate", view), ("measured", view._replace(measure=measure))):
            specs = CauchyDeployment(params, None).deploy(v)  # type: ignore[arg-type]
            res = simulator.run(sc, overrides={"policies.deployment": _fixed(specs)})
            s = res.summary.iloc[0]
            rows.append({"rate": rate, "goodput": mode, "deployment": s.deployment,
                         "usd_per_hour": s.usd_per_hour, "slo_attainment": s.slo_attainment,
                         "tokens_per_usd": s.tokens_per_usd})  # fmt: skip
    return rows


def main() -> None:
    """Print :func:`compare` on ``scenarios/cauchy.yaml`` (aws-ondemand preset)."""
    import pandas as pd

    rows = compare("scenarios/cauchy.yaml", [16, 32, 48, 64], {})
    with pd.option_context("display.width", 200, "display.max_colwidth", 80):
        print(pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main()
