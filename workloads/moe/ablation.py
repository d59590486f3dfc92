"""Summary of the HybriMoE ablation sweep (``scenarios/hybrimoe-ablation.yaml``).

Reads the sweep's table (``hetsim sweep ... --out DIR`` writes ``DIR/sweep.csv``) and
prints, per model, each mechanism's prefill and decode speed-up (TTFT and TBT ratios)
as min-max over the swept unknowns, and the decode hit rates of MRS and LRU per cache
ratio::

    python -m hetsim.workloads.moe.ablation DIR [--cache-fraction 0.25]

A mechanism's speed-up is the time of the row without it over the row with it, with
every other axis of the point (cache ratio, routing, overheads) the same.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

KEYS = ("workload.model", "workload.cache_fraction", "workload.routing",
        "workload.cpu_expert_overhead_s", "workload.cpu_layer_overhead_s")  # fmt: skip

# (mechanism, system without it, system with it): systems as placement/prefetch/cache
EFFECTS: tuple[tuple[str, str, str], ...] = (
    ("S alone (HSS vs fixed mapping)", "ktransformers/none/static", "hybrimoe/none/static"),
    ("P alone (impact prefetch)", "ktransformers/none/static", "ktransformers/impact/lru"),
    ("C alone (MRS)", "ktransformers/none/static", "ktransformers/none/mrs"),
    ("P given S+MRS", "hybrimoe/none/mrs", "hybrimoe/impact/mrs"),
    ("C: MRS vs LRU given S", "hybrimoe/none/lru", "hybrimoe/none/mrs"),
    ("C: MRS vs LRU given S+P", "hybrimoe/impact/lru", "hybrimoe/impact/mrs"),
    ("S given P+MRS", "ktransformers/impact/mrs", "hybrimoe/impact/mrs"),
    ("S+P+C (HybriMoE)", "ktransformers/none/static", "hybrimoe/impact/mrs"),
)


def load(path: Path) -> pd.DataFrame:
    """The sweep table with a ``sys`` column (placement/prefetch/cache)."""
    df = pd.read_csv(path / "sweep.csv" if path.is_dir() else path)
    pol = df["policies"].map(json.loads)
    df["sys"] = pol.map(lambda p: f"{p['placement']}/{p['prefetch']}/{p['cache']}")
    df["share"] = df["workload.routing"].map(lambda r: json.loads(r).get("persistent_share", 0.0))
    return df


def speedups(df: pd.DataFrame, cache_fraction: float | None) -> pd.DataFrame:
    """Per model and mechanism: min and max of prefill and decode speed-up."""
    d = df if cache_fraction is None else df[df["workload.cache_fraction"] == cache_fraction]
    wide = d.pivot_table(index=list(KEYS), columns="sys", values=["ttft_s", "tbt_mean_s"])
    rows = []
    for name, off, on in EFFECTS:
        if (("ttft_s", off) not in wide) or (("ttft_s", on) not in wide):
            continue
        pre = wide["ttft_s", off] / wide["ttft_s", on]
        dec = wide["tbt_mean_s", off] / wide["tbt_mean_s", on]
        for model, idx in pre.groupby(level=0).groups.items():
            rows.append({
                "model": model, "mechanism": name,
                "prefill": f"{pre[idx].min():.2f}-{pre[idx].max():.2f}",
                "decode": f"{dec[idx].min():.2f}-{dec[idx].max():.2f}",
            })  # fmt: skip
    return pd.DataFrame(rows)


def hit_rates(df: pd.DataFrame) -> pd.DataFrame:
    """Decode hit rate of LRU and MRS (HSS, with and without impact prefetch) per model,
    cache ratio and persistence; min-max over the overhead axes."""
    d = df[df["sys"].isin(["hybrimoe/none/lru", "hybrimoe/none/mrs",
                           "hybrimoe/impact/lru", "hybrimoe/impact/mrs"])]  # fmt: skip
    g = d.groupby(["workload.model", "workload.cache_fraction", "share", "sys"])
    t = g["cache_hit_rate"].agg(["min", "max"]).unstack("sys")
    out = pd.DataFrame(index=t.index)
    for pf in ("none", "impact"):
        lru, mrs = f"hybrimoe/{pf}/lru", f"hybrimoe/{pf}/mrs"
        out[f"lru ({pf})"] = (
            t["min", lru].map("{:.3f}".format) + "-" + t["max", lru].map("{:.3f}".format)
        )
        out[f"mrs ({pf})"] = (
            t["min", mrs].map("{:.3f}".format) + "-" + t["max", mrs].map("{:.3f}".format)
        )
    return out.reset_index()


def main() -> None:
    """Print both tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path, help="sweep output folder or its sweep.csv")
    ap.add_argument("--cache-fraction", type=float, default=0.25)
    a = ap.parse_args()
    df = load(a.path)
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(f"speed-up (time without / with), min-max, cache {a.cache_fraction:g}:")
        print(speedups(df, a.cache_fraction).to_string(index=False))
        print("\ndecode hit rate, HSS placement, min-max over the overheads:")
        print(hit_rates(df).to_string(index=False))


if __name__ == "__main__":
    main()
