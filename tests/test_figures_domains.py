"""Standard figures of training, parallel training and the cluster (issue 20): the
memory timeline split by category, the per-iteration and per-stage breakdowns, the
deadline satisfaction figure. Each figure's drawn values are checked against the
numbers worked out from its table by hand."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot, as the figures module also does

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from hetsim.simulator.cli import main
from hetsim.simulator.figures import DRAW, FIGURES, GIB, FigureSpec


def _spec(kind: str, name: str) -> FigureSpec:
    (spec,) = [s for s in FIGURES[kind] if s.name == name]
    return spec


def _bar_tops(ax: object) -> dict[float, float]:
    """Top of each stacked bar column, by its x centre."""
    tops: dict[float, float] = {}
    for p in ax.patches:  # type: ignore[attr-defined]
        x = round(p.get_x() + p.get_width() / 2, 6)
        tops[x] = max(tops.get(x, 0.0), p.get_y() + p.get_height())
    return tops


def test_pipeline_breakdown_fills_each_stage_to_the_schedule_span() -> None:
    """Two stages, 1F1B-like units: per stage, forward + backward + idle = the span
    (first start to last end); idle share = 1 - busy / (span x stages)."""
    units = pd.DataFrame(
        {"stage": [0, 0, 1, 1], "kind": ["F", "B", "F", "B"], "micro": [0] * 4,
         "chunk": [0] * 4, "start_s": [0.0, 2.0, 1.0, 2.0], "end_s": [1.0, 4.0, 2.0, 3.0]}
    )  # fmt: skip
    fig = DRAW["stage_time"](_spec("training-parallel", "iteration-breakdown"), units)
    ax = fig.axes[0]
    assert list(_bar_tops(ax).values()) == pytest.approx([4.0, 4.0])
    heights = [p.get_height() for p in ax.patches]  # forward 0,1; backward 0,1; idle 0,1
    assert heights == pytest.approx([1.0, 1.0, 2.0, 1.0, 1.0, 2.0])
    assert ax.get_title() == "schedule span 4 s; idle share 37.5%"  # 1 - 5 / 8
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "forward", "backward", "idle (bubble)"]  # fmt: skip
    plt.close(fig)


def test_memory_per_stage_stacks_categories_in_gib_under_the_capacity() -> None:
    gib = int(GIB)
    mem = pd.DataFrame(
        {"stage": [0, 1], "params_bytes": [2 * gib, 2 * gib], "grads_bytes": [gib, gib],
         "optimizer_bytes": [gib, gib], "activations_bytes": [8 * gib, 4 * gib],
         "buffers_bytes": [0, gib], "capacity_bytes": [16 * gib, 16 * gib]}
    )  # fmt: skip
    fig = DRAW["stack"](_spec("training-parallel", "memory-per-stage"), mem)
    ax = fig.axes[0]
    assert list(_bar_tops(ax).values()) == pytest.approx([12.0, 9.0])
    assert ax.get_ylabel() == "memory (GiB)"
    (line,) = ax.get_lines()
    assert line.get_ydata()[0] == pytest.approx(16.0)
    plt.close(fig)


def test_iteration_breakdown_bars_are_the_step_time() -> None:
    """compute = step - stall - recompute - profile - CPU Adam - offload tail."""
    it = pd.DataFrame(
        {"iteration": [0, 1], "step_s": [10.0, 8.0], "stall_s": [3.0, 1.0],
         "recompute_s": [0.0, 0.0], "profile_s": [0.5, 0.0], "cpu_adam_s": [0.0, 0.0],
         "offload_tail_s": [0.0, 0.0]}
    )  # fmt: skip
    fig = DRAW["stack"](_spec("training", "iteration-breakdown"), it)
    ax = fig.axes[0]
    assert list(_bar_tops(ax).values()) == pytest.approx([10.0, 8.0])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["compute", "stall", "profile"]  # all-zero columns are not drawn
    assert [p.get_height() for p in ax.patches[:2]] == pytest.approx([6.5, 7.0])
    plt.close(fig)


def test_memory_timeline_splits_states_from_activations() -> None:
    gib = GIB
    ops = pd.DataFrame({"iteration": [3, 3, 3], "start_s": [5.0, 6.0, 8.0],
                        "used_bytes": [10 * gib, 14 * gib, 11 * gib]})  # fmt: skip
    ops.attrs["summary"] = {"device_state_bytes": 6 * gib}
    fig = DRAW["memory"](_spec("training", "memory-timeline"), ops)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["model states (6.0 GiB)", "activations and buffers", "peak 14.0 GiB"]
    assert ax.get_xlim() == (0.0, 3.0)  # time within the iteration
    plt.close(fig)


@pytest.mark.slow
def test_deadline_figure_matches_the_jobs_table(tmp_path: Path) -> None:
    """End to end: the figure is written, and its per-size bars are the share of each
    size's deadline jobs that met the deadline, counted from jobs.csv by hand."""
    out = tmp_path / "c"
    args = ["run", "cuckoo", "-q", "--out", str(out), "--plots",
            "--set", "workload.jobs.num_jobs=40"]  # fmt: skip
    assert main(args) == 0
    assert (out / "figures" / "deadlines.png").is_file()
    assert (out / "figures" / "deadlines.svg").is_file()
    jobs = pd.read_csv(out / "tables" / "jobs.csv")
    spec = _spec("cluster", "deadlines")
    frame = jobs.copy()
    frame.attrs["summary"] = pd.read_csv(out / "summary.csv").iloc[0].to_dict()
    fig = DRAW["deadlines"](spec, frame)
    bars = fig.axes[0].patches
    sizes = sorted(jobs["gpus"].unique())
    for bar, g in zip(bars, sizes, strict=True):
        mine = jobs[jobs["gpus"] == g]
        assert bar.get_height() == pytest.approx(mine["met_deadline"].sum() / len(mine))
    (cdf, _) = fig.axes[1].get_lines()  # the CDF and the line at 1
    ratio = (jobs["end_s"] - jobs["submit_s"]) / (jobs["deadline_s"] - jobs["submit_s"])
    x, y = cdf.get_xdata(), cdf.get_ydata()
    at_one = y[np.searchsorted(x, 1.0, side="right") - 1]
    assert at_one == pytest.approx(float((ratio <= 1).mean()))
    plt.close(fig)


def test_stage_memory_table_is_the_summary_peak(tmp_path: Path) -> None:
    """training-parallel's ``stage_memory`` table: one row per stage whose categories
    add up, at the worst stage, to the summary's ``peak_bytes``; capacity is the H100's
    80 GiB; ``hetsim plot`` draws both parallel-training figures from it."""
    out = tmp_path / "m"
    args = ["run", "megatron-gpt", "-q", "--out", str(out), "--plots",
            "--set", "workload.pp=4", "--set", "workload.global_batch=384"]  # fmt: skip
    assert main(args) == 0
    mem = pd.read_csv(out / "tables" / "stage_memory.csv")
    summary = pd.read_csv(out / "summary.csv").iloc[0]
    cats = ["params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
            "buffers_bytes"]  # fmt: skip
    assert list(mem["stage"]) == [0, 1, 2, 3]
    assert mem[cats].sum(axis=1).max() == pytest.approx(summary["peak_bytes"], rel=1e-12)
    assert (mem["capacity_bytes"] == 80 * 2**30).all()
    names = sorted(p.name for p in (out / "figures").iterdir())
    shown = ("iteration-breakdown", "memory-per-stage", "energy-by-device", "power-over-time")
    assert names == sorted(f"{n}.{f}" for n in shown for f in ("png", "svg"))


def test_gpus_per_workload_counts_each_owners_devices_over_time() -> None:
    """Ownership intervals -> per owner, devices held at each instant: serving holds two
    GPUs over [0, 10], then one over [5, 10] goes to training: 2, then 1 with training 1."""
    owners = pd.DataFrame(
        {"device": ["g0", "g1", "g1"], "owner": ["serving", "serving", "training"],
         "start_s": [0.0, 0.0, 5.0], "end_s": [10.0, 5.0, 10.0]}
    )  # fmt: skip
    fig = DRAW["occupancy"](_spec("colocate", "gpus-per-workload"), owners)
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    serving, training = lines["serving"], lines["training"]
    # step "post": the count after each time point
    assert list(zip(serving.get_xdata(), serving.get_ydata(), strict=True)) == [
        (0.0, 1.0), (0.0, 2.0), (5.0, 1.0), (10.0, 0.0)]  # fmt: skip
    assert list(training.get_ydata()) == [1.0, 0.0]
    plt.close(fig)


def test_a_multi_workload_run_draws_the_colocate_figures(tmp_path: Path) -> None:
    out = tmp_path / "colo"
    code = main(["run", "colocate", "--set", "workloads.serving.requests.num_requests=3000",
                 "--set", "until_s=120", "--out", str(out), "--plots", "-q"])  # fmt: skip
    assert code == 0
    names = {p.name for p in (out / "figures").glob("*.png")}
    assert {"gpus-per-workload.png", "arbiter-over-time.png", "attainment-over-time.png"} <= names
