"""Split the error of each energy validation row into a time part and a power part.

Energy per output token is average GPU power over token throughput, so

``predicted / published = (T_pred / T_meas) x (P_pred / P_meas)``

with ``T`` the GPU time per output token and ``P`` the average GPU power over the
measured window. The published side comes from the rows' own sources (never fitted):

* E03-E06 (ML.ENERGY Leaderboard v1): the leaderboard publishes energy and latency per
  response and the mean response length (``validation/data/energy.csv``, settings column):
  ``P = energy / latency``, ``T = latency / response_length``.
* E01-E02 (ML.ENERGY v3.0 / v2.0): the average GPU power of Llama 3.1 8B on one H100 at
  batch size 64 read from the "Average GPU power vs. batch size" figure of Chung et al.,
  "LLM Inference Energy: A Longitudinal Analysis" (ML.ENERGY blog, 2026; the figure's SVG
  in github.com/ml-energy/blog, docs/posts/assets/llm-energy-over-time/llama-power-light.svg,
  marker y-coordinates on its 0-700 W axis): V3 610 W, V2 366 W (V2 averaged over the whole
  benchmark, an under-estimate, the post's footnote). ``T = energy per token / P`` (the
  post's own identity). Check: the post's throughput figure (``llama-throughput-light.svg``
  of the same folder) gives 5,147 and 1,738 tokens/s at batch 64, 1% and 5% from
  ``P / energy per token`` (5,083 and 1,830).

``python -m hetsim.simulator.energy_diagnosis`` prints the table for the shipped power
coefficients (``memory_activity=X`` for another value); ``--validate`` prints instead the
energy rows' errors at the fit of ``devices/power_fit.py`` and at each of its
leave-one-source-out folds.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Measured:
    """The published side of one energy row: J per output token, average GPU power."""

    j_per_token: float
    power_W: float
    basis: str

    @property
    def s_per_token(self) -> float:
        """GPU time per output token (energy per token over average power)."""
        return self.j_per_token / self.power_W


MEASURED = {
    "e01": Measured(0.12, 610.0, "ML.ENERGY v3.0 power figure, batch 64"),
    "e02": Measured(0.20, 366.0, "ML.ENERGY v2.0 power figure, batch 64 (whole-run window)"),
    "e03": Measured(1828.8 / 420.1, 1828.8 / 9.44, "v1 data: 1828.8 J, 9.44 s, 420.1 tokens"),
    "e04": Measured(3050.1 / 379.5, 3050.1 / 12.98, "v1 data: 3050.1 J, 12.98 s, 379.5 tokens"),
    "e05": Measured(2110.4 / 419.3, 2110.4 / 11.43, "v1 data: 2110.4 J, 11.43 s, 419.3 tokens"),
    "e06": Measured(3569.8 / 374.9, 3569.8 / 18.97, "v1 data: 3569.8 J, 18.97 s, 374.9 tokens"),
}


@dataclass(frozen=True)
class Split:
    """One row's decomposition: predicted and measured time per token and power."""

    row: str
    energy_ratio: float
    time_ratio: float
    power_ratio: float
    pred_s_per_token: float
    meas_s_per_token: float
    pred_W: float
    meas_W: float


def decompose(memory_activity: float | None = None, repo: Path | None = None) -> list[Split]:
    """Run every energy row (at ``memory_activity`` if given) and split its error."""
    import hetsim

    root = Path(__file__).resolve().parent.parent if repo is None else repo
    over = {} if memory_activity is None else {
        "cluster.power_coefficients": {"memory_activity": memory_activity}}  # fmt: skip
    out = []
    for row, m in MEASURED.items():
        res = hetsim.run(root / "validation" / f"{row}.yaml", overrides=over)
        s = res.summary_row
        ept, watts = float(s["energy_per_output_token_J"]), float(s["avg_power_W"])
        t = ept / watts
        out.append(Split(row.upper(), ept / m.j_per_token, t / m.s_per_token, watts / m.power_W,
                         t, m.s_per_token, watts, m.power_W))  # fmt: skip
    return out


def published_j_per_token(repo: Path | None = None) -> dict[str, float]:
    """Each energy row's published J per output token (validation/data/energy.csv)."""
    import csv

    root = Path(__file__).resolve().parent.parent if repo is None else repo
    with (root / "validation" / "data" / "energy.csv").open(newline="") as f:
        return {r["id"].lower(): float(r["value"]) for r in csv.DictReader(f)
                if r["unit"] == "J/token"}  # fmt: skip


def validate(memory_activity: float, repo: Path | None = None) -> dict[str, float]:
    """Signed error (predicted / published - 1) of each J/token energy row run at
    ``memory_activity`` (``cluster.power_coefficients``)."""
    import hetsim

    root = Path(__file__).resolve().parent.parent if repo is None else repo
    out: dict[str, float] = {}
    for e, published in published_j_per_token(root).items():
        res = hetsim.run(
            root / "validation" / f"{e}.yaml",
            overrides={"cluster.power_coefficients": {"memory_activity": memory_activity}},
        )
        out[e] = float(res.summary_row["energy_per_output_token_J"]) / published - 1
    return out


def _validate_folds() -> None:
    """The energy rows at the power fit and at each leave-one-source-out fold."""
    import statistics

    from hetsim.devices import power_fit

    rows = power_fit.load_table()
    fit = power_fit.fit_memory_activity(rows)
    folds = [("fit", fit)] + [(f"without {s}", v) for s, v in power_fit.loso(rows).items()]
    for label, ma in folds:
        errs = validate(ma)
        cells = " ".join(f"{k.upper()} {v:+.1%}" for k, v in errs.items())
        a = sorted(abs(v) for v in errs.values())
        p90 = statistics.quantiles(a, n=10, method="inclusive")[-1] if len(a) > 1 else a[0]
        print(f"{label} ({ma:.4f}): {cells}; median |error| {statistics.median(a):.1%}, "
              f"p90 {p90:.1%}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Print the decomposition table (markdown), or with ``--validate`` the energy rows
    under the power fit and its folds."""
    args = sys.argv[1:] if argv is None else argv
    if "--validate" in args:
        _validate_folds()
        return 0
    ma = None
    for a in args:
        if a.startswith("memory_activity="):
            ma = float(a.split("=", 1)[1])
    print("| row | energy error | time part | power part | ms/token pred / meas | W pred / meas |")
    print("|---|---:|---:|---:|---:|---:|")
    for sp in decompose(ma):
        share = math.log(sp.time_ratio) / math.log(sp.energy_ratio) if sp.energy_ratio != 1 else 0
        print(f"| {sp.row} | {sp.energy_ratio - 1:+.1%} | {sp.time_ratio - 1:+.1%} | "
              f"{sp.power_ratio - 1:+.1%} | {1e3 * sp.pred_s_per_token:.2f} / "
              f"{1e3 * sp.meas_s_per_token:.2f} | {sp.pred_W:.0f} / {sp.meas_W:.0f} |"
              f"  (time share of log error {share:.0%})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
