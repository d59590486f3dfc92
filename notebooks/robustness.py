"""Every headline as a range: run a seed scenario's ``<name>-robustness.yaml`` sweep and
write its summary into the domain's doc page (never typed in by hand).

    .venv/bin/python notebooks/robustness.py cuckoo muri --workers 2
    .venv/bin/python notebooks/robustness.py cuckoo --from results/robustness/cuckoo

Each robustness sweep is a grid over the system compared (``by``: one sweep column whose
values are the paper's system and its baselines) and the uncertain or reconstructed
constants (estimation error, interference truth, load, prices, ...), with seeds. A
"point" is one setting of everything but ``by``; at each point the paper's system is
compared with every baseline and with the best of them, per headline metric, as a ratio
oriented so that > 1 means the paper's direction holds. The doc block reports, per metric
and comparison, the min / median / max ratio and the share of points where it is > 1,
then that share per swept value (which constant breaks the direction), and shows a strip
plot of the ratio against the best baseline at every point with the paper's value marked
(``docs/figures/robustness-NAME.png``, its data in ``docs/figures/robustness/NAME.csv``,
which the domain notebooks plot too). The block sits
between ``<!-- robustness:NAME -->`` and ``<!-- /robustness:NAME -->`` in the doc; a
missing block is appended at the end. Results go to ``results/robustness/NAME/``.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
#: columns of a sweep table that are not swept parameters
NOT_SWEPT = {"point", "scenario", "run_key", "hetsim_version", "wall_s", "error", "traceback"}


@dataclass(frozen=True)
class Metric:
    """A headline metric: summary column, whether higher is better, and its doc name."""

    column: str
    higher_is_better: bool
    name: str


@dataclass(frozen=True)
class Headline:
    """What one robustness sweep compares and where its summary goes."""

    doc: str  # doc page, relative to the repository root
    #: sweep column naming the system, or several columns whose values together name it
    #: (label values are then tuples, one value per column)
    by: str | tuple[str, ...]
    system: str  # label of the paper's system
    labels: dict[str, Any]  # label -> value of the ``by`` column
    metrics: tuple[Metric, ...]
    claim: str  # the paper's direction, in words
    #: label -> value of oracle upper bounds (read ground truth): their own table, never
    #: compared as a baseline
    oracles: dict[str, Any] = field(default_factory=dict)
    #: metric name -> the paper's published ratio in this orientation (> 1: the system
    #: better), marked on the range figure; absent where the paper gives no number
    paper: dict[str, float] = field(default_factory=dict)
    #: summary columns whose non-zero value marks a run as failed although it wrote
    #: metrics (e.g. ``oom``: it stopped at an allocation, after some iterations)
    fail_on: tuple[str, ...] = ()
    #: keys of the system's policy (a dict in the first ``by`` column) that the sweep
    #: varies while the baselines stay fixed: each setting of them is a point of its own,
    #: compared with every baseline run (:func:`spread_knobs`)
    knobs: tuple[str, ...] = ()


CUCKOO_POLICIES = {
    "Cuckoo": {"ordering": "cuckoo", "packing": "cuckoo", "allocation": "cuckoo"},
    "Tiresias": {"ordering": "tiresias", "packing": "none", "allocation": "first-fit"},
    "EDF": {"ordering": "edf", "packing": "none", "allocation": "first-fit"},
    "Muri-S": {"ordering": "srtf", "packing": "muri", "allocation": "first-fit"},
    "Gavel LP": {
        "ordering": "fifo",
        "packing": "none",
        "allocation": {"name": "gavel", "preempt_at_rounds": True},
    },
}

HEADLINES: dict[str, Headline] = {
    "cuckoo": Headline(
        doc="docs/cluster.md",
        by="policies",
        system="Cuckoo",
        labels=CUCKOO_POLICIES,
        metrics=(
            Metric("dsr", True, "deadline satisfaction"),
            Metric("mean_jct_s", False, "mean JCT"),
        ),
        claim="Cuckoo meets more deadlines (2.38x) with a lower mean JCT (1.81x) than the "
        "state of the art",
        paper={"deadline satisfaction": 2.38, "mean JCT": 1.81},
    ),
    "muri-s": Headline(
        doc="docs/cluster.md",
        by="policies",
        system="Muri-S",
        labels={
            "Muri-S": {"ordering": "srtf", "packing": "muri", "allocation": "first-fit"},
            "SRTF": {"ordering": "srtf", "packing": "none", "allocation": "first-fit"},
        },
        metrics=(Metric("mean_jct_s", False, "mean JCT"), Metric("makespan_s", False, "makespan")),
        claim="interleaving (Muri-S) lowers mean JCT and makespan against SRTF",
        paper={"mean JCT": 3.6, "makespan": 1.6},  # "up to", against DL schedulers
    ),
    "muri-l": Headline(
        doc="docs/cluster.md",
        by="policies",
        system="Muri-L",
        labels={
            "Muri-L": {"ordering": "tiresias", "packing": "muri", "allocation": "first-fit"},
            "Tiresias": {"ordering": "tiresias", "packing": "none", "allocation": "first-fit"},
        },
        metrics=(Metric("mean_jct_s", False, "mean JCT"), Metric("makespan_s", False, "makespan")),
        claim="interleaving (Muri-L) lowers mean JCT and makespan against Tiresias",
        paper={"mean JCT": 3.6, "makespan": 1.6},  # "up to", against DL schedulers
    ),
    "kair": Headline(
        doc="docs/observability.md",
        by="policies.detector",
        system="Kair",
        labels={"Kair": "kair", "KAIOPS-style (telemetry)": "kaiops-telemetry",
                "z-score": "zscore", "threshold": "threshold"},
        metrics=(
            Metric("rank_f1", True, "rank F1"),
            Metric("rank_precision", True, "rank precision"),
            Metric("rank_recall", True, "rank recall"),
            Metric("comm_f1", True, "communication-cause F1"),
        ),
        claim="Kair localises straggling ranks and tells compute from communication better "
        "than symptom-level baselines (no numbers published)",
        oracles={"KAIOPS-style (oracle)": "kaiops"},
    ),
    "cauchy": Headline(
        doc="docs/serving.md",
        by="policies.deployment",
        system="Cauchy",
        labels={
            "Cauchy": "cauchy",
            "Melange": "melange",
            "colocated": "colocated",
            "DistServe": "distserve",
        },
        metrics=(
            Metric("goodput_tokens_per_usd", True, "goodput Tokens/USD"),
            Metric("offered_tokens_per_usd", True, "steady-state Tokens/USD"),
            Metric("tokens_per_usd", True, "run Tokens/USD"),
            Metric("slo_attainment", True, "SLO attainment"),
        ),
        claim="Cauchy's heterogeneous combos raise Tokens/USD (up to +38.3%) over "
        "homogeneous and heterogeneity-aware deployments",
        paper={"goodput Tokens/USD": 1.383},
    ),
    "distserve": Headline(
        doc="docs/serving.md",
        by="policies.deployment",
        system="DistServe",
        labels={
            "DistServe": {"name": "distserve", "gpu_type": "a100-80gb"},
            "colocated": {"name": "colocated", "gpu_type": "a100-80gb"},
        },
        metrics=(
            Metric("goodput_rps", True, "goodput (req/s)"),
            Metric("tpot_p90_s", False, "TPOT p90"),
            Metric("goodput_tokens_per_usd", True, "goodput Tokens/USD"),
        ),
        claim="disaggregating prefill and decode removes prefill interference from TPOT "
        "and raises goodput",
    ),
    "splitwise": Headline(
        doc="docs/serving.md",
        by="policies.deployment",
        system="Splitwise",
        labels={
            "Splitwise": {
                "name": "splitwise",
                "prefill_type": "h100-sxm",
                "decode_type": "a100-80gb",
            },
            "colocated": {"name": "colocated", "gpu_type": "a100-80gb"},
        },
        metrics=(
            Metric("goodput_rps", True, "goodput (req/s)"),
            Metric("tpot_p90_s", False, "TPOT p90"),
            Metric("goodput_tokens_per_usd", True, "goodput Tokens/USD"),
        ),
        claim="splitting phases across GPU types (H100 prefill, A100 decode) raises goodput "
        "per dollar",
    ),
    "kale": Headline(
        doc="docs/elastic.md",
        by="policies.autoscaler",
        system="Kale",
        labels={"Kale": "kale", "HPA": "hpa", "static (12)": {"name": "static", "replicas": 12}},
        metrics=(
            Metric("slo_violation_rate", False, "SLO violations (time)"),
            Metric("accumulated_lag_sample_s", False, "accumulated lag"),
            Metric("downtime_s", False, "downtime"),
            Metric("gpu_hours", False, "GPU-hours"),
        ),
        claim="Kale cuts accumulated lag (-69.2%), downtime (-33.1%) and SLO violations "
        "(19.57% -> 2.6%) against HPA",
        paper={
            "SLO violations (time)": 19.57 / 2.6,
            "accumulated lag": 1 / (1 - 0.692),
            "downtime": 1 / (1 - 0.331),
        },
    ),
    "lud": Headline(
        doc="docs/serving.md",
        by="workload.lud.enabled",
        system="LUD",
        labels={"LUD": True, "standard decoding": False},
        metrics=(
            Metric("tpot_mean_s", False, "mean TPOT"),
            Metric("e2e_p50_s", False, "median end-to-end latency"),
            Metric("output_tokens_per_s", True, "output tokens/s"),
        ),
        claim="lexical-unit decoding generates natural language 33% faster (1.33x) than "
        "standard decoding",
        paper={"mean TPOT": 1.33, "median end-to-end latency": 1.33, "output tokens/s": 1.33},
    ),
    "chameleon": Headline(
        doc="docs/training.md",
        by="policies.swap",
        system="Chameleon",
        labels={
            "Chameleon": "chameleon",
            "full recompute": "recompute",
            "static swap (Capuchin keys)": "static-swap",
            "no plan (runtime OOM fallback)": {"name": "none", "forced_swap_on_oom": True},
        },
        metrics=(Metric("last_iteration_s", False, "steady iteration time"),),
        claim="Chameleon trains up to 4x HBM and is up to 38.94% faster than recomputation; "
        "the no-plan run is the runtime's OOM fallback alone (workload.oom_fallback)",
        paper={"steady iteration time": 1.3894},  # "up to 38.94% faster" than recompute
        fail_on=("oom",),
    ),
    "chameleon-profiling": Headline(
        doc="docs/training.md",
        by="policies.swap",
        system="Chameleon",
        labels={
            "Chameleon": "chameleon",
            "profile every step": {"name": "chameleon", "profile_every_step": True},
        },
        metrics=(Metric("profile_s", False, "profiling seconds"),),
        claim="the state machine cuts profiling overhead by 84.25% (ratio = 1 / (1 - cut))",
        fail_on=("oom",),
    ),
    "tensortee": Headline(
        doc="docs/tee.md",
        by="policies.protection",
        system="TensorTEE",
        labels={"TensorTEE": "tensortee", "cacheline TEE": "cacheline", "non-secure": "none"},
        metrics=(Metric("step_s", False, "step time"),),
        claim="TensorTEE is 4.0x faster than the cacheline TEE on average and 2.1% slower "
        "than non-secure training (ratio vs non-secure: 1 / (1 + overhead))",
    ),
    "tee_nna": Headline(
        doc="docs/tee.md",
        by="policies.execution",
        system="DAC'23 pipelined",
        labels={
            "DAC'23 pipelined": "pipelined",
            "TEE-only": "tee-only",
            "offload, no prefetch": "offload",
        },
        metrics=(Metric("step_s", False, "step time"),),
        claim="pipelined masked offload trains 8-19x faster than TEE-only",
    ),
    "nappa": Headline(
        doc="docs/tee.md",
        by="policies.execution",
        system="Nappa",
        labels={"Nappa": "nappa", "DAC'23 pipelined": "pipelined"},
        metrics=(Metric("step_s", False, "step time"),),
        claim="Nappa's allocation is faster than existing methods (no number published)",
    ),
}

#: Cauchy-surge's autoscalers, as its scenarios write them
SURGE_HYSTERESIS = {"name": "hysteresis", "period_s": 5, "window_s": 10, "upper": 0.9,
                    "lower": 0.5, "hold_out_s": 5, "hold_in_s": 60}  # fmt: skip
SURGE_REACTIVE = {"name": "reactive", "period_s": 5, "window_s": 10, "upper": 0.9, "lower": 0.5}
HEADLINES["cauchy-surge"] = Headline(
    doc="docs/serving.md",
    by=("policies.scaling", "workload.deployment_rate_per_s"),
    system="hysteresis autoscaling",
    labels={
        "hysteresis autoscaling": (SURGE_HYSTERESIS, 16),
        "static (base rate)": ("none", 16),
        "static (peak rate)": ("none", "peak"),
        "reactive autoscaling": (SURGE_REACTIVE, 16),
    },
    metrics=(
        Metric("goodput_tokens_per_usd", True, "goodput Tokens/USD"),
        Metric("tokens_per_usd", True, "run Tokens/USD"),
        Metric("slo_attainment", True, "SLO attainment"),
    ),
    claim="Cauchy's dynamic autoscaling keeps cost efficiency stable when requests surge "
    "(no number published for the surge)",
)
HEADLINES["cauchy-estimate"] = Headline(
    doc="docs/serving.md",
    by="policies.deployment",
    system="Cauchy",
    labels={"Cauchy": "cauchy", "Melange": "melange", "colocated": "colocated"},
    metrics=HEADLINES["cauchy"].metrics,
    claim="Cauchy's heterogeneous combos raise Tokens/USD over homogeneous and "
    "heterogeneity-aware deployments, here with the output-length estimator Melange routes "
    "and plans by swept (DistServe left out: its simulated search takes minutes a point)",
    paper={"goodput Tokens/USD": 1.383},
)

SLIMPIPE_1F1B = "1f1b"
HEADLINES["slimpipe"] = Headline(
    doc="docs/training.md",
    by=("policies.schedule", "workload.pp", "workload.cp"),
    system="SlimPipe",
    labels={
        "SlimPipe": ("slimpipe", 8, 1),
        "1F1B TP 8 x CP 2 x PP 4": (SLIMPIPE_1F1B, 4, 2),
        "1F1B TP 8 x CP 4 x PP 2": (SLIMPIPE_1F1B, 2, 4),
        "TP 8 x CP 8": (SLIMPIPE_1F1B, 1, 8),
    },
    metrics=(Metric("mfu", True, "MFU"),),
    claim="SlimPipe reaches up to 1.57x the MFU of the best baseline for Llama-70B at 512K "
    "context (64 H100)",
    paper={"MFU": 1.57},
    knobs=("slices", "partner_priority", "exchange_overlap"),
)

#: robustness scenario of each headline (several headlines may share one sweep)
SCENARIO_OF = {
    "chameleon": "chameleon",
    "chameleon-profiling": "chameleon",
    "tensortee": "tensortee",
    "tee_nna": "tee_nna",
    "nappa": "tee_nna",
    "cuckoo": "cuckoo",
    "muri-s": "muri",
    "muri-l": "muri",
    "kale": "kale",
    "kair": "kair",
    "cauchy": "cauchy",
    "distserve": "disaggregation",
    "splitwise": "disaggregation",
    "lud": "lud",
    "cauchy-surge": "cauchy-surge",
    "cauchy-estimate": "cauchy-estimate",
    "slimpipe": "slimpipe",
}


def _parse(cell: Any) -> Any:
    """A sweep cell back as a value (dicts and lists are stored as JSON text; tables
    written before that hold their Python repr)."""
    if isinstance(cell, str) and cell[:1] in "{[(":
        try:
            return json.loads(cell)
        except ValueError:
            return ast.literal_eval(cell)
    return cell


def by_columns(spec: Headline) -> tuple[str, ...]:
    """The sweep columns that name a headline's system."""
    return (spec.by,) if isinstance(spec.by, str) else spec.by


def _number_or_text(cell: Any) -> Any:
    """A cell of a column mixing numbers and words (read back from CSV as text) as a
    number where it is one."""
    if isinstance(cell, str):
        try:
            return float(cell)
        except ValueError:
            return cell
    return cell


def _system(cells: Sequence[Any], spec: Headline) -> Any:
    """The value naming a system from a row's ``by`` cells (a tuple for several)."""
    if isinstance(spec.by, str):
        return _parse(cells[0])
    return tuple(_number_or_text(_parse(c)) for c in cells)


def label_rows(table: pd.DataFrame, spec: Headline) -> pd.Series:
    """The label of each row's system (None: not one this headline compares)."""

    def value(v: Any) -> Any:
        if isinstance(v, tuple):
            return tuple(_parse(x) if isinstance(x, str) else x for x in v)
        return _parse(v) if isinstance(v, str) else v

    values = {label: value(v) for label, v in spec.labels.items()}
    out = []
    for cells in zip(*(table[c] for c in by_columns(spec)), strict=True):
        got = _system(cells, spec)
        out.append(next((lab for lab, v in values.items() if v == got), None))
    return pd.Series(out, index=table.index, dtype=object)


def spread_knobs(table: pd.DataFrame, spec: Headline) -> pd.DataFrame:
    """``table`` with the system's swept policy keys (``spec.knobs``) as columns of their
    own (``<by>.<key>``) and its policy cell reduced to the policy's name, and every
    baseline row repeated once per setting of those keys, so that each setting is a
    point compared with the same baseline runs. Unchanged when the headline has none."""
    col = by_columns(spec)[0]
    if not spec.knobs or table.empty or f"{col}.{spec.knobs[0]}" in table:
        return table
    cells = [_parse(c) for c in table[col]]
    is_sys = [isinstance(c, dict) for c in cells]
    sys_rows = table[is_sys].copy()
    for k in spec.knobs:
        sys_rows[f"{col}.{k}"] = [c.get(k) for c, s in zip(cells, is_sys, strict=True) if s]
    sys_rows[col] = [c["name"] for c, s in zip(cells, is_sys, strict=True) if s]
    knob_cols = [f"{col}.{k}" for k in spec.knobs]
    settings = sys_rows[knob_cols].drop_duplicates()
    base = table[[not s for s in is_sys]]
    repeated = [base.assign(**dict(zip(knob_cols, vals, strict=True)))
                for vals in settings.itertuples(index=False)]  # fmt: skip
    return pd.concat([sys_rows, *repeated], ignore_index=True)


def ratios(table: pd.DataFrame, spec: Headline) -> pd.DataFrame:
    """One row per point (every swept column but ``by``) and metric: the system's ratio
    against each baseline and the best baseline, > 1 where the system is better. A run
    that failed (e.g. a deployment that cannot fit the load) gives no ratio; it is
    flagged in ``failed:<label>`` (``failed:system`` for the paper's system), and so is a
    run whose metric is NaN (it ran but, e.g., ran out of memory before an iteration
    completed), so a failed baseline is never the "best" one."""
    table = spread_knobs(table, spec)
    err = table["error"].notna() if "error" in table else pd.Series(False, index=table.index)
    for col in spec.fail_on:
        if col in table:
            err = err | pd.to_numeric(table[col], errors="coerce").fillna(0).astype(bool)
    lab = table.assign(_label=label_rows(table, spec), _failed=err)
    lab = lab[lab["_label"].notna()]
    keys = [c for c in lab.columns if c not in NOT_SWEPT | {*by_columns(spec), "_label", "_failed"}
            and c in swept_columns(table)]  # fmt: skip
    baselines = [b for b in spec.labels if b != spec.system]
    rows = []
    for point, grp in lab.groupby(keys, dropna=False, sort=True) if keys else [((), lab)]:
        ran = {r["_label"]: r for _, r in grp[~grp["_failed"]].iterrows()}
        failed = set(grp[grp["_failed"]]["_label"])
        if spec.system not in ran and spec.system not in failed:
            continue
        setting = dict(zip(keys, point if isinstance(point, tuple) else (point,), strict=True))
        for m in spec.metrics:
            row: dict[str, Any] = {**setting, "metric": m.name}
            if spec.system in failed:
                row["failed:system"] = 1
                rows.append(row)
                continue
            sys_v = float(ran[spec.system][m.column])
            if np.isnan(sys_v):  # ran without a value (e.g. out of memory): a failure
                row["failed:system"] = 1
                rows.append(row)
                continue
            got = {b: float(ran[b][m.column]) for b in baselines if b in ran}
            base = {b: v for b, v in got.items() if not np.isnan(v)}
            for b in baselines:
                if b in failed or b in got.keys() - base.keys():
                    row[f"failed:{b}"] = 1
            if base:
                best = max(base.values()) if m.higher_is_better else min(base.values())
                for b, v in [*base.items(), ("best baseline", best)]:
                    row[b] = _oriented(sys_v, v, m.higher_is_better)
            elif any(b in failed for b in baselines):
                row["failed:best baseline"] = 1  # every baseline failed, the system ran
            rows.append(row)
    return pd.DataFrame(rows)


def _oriented(system: float, baseline: float, higher_is_better: bool) -> float:
    """system / baseline for a higher-is-better metric, baseline / system otherwise (inf
    where the denominator is 0 and the numerator is not)."""
    num, den = (system, baseline) if higher_is_better else (baseline, system)
    if den == 0:
        return float("nan") if num == 0 else float("inf")
    return num / den


def swept_columns(table: pd.DataFrame) -> list[str]:
    """Swept parameter columns of a sweep table (dotted paths, ``policies``, ``seed``)."""
    return [c for c in table.columns if c not in NOT_SWEPT and ("." in c or c in (
        "policies", "seed"))]  # fmt: skip


def _fmt(x: float) -> str:
    if np.isnan(x):
        return "-"
    return ("inf" if x > 0 else "-inf") if np.isinf(x) else f"{x:.3g}"


def _share(v: np.ndarray, base_failed: int = 0, sys_failed: int = 0) -> str:
    """Share of ratios > 1 among the points where both ran and did not tie (a tie: both
    values 0, ratio nan), with counts: ``0.67 (6/9, 3 ties, 2 baseline failed)``."""
    ties = int(np.isnan(v).sum())
    w = v[~np.isnan(v)]
    counts = ((ties, "ties"), (base_failed, "baseline failed"), (sys_failed, "system failed"))
    tail = "".join(f", {n} {what}" for n, what in counts if n)
    if len(w) == 0:
        return f"- (0/0{tail})"
    return f"{np.mean(w > 1):.2f} ({int(np.sum(w > 1))}/{len(w)}{tail})"


def _flag(frame: pd.DataFrame, column: str) -> pd.Series:
    """A 0/1 flag column as booleans (all False when absent)."""
    if column not in frame:
        return pd.Series(False, index=frame.index)
    return frame[column].fillna(0).astype(bool)


def _median(v: np.ndarray) -> float:
    w = v[~np.isnan(v)]
    return float(np.median(w)) if len(w) else float("nan")


def render(name: str, spec: Headline, table: pd.DataFrame, command: str, figure: str = "") -> str:
    """The doc block for one headline (``figure``: a line showing its range figure)."""
    r = ratios(table, spec)
    failed = int(table["error"].notna().sum()) if "error" in table else 0
    stopped = {c: int(pd.to_numeric(table[c], errors="coerce").fillna(0).astype(bool).sum())
               for c in spec.fail_on if c in table}  # fmt: skip
    table = spread_knobs(table, spec)
    comps = [lab for lab in spec.labels if lab != spec.system] + ["best baseline"]
    swept = [c for c in swept_columns(table) if c not in by_columns(spec)]
    points = 0 if r.empty else len(r) // len(spec.metrics)
    lines = [
        f"<!-- robustness:{name} -->",
        f"Generated by `{command}` (do not edit by hand). Claim: {spec.claim}. "
        f"{points} points ({', '.join(f'`{c}`' for c in swept)}), {failed} failed runs"
        + "".join(f", {n} with `{c}`" for c, n in stopped.items())
        + ". "
        f"Ratio > 1: {spec.system} better; a tie (both 0) counts in neither share.",
        "",
        f"| metric | {spec.system} vs | min | median | max | share where {spec.system} is better |",
        "|---|---|---|---|---|---|",
    ]
    for m in spec.metrics:
        sub = r[r["metric"] == m.name] if not r.empty else r
        for c in comps:
            if sub.empty or c not in sub:
                continue
            bad_b = _flag(sub, f"failed:{c}")
            bad_s = _flag(sub, "failed:system")
            v = sub[c][~bad_b & ~bad_s].to_numpy(dtype=float)
            w = v[~np.isnan(v)]
            lo, hi = (_fmt(w.min()), _fmt(w.max())) if len(w) else ("-", "-")
            share = _share(v, int(bad_b.sum()), int(bad_s.sum()))
            lines.append(f"| {m.name} | {c} | {lo} | {_fmt(_median(v))} | {hi} | {share} |")
    if not r.empty and "best baseline" in r:
        lines += ["", f"Share of points where {spec.system} beats the best baseline, by "
                  "swept value (median ratio in brackets):", "",
                  "| parameter | value | " + " | ".join(m.name for m in spec.metrics) + " |",
                  "|---|---|" + "---|" * len(spec.metrics)]  # fmt: skip
        for col in [c for c in swept if c != "seed"]:
            for value in sorted(r[col].unique(), key=str):
                cells = []
                for m in spec.metrics:
                    at = r[col].isna() if pd.isna(value) else r[col] == value  # null: NaN
                    v = r[at & (r["metric"] == m.name)]["best baseline"]
                    v = v.to_numpy(dtype=float)
                    w = v[~np.isnan(v)]
                    share = f"{np.mean(w > 1):.2f}" if len(w) else "-"
                    cells.append(f"{share} ({_fmt(_median(v))})")
                # 0.3, not 0.29999...
                shown = "null" if pd.isna(value) else value
                if isinstance(value, float) and not pd.isna(value):
                    shown = f"{value:.12g}"
                lines.append(f"| `{col}` | {shown} | " + " | ".join(cells) + " |")
    lines += oracle_table(spec, table)
    if figure:
        lines += ["", figure]
    lines.append(f"<!-- /robustness:{name} -->")
    return "\n".join(lines)


def oracle_table(spec: Headline, table: pd.DataFrame) -> list[str]:
    """Lines of the oracles' own table: each metric's min / median / max over the sweep
    (an upper bound that reads ground truth, not a baseline)."""
    if not spec.oracles:
        return []
    ok = table[table["error"].isna()] if "error" in table else table
    lines = ["", "Oracle upper bounds (read the injected ground truth; not baselines):", "",
             "| oracle | metric | min | median | max |", "|---|---|---|---|---|"]  # fmt: skip
    for label, value in spec.oracles.items():
        cells = zip(*(ok[c] for c in by_columns(spec)), strict=True)
        rows = ok[[_system(c, spec) == value for c in cells]]
        for m in spec.metrics:
            v = rows[m.column].dropna().to_numpy(dtype=float)
            if len(v):
                lines.append(f"| {label} | {m.name} | {_fmt(v.min())} | "
                             f"{_fmt(float(np.median(v)))} | {_fmt(v.max())} |")  # fmt: skip
    return lines


#: where each headline's ratios (one row per point and metric) and range figure go; the
#: domain notebooks plot the same CSVs
FIGURES = ROOT / "docs" / "figures"
RANGES = FIGURES / "robustness"


def range_table(name: str, spec: Headline, table: pd.DataFrame) -> pd.DataFrame:
    """The ratios of every point (:func:`ratios`) with the headline's name, system and
    the paper's value of each metric (NaN where it published none): the data of the
    range figure, written to ``docs/figures/robustness/NAME.csv``."""
    r = ratios(table, spec)
    if r.empty:
        return r
    r.insert(0, "headline", name)
    r.insert(1, "system", spec.system)
    r["paper"] = [spec.paper.get(m, float("nan")) for m in r["metric"]]
    return r


def plot_ranges(frame: pd.DataFrame, ax: Any = None) -> Any:
    """Strip plot of a range table: per metric, the system's ratio against the best
    baseline at every point of the sweep (log scale), its median as a bar, 1 (parity)
    dashed and the paper's value as a red diamond. A ratio of 0 (the baseline's value is
    0, the system's not: e.g. no downtime) is drawn at the bottom edge as a down
    triangle, inf at the top edge as an up triangle; ties (nan) are not drawn. Returns
    the axes."""
    import matplotlib.pyplot as plt

    metrics = list(dict.fromkeys(frame["metric"]))
    if ax is None:
        _, ax = plt.subplots(figsize=(1.6 + 1.7 * len(metrics), 3.4))
    col = frame["best baseline"] if "best baseline" in frame else pd.Series(np.nan, frame.index)
    every = col.to_numpy(dtype=float)
    pos = every[np.isfinite(every) & (every > 0)]
    paper_all = frame["paper"].dropna().to_numpy(dtype=float)
    span = np.concatenate([pos, paper_all, [1.0]])
    lo, hi = float(span.min()) / 2.0, float(span.max()) * 2.0
    rng = np.random.default_rng(0)  # jitter only
    for i, m in enumerate(metrics):
        v = col[frame["metric"] == m].to_numpy(dtype=float)
        ok = v[np.isfinite(v) & (v > 0)]
        if len(ok):
            ax.scatter(i + rng.uniform(-0.18, 0.18, len(ok)), ok, s=10, alpha=0.5, color="C0")
            ax.hlines(np.median(v[~np.isnan(v)]), i - 0.3, i + 0.3, color="k", lw=2)
        edges = ((lo, "v", int((v == 0).sum())), (hi, "^", int(np.isposinf(v).sum())))
        for edge, marker, n in edges:
            if n:
                ax.scatter(i + rng.uniform(-0.18, 0.18, n), [edge] * n, s=14, marker=marker,
                           color="C1", alpha=0.6)  # fmt: skip
        paper = frame[frame["metric"] == m]["paper"].dropna()
        if len(paper):
            ax.scatter([i], [float(paper.iloc[0])], marker="D", s=50, color="C3", zorder=3,
                       label="paper")  # fmt: skip
    ax.axhline(1.0, ls="--", color="grey", lw=1)
    ax.set_yscale("log")
    ax.set_ylim(lo / 1.2, hi * 1.2)
    ax.set_xticks(range(len(metrics)), metrics, rotation=20, ha="right")
    system = frame["system"].iloc[0] if len(frame) else ""
    ax.set_ylabel(f"{system} / best baseline (> 1: better)")
    ax.set_title(f"{frame['headline'].iloc[0] if len(frame) else ''}: range over the sweep")
    handles = {h.get_label(): h for h in ax.collections if h.get_label() == "paper"}
    if handles:
        ax.legend(handles.values(), handles.keys(), loc="best", fontsize=8)
    return ax


def write_ranges(name: str, spec: Headline, table: pd.DataFrame) -> str:
    """Write the range CSV and figure of one headline; return the doc line that shows
    the figure ('' when there is nothing to plot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hetsim.simulator.atomic import atomic_write_text

    frame = range_table(name, spec, table)
    if frame.empty:
        return ""
    RANGES.mkdir(parents=True, exist_ok=True)
    atomic_write_text(RANGES / f"{name}.csv", frame.to_csv(index=False, float_format="%.6g"))
    ax = plot_ranges(frame)
    png = FIGURES / f"robustness-{name}.png"
    ax.figure.tight_layout()
    ax.figure.savefig(png, dpi=72)
    plt.close(ax.figure)
    return (f"![{spec.system} against the best baseline over the sweep, the paper's value "
            f"marked](figures/robustness-{name}.png)")  # fmt: skip


def replace_block(text: str, name: str, block: str) -> str:
    """``text`` with the block ``name`` replaced (appended if absent)."""
    begin, end = f"<!-- robustness:{name} -->", f"<!-- /robustness:{name} -->"
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        return text.rstrip("\n") + "\n\n" + block + "\n"
    return text[:i] + block + text[j + len(end) :]


def run_sweep(scenario: str, workers: int, out: Path) -> pd.DataFrame:
    """Run (or resume) ``scenarios/<scenario>-robustness.yaml`` into ``out``."""
    from hetsim.simulator.sweeps import sweep

    path = ROOT / "scenarios" / f"{scenario}-robustness.yaml"
    resume = (out / "shards").exists()
    return sweep(path, workers=workers, out=out, resume=resume, force=True)


def read_finished(folder: Path) -> pd.DataFrame:
    """A finished sweep's table: ``sweep.csv``, else every shard under ``shards/``."""
    if (folder / "sweep.csv").exists():
        return pd.read_csv(folder / "sweep.csv")
    shards = sorted((folder / "shards").glob("*.parquet"))
    if not shards:
        raise SystemExit(f"{folder}: neither sweep.csv nor shards/*.parquet")
    return pd.concat([pd.read_parquet(f) for f in shards], ignore_index=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the named headlines' sweeps and rewrite their doc blocks."""
    from hetsim.simulator.atomic import atomic_write_text

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "names", nargs="+", choices=sorted(HEADLINES) + sorted(set(SCENARIO_OF.values()))
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--from", dest="source", help="read this finished sweep folder instead "
                    "(its sweep.csv, else every shard in its shards/)")  # fmt: skip
    ap.add_argument("--figures-only", action="store_true",
                    help="write the range CSVs and figures, leave the doc blocks")  # fmt: skip
    args = ap.parse_args(argv)
    wanted = [h for h in HEADLINES if h in args.names or SCENARIO_OF[h] in args.names]
    tables: dict[str, pd.DataFrame] = {}
    for h in wanted:
        sc = SCENARIO_OF[h]
        if sc not in tables:
            out = Path(args.source) if args.source else ROOT / "results" / "robustness" / sc
            tables[sc] = read_finished(out) if args.source else run_sweep(sc, args.workers, out)
        spec = HEADLINES[h]
        if args.figures_only:
            write_ranges(h, spec, tables[sc])
            print(f"{h}: {RANGES.relative_to(ROOT)}/{h}.csv written")
            continue
        command = f".venv/bin/python notebooks/robustness.py {sc} --workers {args.workers}"
        doc = ROOT / spec.doc
        figure = write_ranges(h, spec, tables[sc])
        text = replace_block(doc.read_text(), h, render(h, spec, tables[sc], command, figure))
        atomic_write_text(doc, text)
        print(f"{h}: {spec.doc} updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
