"""Serving goodput: roofline estimates against goodput measured by sub-simulation.

``python benchmarks/serving_goodput.py validate`` prints, for the deployment units of
docs/serving.md, the goodput the estimator predicts beside the goodput measured by seeded
sub-simulations (:class:`hetsim.workloads.serving.subsim.SubSimGoodput`).
``python benchmarks/serving_goodput.py compare`` prints Cauchy's deployment planned from
estimates against the one planned from measurements, each run in the full scenario.
Both take minutes: they run hundreds of sub-simulations.
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

import pandas as pd

import hetsim
from hetsim.schedulers.serving.deploy_cauchy import CauchyDeployment, CauchyParams
from hetsim.simulator.engine import Simulation
from hetsim.simulator.runner import build, run_nested
from hetsim.workloads.serving.estimate import Estimator, Lengths, Targets
from hetsim.workloads.serving.subsim import SubSimGoodput
from hetsim.workloads.serving.view import DeploymentView, InstanceSpec

# (role, GPU type, TP) instances of the units validated in docs/serving.md
VALIDATION_UNITS: tuple[tuple[tuple[str, str, int], ...], ...] = (
    (("mixed", "h100-sxm", 1),),
    (("mixed", "h100-sxm", 2),),
    (("mixed", "a100-80gb", 1),),
    (("mixed", "a100-80gb", 2),),
    (("mixed", "l40s", 2),),
    (("prefill", "h100-sxm", 1), ("decode", "h100-sxm", 1)),
    (("prefill", "h100-sxm", 1),) * 2 + (("decode", "h100-sxm", 1),),
    (("prefill", "l40s", 1),) * 2 + (("decode", "h100-sxm", 1),),
    (("prefill", "h100-sxm", 1), ("decode", "a100-80gb", 1)),
    (("prefill", "a100-80gb", 1), ("decode", "a100-80gb", 1)),
    (("prefill", "l40s", 2), ("decode", "l40s", 2)),
    (("prefill", "l40s", 1),) * 2 + (("decode", "l40s", 2),),
)


def validate(path: str = "scenarios/cauchy.yaml", steps: int = 7) -> list[dict[str, object]]:
    """Predicted goodput (headroom 0) vs goodput measured by sub-simulation
    (:class:`workloads.serving_subsim.SubSimGoodput`, same attainment) for
    :data:`VALIDATION_UNITS` on the scenario's workload; a unit's prediction is the
    sum of its entry instances' goodputs, capped by the sum of its decode ones."""
    sc = hetsim.load_scenario(path)
    w = build(sc, Simulation(sc.seed, record_spans=False))
    every = max(len(w.times.prompt) // w.params.estimate_sample, 1)
    lengths = Lengths(w.times.prompt[::every], w.times.output[::every])
    targets = Targets(w.slo.ttft_s, w.slo.tpot_s, w.params.sizing_attainment)
    gpus = {t: mem for t, (_, _, mem) in w.gpu_types.items()}
    measure = SubSimGoodput(
        w.params.model_dump(mode="json"), gpus, sc.base_dir, steps=steps, run=run_nested
    )
    rows: list[dict[str, object]] = []
    for unit in VALIDATION_UNITS:
        sums: dict[str, float] = {}
        for role, gpu, tp in unit:
            c = w.configs[(gpu, tp)]
            est = Estimator(c.cost, lengths, c.kv_tokens, w.params.max_batch, targets)
            key = "decode" if role == "decode" else "entry"
            sums[key] = sums.get(key, 0.0) + est.goodput(role)
        predicted = min(sums.values())
        got = measure(tuple(InstanceSpec(*i) for i in unit), predicted)  # type: ignore[arg-type]
        name = " + ".join(f"{r}:{g}/tp{t}" for r, g, t in unit)
        rows.append({"unit": name, "predicted_rps": predicted, "measured_rps": got})
    return rows


def print_validation() -> None:
    """Print :func:`validate` on ``scenarios/cauchy.yaml``."""
    for r in validate():
        p, m = float(r["predicted_rps"]), float(r["measured_rps"])  # type: ignore[arg-type]
        print(f"{r['unit']:70s} predicted {p:6.2f}  measured {m:6.2f}  ratio {p / m:5.2f}")


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
    rows: list[dict[str, Any]] = []
    measure: SubSimGoodput | None = None
    for rate in rates:
        over = dict(overrides, **{"workload.requests.rate_per_s": rate})
        sc = hetsim.load_scenario(path, over)
        w = build(sc, Simulation(sc.seed, record_spans=False))
        if measure is None:
            gpus = {t: mem for t, (_, _, mem) in w.gpu_types.items()}
            measure = SubSimGoodput(
                w.params.model_dump(mode="json"), gpus, sc.base_dir, run=run_nested, **fields
            )
        view = DeploymentView(
            rate, float(w.times.prompt.mean()), float(w.times.output.mean()),
            w.slo.ttft_s, w.slo.tpot_s,
            tuple((t, c) for t, (_, c, _) in w.gpu_types.items()),
            tuple(c.view for c in w.configs.values()),
        )  # fmt: skip
        params = CauchyParams(**sc.policies["deployment"].params.model_dump())
        sim = view._replace(simulate=partial(_no_budget, measure), estimator="simulate")
        for mode, v in (("estimate", view), ("measured", sim)):
            specs = CauchyDeployment(params, None).deploy(v)  # type: ignore[arg-type]
            res = hetsim.run(sc, overrides={"policies.deployment": _fixed(specs)})
            s = res.summary.iloc[0]
            rows.append({"rate": rate, "goodput": mode, "deployment": s.deployment,
                         "usd_per_hour": s.usd_per_hour, "slo_attainment": s.slo_attainment,
                         "tokens_per_usd": s.tokens_per_usd})  # fmt: skip
    return rows


def _no_budget(
    measure: SubSimGoodput, unit: tuple[InstanceSpec, ...], estimate: float, _budget: object
) -> float:
    return measure(unit, estimate)


def print_comparison() -> None:
    """Print :func:`compare` on ``scenarios/cauchy.yaml`` (aws-ondemand preset)."""
    rows = compare("scenarios/cauchy.yaml", [16, 32, 48, 64], {})
    with pd.option_context("display.width", 200, "display.max_colwidth", 80):
        print(pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    if sys.argv[1:] == ["validate"]:
        print_validation()
    elif sys.argv[1:] == ["compare"]:
        print_comparison()
    else:
        sys.exit("usage: python benchmarks/serving_goodput.py validate|compare")
