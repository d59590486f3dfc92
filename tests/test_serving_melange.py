"""Melange deployment: its integer program against brute force, the policy on a
hand-built view, and the cost directions on short seeded runs."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hetsim
from hetsim.schedulers.serving._milp import slice_assignment
from hetsim.schedulers.serving.deploy_melange import MelangeDeployment, MelangeParams
from hetsim.workloads.serving.view import BucketEstimate, ConfigView, DeploymentView

RNG = np.random.default_rng(0)
INF = np.inf


def brute_force(
    cost: np.ndarray, load: np.ndarray, use: np.ndarray, avail: np.ndarray
) -> float | None:
    """Cheapest cost over every assignment of slices to units: for a fixed assignment
    the cheapest counts are x_g = ceil(load assigned to g)."""
    n_s, n_g = load.shape
    best = None
    for assign in itertools.product(range(n_g), repeat=n_s):
        per = np.zeros(n_g)
        for s, g in enumerate(assign):
            per[g] += load[s, g]
        if not np.isfinite(per).all():
            continue
        x = np.array([math.ceil(v - 1e-9) for v in per])
        if (use @ x <= avail).all():
            c = float(cost @ x)
            best = c if best is None or c < best else best
    return best


@pytest.mark.parametrize("scale", [0.3, 1.0, 2.2, 3.5, 6.0])
def test_slice_assignment_matches_brute_force(scale: float) -> None:
    cost = np.array([1.0, 3.0, 2.5])  # $/h of a unit of each config
    # 4 slices x 3 configs: fraction of a unit each slice takes (inf: cannot serve)
    load = scale * np.array([[0.5, 0.2, 0.25], [INF, 0.3, 0.35], [0.9, 0.25, INF], [0.4, 0.1, 0.2]])
    use = np.array([[1, 0, 0], [0, 2, 1]], dtype=float)  # type 0: config 0; type 1: 1 and 2
    avail = np.array([3.0, 5.0])
    best = brute_force(cost, load, use, avail)
    got = slice_assignment(cost, load, use, avail)
    if best is None:
        assert got is None
        return
    assert got is not None
    x, unit = got
    assert float(cost @ x) == pytest.approx(best)
    # the returned assignment is consistent: loads fit the counts, nothing infinite
    per = np.zeros(3)
    for s, g in enumerate(unit):
        per[g] += load[s, g]
    assert (per <= x + 1e-9).all() and (use @ x <= avail + 1e-9).all()


def test_slice_assignment_infeasible_when_a_slice_has_no_server() -> None:
    load = np.array([[INF, INF], [0.5, 0.5]])
    assert slice_assignment(np.ones(2), load, np.eye(2), np.array([4.0, 4.0])) is None


def _cfg(name: str, usd: float, colo: float, rps: tuple[float, float]) -> ConfigView:
    # buckets: short (70% of requests) and long (30%)
    buckets = (
        BucketEstimate(200.0, 100.0, 0.7, rps[0]),
        BucketEstimate(3000.0, 400.0, 0.3, rps[1]),
    )
    return ConfigView(name, 1, 1, usd, 100_000, 0.0, 0.0, colo, buckets)


def test_melange_mixes_a_cheap_type_for_short_requests() -> None:
    # "small" ($1/h) serves 5 short req/s and no long one within the SLO; "big" ($4/h)
    # serves 20 short or 4 long req/s. Rate 20: short 14 req/s, long 6 req/s.
    # Homogeneous big: 14/20 + 6/4 = 2.2 -> 3 x $4 = $12/h. Mix, slice_factor 1:
    # short on 3 small (14/5 = 2.8) + long on 2 big (1.5) = $3 + $8 = $11/h; short on
    # big too: 0.7 + 1.5 = 2.2 -> 3 big = $12. So the mix is optimal at $11/h.
    view = DeploymentView(
        20.0, 1100.0, 190.0, 1.0, 0.05, (("small", 8), ("big", 8)),
        (_cfg("small", 1.0, 3.0, (5.0, 0.0)), _cfg("big", 4.0, 8.0, (20.0, 4.0))),
    )  # fmt: skip
    specs = MelangeDeployment(MelangeParams(slice_factor=1), RNG).deploy(view)
    types = sorted(s.gpu_type for s in specs)
    assert types == ["big", "big", "small", "small", "small"]
    assert all(s.role == "mixed" for s in specs)
    assert len({s.group for s in specs}) == len(specs)  # one routing group each
    # plans: the short bucket (position 0, 14 req/s) over the 3 small instances, the
    # long one (position 1, 6 req/s) over the 2 big ones
    for s in specs:
        ((key, rps),) = s.plan
        assert (key, rps) == (
            (0, pytest.approx(14.0 / 3)) if s.gpu_type == "small" else (1, pytest.approx(3.0))
        )
    # with big capped at 1 GPU the long bucket (1.5 units) cannot be served
    capped = view._replace(available=(("small", 8), ("big", 1)))
    with pytest.raises(ValueError, match="does not fit"):
        MelangeDeployment(MelangeParams(slice_factor=1), RNG).deploy(capped)


def _summary(**over: Any) -> Any:
    return hetsim.run("scenarios/cauchy.yaml", overrides=over).summary.iloc[0]


@pytest.mark.parametrize("rate", [16, 48])
def test_fair_sizing_melange_and_cauchy_against_homogeneous_aws(rate: int) -> None:
    # Seeded runs under aws-ondemand (strict SLOs). Every policy sizes from the same
    # attainment predictor (workloads/serving/estimate.py) with the same 10% headroom,
    # so each deployment it can size must meet the 0.9 attainment it was sized for.
    deps = ("cauchy", "melange", "colocated", "distserve")
    if rate == 48:
        # Neither homogeneous baseline reaches 48 req/s on the scenario's GPUs under the
        # kernel-level cost model, sized from the held-out sample (each says so instead
        # of deploying); DistServe checked on its predictor (its simulated search, the
        # default, also fails here but takes about 25 s)
        for dep in ("colocated", {"name": "distserve", "search": "estimate"}):
            with pytest.raises(hetsim.ScenarioError, match="does not fit"):
                _summary(**{"policies.deployment": dep, "workload.requests.rate_per_s": 48})
        deps = deps[:2]
    rows = {
        dep: _summary(**{"policies.deployment": dep, "workload.requests.rate_per_s": rate})
        for dep in deps
    }
    assert all(r.slo_attainment >= 0.9 for r in rows.values())
    # Melange's program may put every size bucket on the colocated baseline's config,
    # so it costs no more per hour (Melange paper: a mix never costs more than one type)
    if "colocated" in rows:
        assert rows["melange"].usd_per_hour <= rows["colocated"].usd_per_hour
    # Cauchy's own search includes the homogeneous colocated units, but it sizes combos
    # for its disaggregated objective: whether it undercuts colocated depends on the rate
    # and the cost model (docs/serving.md reports the range); here only that it is priced
    assert rows["cauchy"].usd_per_hour > 0


def test_cli_rejects_a_zero_slice_factor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hetsim.simulator.cli import main

    text = Path("scenarios/cauchy.yaml").read_text()
    path = tmp_path / "bad.yaml"
    path.write_text(
        text.replace("deployment: cauchy", "deployment: {name: melange, slice_factor: 0}").replace(
            "../workloads/", str(Path("workloads").resolve()) + "/"
        )
    )
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "slice_factor" in err and str(path) in err
