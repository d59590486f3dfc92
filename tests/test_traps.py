"""No silent traps: each mistake or missing piece is one line (or a warning), never a
quietly wrong result. Each test fails on the behaviour it replaces."""

from __future__ import annotations

import warnings
from collections import defaultdict
from pathlib import Path

import pytest

from hetsim.devices.catalogue import shipped_devices, shipped_fabrics, shipped_links
from hetsim.simulator.cli import main
from tests.cli_helpers import TINY
from tests.conftest import SHARED, missing_shared_data

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"

SERVING = """\
name: fabric
seed: 1
{catalogue}
cluster:
  nodes:
    - name: n
      devices:
        gpu: {{type: {gpu}, count: {count}}}
workload:
  kind: serving
  model: llama-2-7b
  dtype: fp16
  load_weights: false
  price_preset: none
  requests: {{num_requests: 20, arrivals: poisson, rate_per_s: 2, lengths: synthetic,
             synthetic: {{total: {{dist: uniform, low: 512, high: 1024}},
                          prefill_decode_ratio: 3}}}}
policies:
  deployment:
    name: fixed
    instances:
      - {{role: mixed, gpu_type: {gpu}, tp: {tp}, count: 1}}
  routing: round-robin
outputs: {{spans: false}}
"""

LAB = """\
devices:
  my-npu:
    display_name: My NPU 1
    vendor: Example
    kind: {kind}
    peak_flops: {{bf16: 400e12, fp16: 400e12, int8: 800e12}}
    memory_bytes: 68719476736
    memory_bandwidth_Bps: 1.6e12
    source: "vendor datasheet, 2026"
links: {{}}
"""


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


# 1. scale-up fabric: a property of the device catalogue


def test_every_accelerator_names_its_fabric() -> None:
    fabrics, links = shipped_fabrics(), shipped_links()
    for name, spec in shipped_devices().items():
        if spec.kind not in ("gpu", "npu"):
            continue
        f = spec.scaleup_fabric
        assert f, f"{name} has no scaleup_fabric"
        assert f in fabrics or f == "pcie" or (f == "link" and spec.scaleup_link in links), name
        if f in fabrics and spec.scaleup_link:
            # the fabric's per-rank bound is the GPU's scale-up bandwidth (links x rate)
            link = links[spec.scaleup_link]
            mesh = max(fabrics[f].mesh_links, 1)
            assert fabrics[f].bandwidth_Bps == pytest.approx(link.bandwidth_Bps * mesh), name


def _ttft(tmp_path: Path, gpu: str, tp: int, extra: list[str] = ()) -> float:  # type: ignore[assignment]
    import pandas as pd

    path = tmp_path / f"{gpu}-{tp}-{len(extra)}.yaml"
    path.write_text(SERVING.format(gpu=gpu, count=tp, tp=tp, catalogue=""))
    out = tmp_path / f"out-{gpu}-{tp}-{len(extra)}"
    assert main(["run", str(path), "--out", str(out), *extra]) == 0
    return float(pd.read_csv(out / "summary.csv")["ttft_mean_s"].iloc[0])


@pytest.mark.parametrize("gpu, fabric, slower", [
    ("h200", "h100-nvswitch", "pcie"),
    ("mi300x", "mi300x-if", "pcie"),
    ("b200", "b200-nvswitch", "h100-nvswitch"),  # no PCIe Gen6 link type: NVLink4 instead
])  # fmt: skip
def test_tp_runs_on_the_catalogue_fabric(
    tmp_path: Path, gpu: str, fabric: str, slower: str
) -> None:
    """TP8 on an NVLink/Infinity Fabric GPU: the same as naming the fabric by hand, and
    faster than a slower fabric (a ring over PCIe is what the old five-entry table gave
    these GPUs)."""
    own = _ttft(tmp_path, gpu, 8)
    named = _ttft(tmp_path, gpu, 8, ["--set", f"workload.tp_fabrics={{{gpu}: {fabric}}}"])
    slow = _ttft(tmp_path, gpu, 8, ["--set", f"workload.tp_fabrics={{{gpu}: {slower}}}"])
    assert own == named
    assert own < 0.9 * slow


def test_device_without_fabric_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "lab.yaml").write_text(LAB.format(kind="npu"))
    path = tmp_path / "s.yaml"
    path.write_text(SERVING.format(gpu="my-npu", count=2, tp=2, catalogue="catalogue: [lab.yaml]"))
    assert main(["run", str(path)]) == 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if "scaleup_fabric" in ln]
    assert len(err) == 1 and "my-npu" in err[0] and "PCIe" in err[0]


# 2. a warm-up that swallows the run


@pytest.mark.parametrize("text, needle", [
    (TINY + "  warmup_requests: 25\nuntil_s: 2\n", "warmup_requests"),
    (TINY + "  warmup_requests: 30\n", "warmup_requests"),
])  # fmt: skip
def test_queueing_warmup_swallows_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, needle: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert main(["run", str(path)]) == 2
    assert needle in _one_line(capsys)


def test_serving_warmup_past_until(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SERVING.format(gpu="a100-80gb", count=1, tp=1, catalogue=""))
    assert main(["run", str(path), "--set", "workload.warmup_s=5", "--set", "until_s=4"]) == 2
    assert "warmup_s" in _one_line(capsys)


# 3. a device kind the workload cannot use


def test_kind_the_workload_cannot_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "lab.yaml").write_text(LAB.format(kind="tpu").replace("my-npu", "my-tpu"))
    path = tmp_path / "s.yaml"
    path.write_text(SERVING.format(gpu="my-tpu", count=1, tp=1, catalogue="catalogue: [lab.yaml]"))
    assert main(["run", str(path)]) == 2
    err = _one_line(capsys)
    assert "kind gpu or npu" in err and "tpu" in err


def test_npu_serves(tmp_path: Path) -> None:
    (tmp_path / "lab.yaml").write_text(LAB.format(kind="npu"))
    path = tmp_path / "s.yaml"
    path.write_text(SERVING.format(gpu="my-npu", count=1, tp=1, catalogue="catalogue: [lab.yaml]"))
    assert main(["run", str(path)]) == 0


# 4. sweeps say which points were overloaded


def test_sweep_table_has_overloaded_and_warns() -> None:
    import hetsim
    from hetsim.simulator.runner import RunWarning

    grid = {"workload.arrivals.rate_per_s": [0.5, 3.0]}
    sc = hetsim.load_scenario("mmc", {"sweep": grid, "workload.num_requests": 2000,
                                      "workload.warmup_requests": 200,
                                      "cluster.nodes": [{"name": "f", "devices": {
                                          "server": {"type": "ideal-server", "count": 2}}}]})  # fmt: skip
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        table = hetsim.sweep(sc)
    assert list(table["overloaded"]) == [False, True]
    lines = [str(w.message) for w in got if issubclass(w.category, RunWarning)]
    assert len(lines) == 1 and "1 of 2 points overloaded" in lines[0]


def test_sweep_without_overload_check_has_the_column() -> None:
    import hetsim

    sc = hetsim.load_scenario("tensortee", {"sweep": {"seed": [1]}})
    assert "overloaded" in hetsim.sweep(sc)


# 5. plugins: one line per mistake, naming the plugin file

_GOOD = '''
from pydantic import BaseModel, ConfigDict
from hetsim.simulator.registry import policies


class P(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@policies.register("{point}", "{name}")
class Mine:
    """A test policy."""

    {params}
    central_queue = False

    def __init__(self, params, rng):
        self.params = params

    def choose(self, view):
        return 0
'''


@pytest.mark.parametrize("point, name, params, needle", [
    ("queueing.dispatch", "fifo", "Params = P", "registered twice"),
    ("queueing.dispatch", "trap-no-params", "", "has no Params"),
    ("queueing.dispatch", "trap-bad-params", "Params = dict", "pydantic BaseModel"),
    ("queueing.dispach", "trap-bad-point", "Params = P", "did you mean 'queueing.dispatch'"),
])  # fmt: skip
def test_plugin_mistake_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], point: str, name: str, params: str,
    needle: str,
) -> None:  # fmt: skip
    plugin = tmp_path / f"p_{name.replace('-', '_')}.py"
    plugin.write_text(_GOOD.format(point=point, name=name, params=params))
    assert main(["--plugin", str(plugin), "validate", "mmc"]) == 2
    err = _one_line(capsys)
    assert str(plugin) in err and needle in err, err


def test_plugin_workload_base_class(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugin = tmp_path / "wl.py"
    plugin.write_text("from hetsim.simulator.registry import workloads\n\n"
                      "@workloads.register('trap-kind')\nclass NotAWorkload:\n    pass\n")  # fmt: skip
    assert main(["--plugin", str(plugin), "validate", "mmc"]) == 2
    err = _one_line(capsys)
    assert "wl.py" in err and "must subclass hetsim.workloads.base.Workload" in err


def test_plugin_after_the_subcommand(tmp_path: Path) -> None:
    plugin = tmp_path / "after.py"
    plugin.write_text(
        _GOOD.format(point="queueing.dispatch", name="trap-after", params="Params = P")
    )
    path = tmp_path / "s.yaml"
    path.write_text(TINY)
    assert main(["run", str(path), "--plugin", str(plugin),
                 "--set", "policies.dispatch=trap-after"]) == 0  # fmt: skip


def test_testing_harness_two_decision_points() -> None:
    from hetsim.testing import decide, dispatch_view, instance, make_policy, route_view, server

    least = make_policy("queueing.dispatch", "least-loaded")
    view = dispatch_view([server(0, jobs=3, backlog_s=3.0), server(1, jobs=1, backlog_s=1.0)])
    assert decide("queueing.dispatch", least, view) == 1
    router = make_policy("serving.routing", "least-outstanding")
    view2 = route_view([instance(0, outstanding=5), instance(1, outstanding=2)])
    assert decide("serving.routing", router, view2) == 1
    rr = make_policy("serving.routing", "round-robin")
    assert [decide("serving.routing", rr, route_view([instance(0), instance(1)]))
            for _ in range(3)] == [0, 1, 0]  # fmt: skip


# 6. discovery


def test_list_models_has_every_moe_model(capsys: pytest.CaptureFixture[str]) -> None:
    from hetsim.workloads.models.moe import load_moe_models

    assert main(["list", "models"]) == 0
    out = capsys.readouterr().out
    for name in load_moe_models():
        assert f"  {name} " in out, name


def test_misspelt_scenario_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "quickstrat"]) == 2
    assert "did you mean 'quickstart'?" in _one_line(capsys)


@pytest.mark.parametrize("path, wrong, right", [
    ("seeed", "seeed", "seed"),
    ("workload.num_requets", "num_requets", "num_requests"),
    ("policies.batching.token_budgt", "token_budgt", "token_budget"),
])  # fmt: skip
def test_unknown_key_did_you_mean(
    capsys: pytest.CaptureFixture[str], path: str, wrong: str, right: str
) -> None:
    name = "vidur-workload" if path.startswith("policies") else "quickstart"
    assert main(["run", name, "--set", f"{path}=5"]) == 2
    assert f"did you mean {right!r}?" in _one_line(capsys)


def test_unknown_nested_key_in_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(TINY.replace("count: 2}", "cuont: 2}"))
    assert main(["validate", str(path)]) == 2
    err = _one_line(capsys)
    assert "devices.server.cuont" in err and "did you mean 'count'?" in err


def test_unshipped_data_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "a" / "b" / "alibaba2023.yaml"
    copy.parent.mkdir(parents=True)
    copy.write_text((SCENARIOS / "alibaba2023.yaml").read_text())
    assert main(["validate", str(copy)]) == 2
    err = _one_line(capsys)
    assert "github.com/alibaba/clusterdata" in err and "put it at" in err
    assert main(["list", "scenarios"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "alibaba2023" in ln)
    assert "needs unshipped data" in line


def test_plots_for_tee_and_offload(tmp_path: Path) -> None:
    for name in ("tensortee", "tee_nna", "tee_verify", "flexgen"):
        out = tmp_path / name
        assert main(["run", name, "--out", str(out), "--plots"]) == 0
        assert list((out / "figures").glob("*.png")), name


def test_no_empty_deadline_panels(tmp_path: Path) -> None:
    out = tmp_path / "muri"
    assert main(["run", "muri", "--out", str(out), "--plots"]) == 0
    figures = {p.name for p in (out / "figures").glob("*.png")}
    assert "jct-cdf.png" in figures and "deadlines.png" not in figures


# 7. traces: no two slices of one track cross


def _crossings(events: list[dict]) -> int:  # type: ignore[type-arg]
    """Slices of one track (pid, tid) that start inside another and end after it."""
    tracks: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            t0 = round(e["ts"] * 1000)
            tracks[(e["pid"], e["tid"])].append((t0, t0 + round(e["dur"] * 1000)))
    bad = 0
    for spans in tracks.values():
        stack: list[int] = []
        for s, e in sorted(spans, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= s:
                stack.pop()
            bad += bool(stack and e > stack[-1])
            stack.append(e)
    return bad


def test_span_lanes_rule() -> None:
    from hetsim.simulator.trace import span_lanes

    # 1 ns of rounding overlap: same lane, start moved to the earlier end
    assert span_lanes([0, 99], [100, 200]) == ([0, 0], [0, 100], [100, 200])
    # nested: same lane; crossing: a lane of its own
    assert span_lanes([0, 10], [100, 50])[0] == [0, 0]
    assert span_lanes([0, 50], [100, 150])[0] == [0, 1]


def test_overlapping_faults_get_lanes() -> None:
    """kair's injected faults overlap in time on one track (they crossed before)."""
    import hetsim
    from hetsim.simulator.trace import trace_events

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = hetsim.run("kair", overrides={"until_s": 600, "outputs.spans": True})
    events = trace_events(r.recorder)
    assert _crossings(events) == 0
    assert any(e.get("args", {}).get("name") == "faults (faults) lane 2" for e in events)


def _short(name: str, kind: str) -> dict[str, object]:
    over: dict[str, object] = {"until_s": 2e5 if kind == "cluster" else 600.0,
                               "outputs.spans": True}  # fmt: skip
    if kind == "queueing":
        over["workload.warmup_requests"] = 0
    return over


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_traces_have_no_crossing_slices(path: Path) -> None:
    import yaml

    import hetsim
    from hetsim.simulator.trace import trace_events

    if missing_shared_data(path) or (not SHARED.exists() and "shared" in path.read_text()):
        pytest.skip("reads data that is not here")
    data = yaml.safe_load(path.read_text())
    kind = data["workload"]["kind"] if "workload" in data else "colocated"  # workloads: form
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = hetsim.run(path, overrides=_short(path.stem, kind))
    assert _crossings(trace_events(r.recorder)) == 0


def test_plugin_taking_a_builtin_name_fresh_process(tmp_path: Path) -> None:
    """In a fresh process the plugin registers first and hetsim's own module later (a
    40-line traceback before): one line naming the plugin."""
    import subprocess
    import sys

    plugin = tmp_path / "dup.py"
    plugin.write_text(_GOOD.format(point="queueing.dispatch", name="fifo", params="Params = P"))
    run = subprocess.run(
        [sys.executable, "-m", "hetsim.simulator.cli", "--plugin", str(plugin), "run",
         "quickstart", "--set", "workload.num_requests=20"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "dup.py" in lines[0] and "registered twice" in lines[0], run.stderr


def test_user_device_names_its_fabric(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lab = LAB.format(kind="gpu").replace("my-npu", "my-nvl-gpu")
    lab = lab.replace(
        '    source: "vendor', '    scaleup_fabric: h100-nvswitch\n    source: "vendor'
    )
    (tmp_path / "lab.yaml").write_text(lab)
    path = tmp_path / "s.yaml"
    text = SERVING.format(gpu="my-nvl-gpu", count=2, tp=2, catalogue="catalogue: [lab.yaml]")
    path.write_text(text)
    assert main(["run", str(path)]) == 0
    assert "scaleup_fabric" not in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    (tmp_path / "lab2.yaml").write_text(lab.replace("my-nvl-gpu", "my-bad-gpu")
                                        .replace("h100-nvswitch", "h100-nvswtch"))  # fmt: skip
    bad.write_text(SERVING.format(gpu="my-bad-gpu", count=2, tp=2,
                                  catalogue="catalogue: [lab2.yaml]"))  # fmt: skip
    assert main(["run", str(bad)]) == 2
    assert "did you mean 'h100-nvswitch'?" in _one_line(capsys)
