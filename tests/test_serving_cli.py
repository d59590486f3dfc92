"""Bad serving input: one line naming the file and the field, exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import cli_error

BASE = """\
name: bad-serving
cluster:
  nodes:
    - name: box
      devices:
        gpu: {type: l4}
workload:
  kind: serving
  model: llama-3-8b
  tp_options: [1]
  requests:
    num_requests: 3
    arrivals: trace
    lengths: trace
    rate_per_s: null
    trace: {format: azure, path: trace.csv}
"""


def test_negative_token_count_names_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "trace.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.68,374,44\n"
        "2023-11-16 18:15:50.99,-3,109\n"
    )
    assert cli_error(tmp_path, capsys, BASE) == (
        f"{tmp_path / 'trace.csv'}:3: column ContextTokens: '-3' is not a count >= 0"
    )


def test_missing_column_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "trace.csv").write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,374\n")
    assert cli_error(tmp_path, capsys, BASE) == (
        "workload: trace trace.csv line 1: missing column(s) GeneratedTokens"
    )


def test_model_too_big_names_the_bytes_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "trace.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "2023-11-16 18:15:46.68,374,44\n" * 3
    )
    text = BASE.replace("llama-3-8b", "llama-2-70b")
    # 69e9 params x 2 B = 138e9 B of weights; one L4 at 0.9 holds 0.9 x 24 GiB
    short = 138_000_000_000 - int(0.9 * 24 * 2**30)
    assert cli_error(tmp_path, capsys, text) == (
        f"workload: model llama-2-70b (138000000000 B of fp16 weights) does not fit on "
        f"1 x l4 at mem_fraction 0.9: {short} bytes short"
    )
