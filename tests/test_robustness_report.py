"""Headlines as ranges: the report script's ratios and shares on hand-made tables, the
doc-block replacement, and a tiny run of each issue-18 robustness sweep (cluster, elastic,
observability, serving; the full sweeps are scenarios, run by notebooks/robustness.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd
import pytest

import hetsim
from hetsim.simulator.scenario import load_scenario
from hetsim.simulator.sweep_design import parse_sweep, points

ROOT = Path(__file__).resolve().parent.parent
ISSUE18 = ("cuckoo", "muri", "kale", "kair", "cauchy", "disaggregation", "lud", "cauchy-surge",
           "cauchy-estimate")  # fmt: skip


def report() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "robustness", ROOT / "notebooks" / "robustness.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["robustness"] = mod
    spec.loader.exec_module(mod)
    return mod


def hand_table() -> pd.DataFrame:
    # two points (x = 1, 2); A is the paper's system, B and C baselines; metric m higher
    # is better, n lower is better. x=1: m A 2, B 1, C 4 -> A/B 2, A/C 0.5, best C -> 0.5;
    # n A 10, B 20, C 5 -> B/A 2, C/A 0.5, best C -> 0.5. x=2: m A 3, B 1, C 1 -> 3, 3, 3;
    # n A 0, B 0, C 4 -> tie (nan), inf, best B -> tie.
    rows = [("A", 1, 2.0, 10.0), ("B", 1, 1.0, 20.0), ("C", 1, 4.0, 5.0),
            ("A", 2, 3.0, 0.0), ("B", 2, 1.0, 0.0), ("C", 2, 1.0, 4.0)]  # fmt: skip
    t = pd.DataFrame(rows, columns=["policies.p", "workload.x", "m", "n"])
    return t.assign(error=None, point=range(len(t)))


def spec(mod: ModuleType) -> Any:
    return mod.Headline(
        doc="x.md", by="policies.p", system="A", labels={"A": "A", "B": "B", "C": "C"},
        metrics=(mod.Metric("m", True, "m"), mod.Metric("n", False, "n")), claim="A wins",
    )  # fmt: skip


def test_ratios_by_hand() -> None:
    mod = report()
    r = mod.ratios(hand_table(), spec(mod)).set_index(["workload.x", "metric"])
    assert r.loc[(1, "m"), ["B", "C", "best baseline"]].tolist() == [2.0, 0.5, 0.5]
    assert r.loc[(1, "n"), ["B", "C", "best baseline"]].tolist() == [2.0, 0.5, 0.5]
    assert r.loc[(2, "m"), ["B", "C", "best baseline"]].tolist() == [3.0, 3.0, 3.0]
    two = r.loc[(2, "n")]
    assert np.isnan(two["B"]) and np.isinf(two["C"]) and np.isnan(two["best baseline"])


def test_a_baseline_without_a_value_is_failed_not_best() -> None:
    # a baseline that ran out of memory before an iteration completed has NaN time; at
    # x=1 it is listed first, so a bare min() would return NaN and call the point a tie.
    # It counts as failed and the best is the one that ran: n C 5 vs A 10 -> 0.5
    mod = report()
    t = hand_table()
    t.loc[(t["policies.p"] == "B") & (t["workload.x"] == 1), "n"] = float("nan")
    t = pd.concat([t[t["policies.p"] == "B"], t[t["policies.p"] != "B"]])
    r = mod.ratios(t, spec(mod)).set_index(["workload.x", "metric"])
    one = r.loc[(1, "n")]
    assert one["failed:B"] == 1 and np.isnan(one["B"]) and one["best baseline"] == 0.5
    assert r.loc[(1, "m"), "best baseline"] == 0.5  # the other metric is untouched
    # the system without a value fails too
    t.loc[(t["policies.p"] == "A") & (t["workload.x"] == 1), "m"] = float("nan")
    r = mod.ratios(t, spec(mod)).set_index(["workload.x", "metric"])
    assert r.loc[(1, "m"), "failed:system"] == 1
    assert "ties" not in mod.render("hand", spec(mod), t[t["workload.x"] == 1], "cmd")


def test_a_run_that_stopped_out_of_memory_is_failed_where_the_headline_says_so() -> None:
    # the system A ran out of memory at x=1 after some iterations: its metrics exist but
    # compare a partial run. With fail_on=("oom",) the point counts as the system failing
    mod = report()
    t = hand_table().assign(oom=0)
    t.loc[(t["policies.p"] == "A") & (t["workload.x"] == 1), "oom"] = 1
    plain = mod.ratios(t, spec(mod)).set_index(["workload.x", "metric"])
    assert plain.loc[(1, "m"), "best baseline"] == 0.5  # counted, as before
    strict = mod.Headline(**{**vars(spec(mod)), "fail_on": ("oom",)})
    r = mod.ratios(t, strict).set_index(["workload.x", "metric"])
    assert r.loc[(1, "m"), "failed:system"] == 1 and r.loc[(2, "m"), "best baseline"] == 3.0
    assert "0 failed runs, 1 with `oom`." in mod.render("hand", strict, t, "cmd")


def test_rendered_shares_count_ties_apart() -> None:
    mod = report()
    text = mod.render("hand", spec(mod), hand_table(), "cmd")
    # m vs best: 0.5 and 3 -> 1 of 2; n vs best: 0.5 and a tie -> 0 of 1, 1 tie
    assert "| m | best baseline | 0.5 | 1.75 | 3 | 0.50 (1/2) |" in text
    assert "| n | best baseline | 0.5 | 0.5 | 0.5 | 0.00 (0/1, 1 ties) |" in text
    assert "| n | C | 0.5 | inf | inf | 0.50 (1/2) |" in text  # 0.5 and inf


def test_range_table_carries_the_papers_value_and_the_figure_draws_it() -> None:
    mod = report()
    sp = spec(mod)
    sp = mod.Headline(**{**sp.__dict__, "paper": {"m": 2.5}})
    r = mod.range_table("hand", sp, hand_table())
    assert len(r) == 4 and set(r["headline"]) == {"hand"} and set(r["system"]) == {"A"}
    assert (r[r["metric"] == "m"]["paper"] == 2.5).all() and r[r["metric"] == "n"][
        "paper"].isna().all()  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    ax = mod.plot_ranges(r)
    # m: the points 0.5 and 3 (finite, > 0), n: 0.5 (the tie is not drawn); the paper's
    # 2.5 on m only
    from matplotlib.collections import PathCollection

    dots = [c.get_offsets() for c in ax.collections if isinstance(c, PathCollection)]
    drawn = sorted(float(y) for d in dots for _, y in d)
    assert drawn == [0.5, 0.5, 2.5, 3.0]


def test_system_named_by_two_columns() -> None:
    # Cauchy-surge's systems are (scaling, deployment rate) pairs, the rate column mixing
    # numbers and the word "peak" (text once read back from CSV). Point x=1: A = (s, 16)
    # m 2; B = (none, 16) m 1; C = (none, peak) m 4; (s, peak) is no system -> A/B 2,
    # A/C 0.5, best 0.5.
    mod = report()
    t = pd.DataFrame([("s", "16", 1, 2.0), ("none", "16", 1, 1.0), ("none", "peak", 1, 4.0),
                      ("s", "peak", 1, 9.0)],
                     columns=["policies.s", "workload.r", "workload.x", "m"])  # fmt: skip
    t = t.assign(error=None, point=range(len(t)))
    h = mod.Headline(doc="x.md", by=("policies.s", "workload.r"), system="A",
                     labels={"A": ("s", 16), "B": ("none", 16), "C": ("none", "peak")},
                     metrics=(mod.Metric("m", True, "m"),), claim="A wins")  # fmt: skip
    assert mod.label_rows(t, h).tolist() == ["A", "B", "C", None]
    r = mod.ratios(t, h)
    assert r[["B", "C", "best baseline"]].iloc[0].tolist() == [2.0, 0.5, 0.5]
    assert "`workload.r`" not in mod.render("x", h, t, "cmd")  # a system column, not swept


def test_block_replaced_in_place_or_appended() -> None:
    mod = report()
    doc = "a\n<!-- robustness:x -->\nold\n<!-- /robustness:x -->\nb\n"
    new = "<!-- robustness:x -->\nnew\n<!-- /robustness:x -->"
    assert mod.replace_block(doc, "x", new) == "a\n" + new + "\nb\n"
    assert mod.replace_block("a\n", "x", new) == "a\n\n" + new + "\n"


@pytest.mark.parametrize("name", ISSUE18)
def test_every_issue18_headline_has_a_sweep_and_a_doc_block(name: str) -> None:
    mod = report()
    path = ROOT / "scenarios" / f"{name}-robustness.yaml"
    sc = load_scenario(path)
    assert len(points(parse_sweep(sc.sweep), sc.seed)) >= 12
    for h, scen in mod.SCENARIO_OF.items():
        if scen == name:
            assert f"<!-- robustness:{h} -->" in (ROOT / mod.HEADLINES[h].doc).read_text()


TINY = {
    "cuckoo": {"workload.jobs.num_jobs": 20, "workload.estimates.duration_noise_sigma": 0.5},
    "muri": {"workload.jobs.max_jobs": 12},
    "kale": {"workload.duration_s": 1800, "workload.rescale.mode": "partial"},
    "kair": {"workload.ranks": 32, "workload.iterations": 100, "workload.stragglers": {}},
    "cauchy": {"workload.requests.num_requests": 40},
    "disaggregation": {"workload.requests.num_requests": 40},
    "lud": {"workload.requests.num_requests": 4, "workload.requests.output_tokens": 64},
    "cauchy-surge": {"workload.requests.num_requests": 40},
    "cauchy-estimate": {"workload.requests.num_requests": 40},
}


@pytest.mark.parametrize("name", ISSUE18)
def test_tiny_robustness_point_runs(name: str) -> None:
    # the scenario's base point, shrunk: it runs and its summary has every headline column
    mod = report()
    res = hetsim.run(ROOT / "scenarios" / f"{name}-robustness.yaml", overrides=TINY[name])
    row = res.summary.iloc[0]
    for h, scen in mod.SCENARIO_OF.items():
        if scen == name:
            for m in mod.HEADLINES[h].metrics:
                assert m.column in row.index


def test_system_knobs_are_points_against_fixed_baselines() -> None:
    # SlimPipe-style sweep: the system's policy dict varies (k = 1, 2), the baseline B
    # runs once. Each k is a point compared with the same B run: m A(k=1) 2, A(k=2) 6,
    # B 4 -> ratios 0.5 and 1.5.
    mod = report()
    t = pd.DataFrame([('{"name": "s", "k": 1}', 2.0), ('{"name": "s", "k": 2}', 6.0),
                      ("b", 4.0)], columns=["policies.s", "m"])  # fmt: skip
    t = t.assign(error=None, point=range(len(t)))
    h = mod.Headline(doc="x.md", by=("policies.s",), system="A",
                     labels={"A": ("s",), "B": ("b",)},
                     metrics=(mod.Metric("m", True, "m"),), claim="A wins",
                     knobs=("k",))  # fmt: skip
    r = mod.ratios(t, h).sort_values("policies.s.k")
    assert r["policies.s.k"].tolist() == [1, 2]
    assert r["B"].tolist() == [0.5, 1.5]
    block = mod.render("x", h, t, "cmd")
    assert "2 points" in block and "`policies.s.k`" in block and "0 failed runs" in block
