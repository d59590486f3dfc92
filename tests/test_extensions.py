"""Users extend hetsim without editing it: plugins, user catalogues, Hugging Face configs,
shipped scenarios by name and ``pkg:`` data paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import hetsim
from hetsim.simulator import registry
from hetsim.simulator.cli import main
from hetsim.simulator.scenario import load_scenario
from hetsim.workloads.models.hf_config import dense_from_hf_config, model_from_hf_config
from hetsim.workloads.paths import DATA_DIR, resolve_path
from tests.conftest import ROOT, SCENARIOS

# A policy written by a user, in a file outside the package: always the slowest server
# (by its estimated service time), so its effect on the quickstart workload is visible.
PLUGIN = textwrap.dedent('''
    """A user's dispatch policy, registered from outside hetsim."""
    from pydantic import BaseModel, ConfigDict

    from hetsim.simulator.registry import policies
    from hetsim.workloads.queueing.view import DispatchView


    class SlowestParams(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)


    @policies.register("queueing.dispatch", "user-slowest")
    class SlowestDispatch:
        """Send every request to the server that would serve it slowest."""

        Params = SlowestParams
        central_queue = False

        def __init__(self, params, rng):
            self.params = params

        def choose(self, view: DispatchView) -> int:
            return max(view.servers, key=lambda s: s.est_service_s).number
''')


def _quickstart(tmp_path: Path, **extra: object) -> Path:
    raw = yaml.safe_load((SCENARIOS / "quickstart.yaml").read_text())
    raw.pop("sweep", None)
    raw["workload"]["num_requests"] = 60
    raw.update(extra)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_policy_plugin_from_a_file_outside_the_package(tmp_path: Path) -> None:
    plugin = tmp_path / "elsewhere" / "my_policy.py"
    plugin.parent.mkdir()
    plugin.write_text(PLUGIN)
    path = _quickstart(tmp_path, plugins=["elsewhere/my_policy.py"])
    ours = hetsim.run(path, overrides={"policies.dispatch": "user-slowest"})
    fifo = hetsim.run(path, overrides={"policies.dispatch": "least-loaded"})
    assert "user-slowest" in registry.policies.point("queueing.dispatch")
    assert ours.scenario["plugins"] == ["elsewhere/my_policy.py"]
    # quickstart holds an A100 and an L4: always choosing the slower one is slower
    # than least-loaded on mean sojourn (direction only; both serve the same requests)
    assert ours.summary.mean_sojourn_s.iloc[0] > fifo.summary.mean_sojourn_s.iloc[0]
    servers = ours.tables["requests"]["server"].unique()
    assert len(servers) == 1  # the same (slower) server every time


def test_cli_plugin_flag_and_bad_plugin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugin = tmp_path / "cli_policy.py"
    plugin.write_text(PLUGIN.replace("user-slowest", "user-slowest-cli"))
    path = _quickstart(tmp_path)
    env_before = os.environ.get("HETSIM_PLUGINS")
    try:
        code = main(["--plugin", str(plugin), "run", str(path), "-q",
                     "--set", "policies.dispatch=user-slowest-cli"])  # fmt: skip
        assert code == 0
        assert str(plugin.resolve()) in os.environ["HETSIM_PLUGINS"]  # workers inherit it
    finally:
        if env_before is None:
            os.environ.pop("HETSIM_PLUGINS", None)
        else:
            os.environ["HETSIM_PLUGINS"] = env_before
    capsys.readouterr()
    assert main(["--plugin", "no_such_module_xyz", "list", "devices"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no_such_module_xyz" in err


def test_scenario_plugin_error_names_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "broken.py"
    bad.write_text("raise RuntimeError('boom')\n")
    path = _quickstart(tmp_path, plugins=["broken.py"])
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "plugins[0]" in err and "boom" in err


# ---- user catalogue ---------------------------------------------------------------------
CATALOGUE = {
    "devices": {
        "lab-npu": {
            "display_name": "Lab NPU", "vendor": "lab", "kind": "npu",
            "peak_flops": {"fp16": 100e12}, "memory_bytes": 32 * 2**30,
            "memory_bandwidth_Bps": 1.0e12, "source": "made up for a test",
        }
    },
    "models": {"tiny-llama": {"hf_config": "tiny.json"}},
}  # fmt: skip
TINY = {  # TinyLlama-1.1B config.json (the fields used)
    "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 22,
    "num_attention_heads": 32, "num_key_value_heads": 4, "intermediate_size": 5632,
    "vocab_size": 32000, "max_position_embeddings": 2048, "tie_word_embeddings": False,
}  # fmt: skip


def test_user_catalogue_adds_a_device_and_a_model(tmp_path: Path) -> None:
    (tmp_path / "tiny.json").write_text(json.dumps(TINY))
    (tmp_path / "lab.yaml").write_text(yaml.safe_dump(CATALOGUE))
    raw = yaml.safe_load((SCENARIOS / "quickstart.yaml").read_text())
    raw.pop("sweep", None)
    raw["catalogue"] = ["lab.yaml"]
    raw["workload"]["num_requests"] = 20
    raw["workload"]["demand"]["model"] = "tiny-llama"
    raw["cluster"]["nodes"][0]["devices"] = {
        "npu": {"type": "lab-npu"},
        "cpu": {"type": "xeon-8480"},
    }
    raw["cluster"]["nodes"][0]["links"] = [{"type": "pcie4-x16", "between": ["npu", "cpu"]}]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = hetsim.run(path)
    assert "lab-npu" in registry.device_types and "tiny-llama" in registry.models
    # TinyLlama-1.1B: 1.10e9 parameters published; counted from the config's shapes
    assert registry.models.get("tiny-llama").params == pytest.approx(1.100e9, rel=0.005)
    assert result.summary["requests"].iloc[0] == 20


def test_a_user_npu_serves(tmp_path: Path) -> None:
    """The serving workload runs on an NPU of a user catalogue as on a GPU (its kernels
    priced by the roofline with the catalogue's peaks), not 'no GPU in the cluster'."""
    (tmp_path / "tiny.json").write_text(json.dumps(TINY))
    (tmp_path / "lab.yaml").write_text(yaml.safe_dump(CATALOGUE))
    raw = {
        "name": "npu-serving", "seed": 1, "catalogue": ["lab.yaml"],
        "cluster": {"nodes": [{"name": "box", "devices": {"npu": {"type": "lab-npu", "count": 2}}}]},
        "workload": {"kind": "serving", "model": "tiny-llama", "price_preset": "none",
                     "requests": {"arrivals": "poisson", "rate_per_s": 2, "num_requests": 30,
                                  "prompt_tokens": 256, "output_tokens": 16}},
        "policies": {"deployment": {"name": "colocated", "gpu_type": "lab-npu"}},
        "outputs": {"spans": False},
    }  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    row = hetsim.run(path).summary.iloc[0]
    assert row["requests"] == 30 and row["ttft_mean_s"] > 0


def test_user_catalogue_cannot_redefine_a_shipped_device(tmp_path: Path) -> None:
    spec = dict(CATALOGUE["devices"]["lab-npu"], display_name="fake H100")
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"devices": {"h100-sxm": spec}}))
    path = _quickstart(tmp_path, catalogue=["bad.yaml"])
    with pytest.raises(hetsim.ScenarioError, match=r"catalogue\[0\].*h100-sxm"):
        load_scenario(path)


# ---- Hugging Face config.json ---------------------------------------------------------
# Published total parameter counts (model cards): Llama-2-7B 6.74e9, Mistral-7B 7.24e9,
# Qwen2-7B 7.62e9 (tied embeddings: no; QKV biases: yes).
@pytest.mark.parametrize(
    ("config", "published"),
    [
        ({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
          "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 11008,
          "vocab_size": 32000, "max_position_embeddings": 4096}, 6.74e9),
        ({"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
          "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
          "vocab_size": 32000, "max_position_embeddings": 32768}, 7.24e9),
        ({"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
          "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944,
          "vocab_size": 152064, "max_position_embeddings": 32768,
          "tie_word_embeddings": False}, 7.62e9),
    ],
    ids=["llama-2-7b", "mistral-7b", "qwen2-7b"],
)  # fmt: skip
def test_dense_params_from_config(config: dict[str, object], published: float) -> None:
    spec = dense_from_hf_config("m", config)
    assert spec.params == pytest.approx(published, rel=0.002)


def test_config_matches_the_shipped_llama_entry() -> None:
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 11008,
           "vocab_size": 32000, "max_position_embeddings": 4096}  # fmt: skip
    got, want = dense_from_hf_config("x", cfg), registry.models.get("llama-2-7b")
    for field in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "max_context"):
        assert getattr(got, field) == getattr(want, field), field
    assert got.kv_bytes_per_token() == want.kv_bytes_per_token()


def test_moe_config_gives_an_moe_model(tmp_path: Path) -> None:
    mixtral = {"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
               "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(mixtral))
    model = model_from_hf_config("mixtral", path)
    assert getattr(model, "routed_experts", None) == 8
    path.write_text("{not json")
    with pytest.raises(ValueError, match=r"config\.json"):
        model_from_hf_config("bad", path)


# ---- scenarios and data travel with the package ---------------------------------------
def test_shipped_scenario_by_name_and_listing(capsys: pytest.CaptureFixture[str]) -> None:
    sc = load_scenario("quickstart")
    assert sc.name and Path(sc.file).name == "quickstart.yaml"
    assert main(["list", "scenarios"]) == 0
    out = capsys.readouterr().out
    assert "quickstart" in out and "cauchy" in out
    assert main(["validate", "no-such-scenario"]) == 2
    assert "shipped" in capsys.readouterr().err


def test_pkg_paths_and_copied_scenarios(tmp_path: Path) -> None:
    assert resolve_path("pkg:serving/azure_conv_2023_sample.csv", tmp_path).is_file()
    with pytest.raises(ValueError):
        resolve_path("pkg:../../etc/passwd", tmp_path)
    assert resolve_path("t.csv", tmp_path) == tmp_path / "t.csv"
    # a shipped scenario with a trace, copied to an unrelated folder, still validates
    copy = tmp_path / "copied.yaml"
    copy.write_text((SCENARIOS / "muri.yaml").read_text())
    assert main(["validate", str(copy)]) == 0
    for scenario in SCENARIOS.glob("*.yaml"):
        assert "../workloads" not in scenario.read_text(), scenario
    assert (DATA_DIR / "serving").is_dir()


# ---- packaging -------------------------------------------------------------------------
@pytest.mark.slow
def test_wheel_installs_one_top_level_package(tmp_path: Path) -> None:
    """The wheel holds hetsim/ only (no generic top-level names), with the scenarios and
    shipped data inside it."""
    import zipfile

    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "-q", "-w", str(tmp_path), str(ROOT)], check=True)  # fmt: skip
    wheel = next(tmp_path.glob("hetsim-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"hetsim"}, tops
    for needed in ("hetsim/scenarios/quickstart.yaml", "hetsim/simulator/cli.py",
                   "hetsim/workloads/serving/workload.py", "hetsim/devices/catalogue.yaml",
                   "hetsim/workloads/data/serving/azure_conv_2023_sample.csv",
                   "hetsim/workloads/models/dense.yaml", "hetsim/py.typed"):  # fmt: skip
        assert needed in names, needed


def test_version_matches_pyproject(capsys: pytest.CaptureFixture[str]) -> None:
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"hetsim {declared}" == f"hetsim {hetsim.__version__}"
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["version"] == declared and (ROOT / "LICENSE").read_text().count("Apache License")


def test_readme_plugin_example_runs(tmp_path: Path) -> None:
    """The README's plugin example, as written there, registers a working policy."""
    text = (ROOT / "README.md").read_text()
    start = text.index("# my_policies.py\n")
    code = text[start : text.index("```", start)]
    (tmp_path / "my_policies.py").write_text(code)
    path = _quickstart(tmp_path, plugins=["my_policies.py"])
    result = hetsim.run(path, overrides={"policies.dispatch": "shortest-queue"})
    assert result.summary["requests"].iloc[0] == 60
