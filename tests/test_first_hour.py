"""What a new user meets first: overload warnings, price-provider warnings, one-line
errors with "did you mean", quiet runs, short sweep output, readable plots."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import hetsim
from hetsim.simulator.cli import main
from hetsim.simulator.overload import load_check
from hetsim.simulator.runner import RunWarning
from hetsim.simulator.units import axis_label
from tests.cli_helpers import cli_error
from tests.conftest import ROOT


@contextmanager
def mock_argv(argv: list[str]) -> Iterator[None]:
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


# ---- overload -------------------------------------------------------------------------


def test_load_check_closed_forms() -> None:
    arrival = np.arange(400, dtype=float)  # 1 req/s over [0, 399]
    quick = load_check(arrival, arrival + 0.5)  # constant sojourn: slope 0, exactly
    assert quick is not None and not quick.overloaded
    assert quick.sojourn_growth == pytest.approx(0, abs=1e-12)
    assert quick.offered_per_s == pytest.approx(1.0)  # 399 gaps over 399 s
    assert quick.served_per_s == pytest.approx(400 / 399.5)  # last completion at 399.5
    # a FIFO server at half the rate: request i ends at 2 i + 1, sojourn i + 1, so the
    # sojourn grows 1 s per s of arrival time = offered / capacity - 1
    slow = load_check(arrival, 2 * arrival + 1)
    assert slow is not None and slow.overloaded
    assert slow.sojourn_growth == pytest.approx(1.0)
    assert slow.served_per_s == pytest.approx(400 / 799)
    assert load_check(arrival, np.full(400, np.nan)) is None  # nothing completed
    assert load_check(arrival[:199], arrival[:199] + 1) is None  # too few to judge
    # newest first: in the second half every odd request starves until t = 1000, so
    # sojourn times fall but the backlog grows from 1 (t = 199.5) to 100 (t = 399):
    # 99 / 200 arrivals of the half
    end = arrival + 1
    end[201::2] = 1000.0
    starve = load_check(arrival, end)
    assert starve is not None and starve.sojourn_growth < 0
    assert starve.backlog_growth == pytest.approx(99 / 200) and starve.overloaded


def test_overloaded_run_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    # quickstart's two GPUs serve about 16 req/s (measured: 15.7 at 40 offered)
    with pytest.warns(RunWarning, match="overloaded: sojourn time grows"):
        hot = hetsim.run("quickstart", workload__arrivals__rate_per_s=40,
                         workload__num_requests=600)  # fmt: skip
    assert hot["overloaded"] is True and hot["served_per_s"] < 0.6 * hot["offered_per_s"]
    assert hot.warnings[0].startswith("overloaded: sojourn time grows ")
    assert "overloaded" in hot.metrics
    calm = hetsim.run("quickstart", workload__arrivals__rate_per_s=5, workload__num_requests=600)
    assert calm["overloaded"] is False and calm.warnings == []
    assert calm["served_per_s"] == pytest.approx(calm["offered_per_s"], rel=0.1)
    code = main(["run", "quickstart", "-q", "--set", "workload.arrivals.rate_per_s=40",
                 "--set", "workload.num_requests=600"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0 and out == ""
    assert err.startswith("quickstart: warning: overloaded: sojourn time grows ")
    assert err.count("\n") == 1


# ---- CLI ------------------------------------------------------------------------------


def test_quiet_prints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "quickstart", "-q", "--set", "workload.num_requests=100",
            "--out", str(tmp_path / "r"), "--trace", str(tmp_path / "t.json")]  # fmt: skip
    assert main(args) == 0
    assert capsys.readouterr() == ("", "")
    assert (tmp_path / "r" / "summary.csv").exists() and (tmp_path / "t.json").exists()


def test_did_you_mean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (Path(__file__).parent.parent / "scenarios" / "quickstart.yaml").read_text()
    err = cli_error(
        tmp_path, capsys, text.replace("dispatch: least-loaded", "dispatch: lest-loaded")
    )
    # the valid list also holds any policy a plugin registered earlier in this process
    assert err.startswith("policies.dispatch: unknown policy for queueing.dispatch 'lest-loaded'; did you "
                   "mean 'least-loaded'? valid: fifo, least-loaded, random")  # fmt: skip
    assert "round-robin" in err.split("valid: ")[1]
    err = cli_error(tmp_path, capsys, text.replace("llama-2-7b", "llama-3.1-70b"))
    assert err.startswith("workload: unknown model 'llama-3.1-70b'; did you mean 'llama-3-70b'?")
    err = cli_error(tmp_path, capsys, text.replace("type: a100-80gb", "type: a100-80g"))
    assert err.startswith("cluster.nodes[0].devices.a100.type: unknown device type 'a100-80g'; "
                          "did you mean 'a100-80gb'? valid: ")  # fmt: skip


def _fixed(instances: str) -> list[str]:
    return ["run", "disaggregation", "-q", "--set", "workload.requests.num_requests=60",
            "--set", f"policies.deployment={{name: fixed, instances: {instances}}}"]  # fmt: skip


@pytest.mark.parametrize(
    ("instances", "why"),
    [
        ("[{gpu_type: l4}]", "no l4 in the cluster (it has: a100-80gb, h100-sxm, l40s)"),
        ("[{gpu_type: a100-80gb, tp: 2}]", "tp=2 is not in tp_options [1]"),
    ],
)
def test_fixed_deployment_says_why(
    instances: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_fixed(instances)) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"workload: deployment: {instances.split(': ')[1].split(',')[0].rstrip('}]')}"
                        f" with tp={2 if 'tp: 2' in instances else 1} is not a valid config: {why}")  # fmt: skip


def test_catalogue_prices_of_two_providers_warn() -> None:
    mixed = {"name": "fixed", "instances": [{"gpu_type": "a100-80gb"}, {"gpu_type": "l40s"}]}
    with pytest.warns(RunWarning, match="mixes providers"):
        result = hetsim.run("disaggregation", overrides={
            "workload.requests.num_requests": 60, "workload.price_preset": "catalogue",
            "policies.deployment": mixed})  # fmt: skip
    (text,) = [w for w in result.warnings if "price_preset" in w]
    assert text.startswith("price_preset catalogue mixes providers (a100-80gb: Lambda, "
                           "l40s: AWS)")  # fmt: skip
    one = hetsim.run("disaggregation", overrides={"workload.requests.num_requests": 60})
    assert not [w for w in one.warnings if "price_preset" in w]  # aws-ondemand: one provider
    assert one["usd_per_million_tokens"] == pytest.approx(1e6 / one["tokens_per_usd"])


def test_sweep_prints_a_digest_and_stores_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sw"
    code = main(["sweep", "quickstart", "--out", str(out), "--set", "workload.num_requests=100",
                 "--set", "sweep={policies.dispatch: [fifo, {name: round-robin}]}"])  # fmt: skip
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "quickstart: 2 points, 0 failed"
    assert lines[2].split()[:2] == ["0", "fifo"] and lines[3].split()[:2] == ["1", "round-robin"]
    assert lines[-1] == f"results: {out} (the full table: {out}/sweep.csv)"
    assert max(len(line) for line in lines[:-1]) < 120
    table = pd.read_csv(out / "sweep.csv")
    assert json.loads(table["policies.dispatch"][1]) == {"name": "round-robin"}


# ---- plots ----------------------------------------------------------------------------


def test_axis_labels_carry_units() -> None:
    assert axis_label("ttft_p99_s") == "TTFT p99 (s)"
    assert axis_label("workload.arrivals.rate_per_s") == "arrival rate (1/s)"
    assert axis_label("goodput_tokens_per_usd") == "goodput (tokens/USD)"
    assert axis_label("kv_transfer_bytes") == "KV transfer (B)"
    assert axis_label("slo_attainment") == "SLO attainment (fraction)"
    assert axis_label("policies.dispatch") == "dispatch policy"
    assert axis_label("requests") == "requests"


def test_plot_sweep_labels_and_errors() -> None:
    import matplotlib

    matplotlib.use("Agg")  # a test has no display
    from hetsim.plotting import plot_sweep, value_label

    rows = [{"policies.x": p, "workload.arrivals.rate_per_s": r, "p99_sojourn_s": r * k,
             "error": None} for p, k in (('{"name": "a", "k": 2}', 1), ('{"label": "B"}', 2))
            for r in (1.0, 10.0, 100.0)]  # fmt: skip
    table = pd.DataFrame(rows)
    table.attrs["swept"] = ["policies.x", "workload.arrivals.rate_per_s"]
    ax = plot_sweep(table, "workload.arrivals.rate_per_s", "p99_sojourn_s", hue="policies.x")
    assert ax.get_xlabel() == "arrival rate (1/s)" and ax.get_ylabel() == "p99 sojourn (s)"
    assert ax.get_xscale() == "log"  # 1 to 100: spans 100x
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["B", "a (k=2)"]
    assert value_label({"name": "vllm", "max_batch": 8}) == "vllm (max_batch=8)"
    with pytest.raises(ValueError) as bad:
        plot_sweep(table, "workload.rate", "p99_sojourn_s")
    assert str(bad.value) == ("x='workload.rate' is not a column of this sweep table; its "
                              "swept columns: policies.x, workload.arrivals.rate_per_s")  # fmt: skip


# ---- reference --------------------------------------------------------------------------


def test_scenario_reference_and_schema_are_current() -> None:
    from hetsim.simulator.reference import main as reference_main

    with mock_argv(["reference", "--check"]):
        assert reference_main() == 0, "run: python -m hetsim.simulator.reference"


def _yaml12(value: object) -> object:
    """Numbers as a YAML 1.2 editor reads them (PyYAML keeps '1.0e12' a string)."""
    if isinstance(value, dict):
        return {k: _yaml12(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_yaml12(v) for v in value]
    if isinstance(value, str) and re.fullmatch(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+", value):
        return float(value)
    return value


def test_shipped_scenarios_satisfy_the_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "docs" / "scenario.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        validator.validate(_yaml12(yaml.safe_load(path.read_text())))
    bad = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    bad["workload"]["num_requests"] = "many"
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(bad)


def test_list_prints_fields_with_type_default_unit_and_doc(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["list", "workloads"]) == 0
    out = capsys.readouterr().out
    assert "    requests.rate_per_s: float > 0 | None = 1.0 [1/s]\n" in out  # serving
    assert "0x" not in out and str(ROOT) not in out and "FieldInfo" not in out
    assert main(["list", "policies"]) == 0
    out = capsys.readouterr().out
    assert "    estimate: Literal['stage', 'group'] = \"stage\"\n" in out
    assert "        group-time estimate: stage-grained, or Muri's (ablation)\n" in out


# ---- figures ----------------------------------------------------------------------------


def test_run_plots_writes_png_and_svg(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "qs"
    assert main(["run", "quickstart", "-q", "--set", "workload.num_requests=200",
                 "--out", str(out), "--plots"]) == 0  # fmt: skip
    names = sorted(p.name for p in (out / "figures").iterdir())
    assert names == sorted(f"{n}.{f}" for n in ("latency-cdf", "requests-in-system",
                                                "server-share", "power-over-time",
                                                "energy-by-device")
                           for f in ("png", "svg"))  # fmt: skip
    svg = (out / "figures" / "latency-cdf.svg").read_text()
    assert "sojourn (s)" in svg and "wait (s)" in svg  # axes in words and units
    first = (out / "figures" / "latency-cdf.png").read_bytes()
    assert main(["plot", str(out), "-q"]) == 0  # redrawn: same bytes (no dates inside)
    assert (out / "figures" / "latency-cdf.png").read_bytes() == first
    assert main(["run", "quickstart", "-q", "--plots"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "--plots: needs --out DIR (the figures go to DIR/figures)"
    )
    assert main(["plot", str(tmp_path)]) == 2
    assert "not a hetsim result folder" in capsys.readouterr().err


def test_trace_turns_spans_on_and_skips_unused_devices(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    args = ["run", "quickstart", "-q", "--set", "workload.num_requests=50",
            "--set", "outputs.spans=false", "--set", "policies.dispatch=fifo",
            "--set", "workload.arrivals.rate_per_s=0.5", "--trace", str(trace)]  # fmt: skip
    assert main(args) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert any(e["ph"] == "X" for e in events)  # spans recorded despite outputs.spans
    assert "box/cpu (device)" not in tracks  # the CPU runs nothing: no track
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert counters and all(n.endswith((" (bytes)", " power (W)")) for n in counters)
    assert "box/a100 power (W)" in counters  # the servers' draw (devices/energy.py)


def test_serving_warmup_cut_leaves_early_requests_out() -> None:
    base = {"workload.requests.num_requests": 300}
    full = hetsim.run("disaggregation", overrides=base)
    cut = hetsim.run("disaggregation", overrides={**base, "workload.warmup_s": 10.0})
    requests = full.tables["requests"]
    late = requests[requests["arrival_s"] >= 10.0]  # same seed: the same requests
    assert 0 < cut["requests"] == len(late) < full["requests"]
    assert cut["ttft_p99_s"] == pytest.approx(np.percentile(late["ttft_s"], 99), rel=1e-12)
    assert cut["slo_attainment"] == pytest.approx(late["meets_slo"].mean(), rel=1e-12)
    assert cut["cost_usd"] == full["cost_usd"]  # cost counts every provisioned hour
