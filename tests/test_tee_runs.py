"""Short runs of the TEE scenarios: the papers' directions of effect, and bad input."""

from pathlib import Path

import pytest

import hetsim
from hetsim.simulator.cli import main
from tests.conftest import ROOT

TT = ROOT / "scenarios" / "tensortee.yaml"
NNA = ROOT / "scenarios" / "tee_nna.yaml"


def _step(model: str, scheme: str) -> dict:
    res = hetsim.run(TT, workload__model=model, workload__steps=2, policies__protection=scheme)
    return res.summary.iloc[0].to_dict()


def test_tensortee_directions() -> None:
    small = {s: _step("gpt3-1.3b", s) for s in ("none", "cacheline", "tensortee", "h100-cc")}
    big = {s: _step("gpt3-13b", s) for s in ("none", "cacheline", "tensortee")}
    # paper: TensorTEE several times faster than the cacheline TEE (4.0x on average)
    assert small["cacheline"]["step_s"] > 2 * small["tensortee"]["step_s"]
    # TensorTEE keeps residual costs (tests/test_tensortee_residual.py): above non-secure
    assert small["tensortee"]["step_s"] > small["none"]["step_s"]
    # paper: the benefit grows with model size
    gain = [d["cacheline"]["step_s"] / d["tensortee"]["step_s"] for d in (small, big)]
    assert gain[1] > gain[0]
    # bounce buffers cost, but less than re-encrypting on both sides
    assert small["tensortee"]["step_s"] < small["h100-cc"]["step_s"] < small["cacheline"]["step_s"]
    # parts of the overhead add up to the stall; MAC storage costs NPU capacity
    c = big["cacheline"]
    assert c["reencrypt_s"] + c["verify_s"] + c["metadata_s"] == pytest.approx(c["stall_s"])
    assert c["accel_meta_capacity_bytes"] > 0.1 * 4 * 13e9
    assert small["none"]["metadata_bytes"] == 0 and c["reencrypt_bytes"] == 4 * 2 * 2 * 13e9


def test_tee_nna_directions() -> None:
    rows = {}
    for policy in ("tee-only", "offload", "pipelined", "nappa"):
        res = hetsim.run(NNA, workload__steps=2, policies__execution=policy)
        rows[policy] = res.summary.iloc[0].to_dict()
    assert rows["tee-only"]["speedup_vs_tee_only"] == pytest.approx(1.0)
    # pipelining never loses to the unpipelined offload and hides some TEE work
    assert rows["pipelined"]["step_s"] <= rows["offload"]["step_s"]
    assert 0 < rows["pipelined"]["hidden_share"] <= 1
    assert rows["offload"]["hidden_share"] == pytest.approx(0.0, abs=1e-9)
    # paper: 8-19x over TEE-only for CNNs; accept >= 5x on VGG-16
    assert rows["pipelined"]["speedup_vs_tee_only"] >= 5
    # Nappa's allocation is never slower than the plain pipelined placement (same depth)
    assert rows["nappa"]["step_s"] <= rows["pipelined"]["step_s"] * (1 + 1e-9)


def test_bad_inputs_name_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    out = ["--out", str(tmp_path / "out")]
    bad.write_text(TT.read_text().replace("model: gpt3-6.7b", "model: gpt-99"))
    assert main(["run", str(bad), *out]) == 2
    err = capsys.readouterr().err
    assert "workload" in err and "gpt-99" in err
    bad.write_text(
        NNA.read_text().replace("execution: pipelined", "execution: {name: pipelined, depth: 0}")
    )
    assert main(["run", str(bad), *out]) == 2
    assert "policies.execution.depth" in capsys.readouterr().err
    bad.write_text(
        TT.read_text().replace(
            "protection: tensortee", "protection: {name: cacheline, cpu_enclave: sgx-9}"
        )
    )
    assert main(["run", str(bad), *out]) == 2
    assert "sgx-9" in capsys.readouterr().err
    # a preset that this model's streams would never use still fails at validation
    bad.write_text(
        TT.read_text().replace(
            "protection: tensortee", "protection: {name: tensortee, fallback_cpu: sgx-9}"
        )
    )
    assert main(["validate", str(bad)]) == 2
    assert "policies.protection.fallback_cpu: unknown enclave preset 'sgx-9'" in (
        capsys.readouterr().err
    )
    bad.write_text(NNA.read_text().replace("steps: 10", "steps: 10\n  nna_dtype: fp64"))
    assert main(["run", str(bad), *out]) == 2
    assert "nna_dtype" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
