"""Bad MoE input: one line naming the file and the field, exit code 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.cli_helpers import cli_error

BASE = """\
name: bad-moe
cluster:
  nodes:
    - name: box
      devices:
        gpu: {type: rtx-4090}
        cpu: {type: ryzen-7950x}
      links:
        - {type: pcie4-x16, between: [gpu, cpu]}
workload:
  kind: moe
  model: mixtral-8x7b
  prompt_tokens: 8
  output_tokens: 2
  cache_fraction: 0.25
"""

TINY = (
    "{name: tiny, layers: 2, hidden: 64, routed_experts: 4, top_k: 8, expert_ffn: 32, "
    "attention_params: 1000, kv_bytes_per_token: 100, vocab: 100}"
)


def test_trace_with_wrong_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "trace.npy", np.full((20, 31, 8), 0.125))
    text = BASE.replace("cache_fraction: 0.25", "routing: {kind: replay, path: trace.npy}")
    assert cli_error(tmp_path, capsys, text) == (
        "workload: routing.path: trace trace.npy has shape (20, 31, 8); expected "
        "(tokens >= 74, moe_layers = 32, experts = 8)"
    )


def test_top_k_larger_than_experts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = BASE.replace("model: mixtral-8x7b", f"model: {TINY}")
    assert cli_error(tmp_path, capsys, text) == (
        "workload.model: top_k: 8 is larger than routed_experts (4)"
    )


def test_cache_larger_than_gpu_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 256 experts x 3 x 4096 x 14336 x 4.5 / 8 bytes = 25.4 GB > the 4090's 24 GiB
    err = cli_error(tmp_path, capsys, BASE.replace("cache_fraction: 0.25", "cache_fraction: 1.0"))
    assert err.startswith("workload: cache_fraction: moe.cache needs 25367150592 bytes")


def test_unknown_model_and_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = cli_error(tmp_path, capsys, BASE.replace("mixtral-8x7b", "mixtral-9x9b"))
    assert err.startswith("workload: model: unknown MoE model 'mixtral-9x9b'; valid: ")
    err = cli_error(tmp_path, capsys, BASE + "policies: {cache: fifo}\n")
    assert err.startswith("policies.cache: unknown policy for moe.cache 'fifo'; valid: adapmoe")
