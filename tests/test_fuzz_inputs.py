"""Property tests of the input boundary (small; ``benchmarks/fuzz.py`` is the long run).

Whatever a scenario field, a scenario file's bytes or a trace line holds, ``hetsim
validate`` exits 0 or 2 with one line naming the file (a small build budget keeps
the huge sizes it tries quick: they are refused, not built), and the Mooncake reader returns
a trace or raises :class:`TraceError` -- never another exception.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsim.simulator.cli import main
from hetsim.simulator.errors import TraceError
from hetsim.workloads.serving.traces import read_mooncake

TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 1,
    "cluster": {
        "nodes": [{"name": "farm", "devices": {"server": {"type": "ideal-server", "count": 2}}}]
    },
    "workload": {
        "kind": "queueing",
        "arrivals": {"kind": "poisson", "rate_per_s": 1.0},
        "demand": {"kind": "exponential", "mean_flops": 1.0e12},
        "num_requests": 20,
    },
}
LEAVES = [
    ("seed",),
    ("name",),
    ("cluster", "nodes", 0, "devices", "server", "count"),
    ("cluster", "nodes", 0, "devices", "server", "type"),
    ("workload", "arrivals", "rate_per_s"),
    ("workload", "arrivals", "kind"),
    ("workload", "demand", "mean_flops"),
    ("workload", "num_requests"),
    ("workload", "kind"),
    ("until_s",),
]
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["1e999", "inf", "-nan", "18446744073709551616", "0x10", "1_000"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
QUICK = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _assert_clean(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", str(path), "--max-cpu-s", "0.5", "--max-memory-gib", "0.5"])
    err = capsys.readouterr().err
    assert code in (0, 2), (code, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"{path}: "), err


@QUICK
@given(leaf=st.sampled_from(LEAVES), value=VALUES)
def test_any_field_value_is_ok_or_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], leaf: tuple[Any, ...], value: Any
) -> None:
    raw = yaml.safe_load(yaml.safe_dump(TINY))
    node = raw
    for part in leaf[:-1]:
        node = node[part]
    node[leaf[-1]] = value
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    _assert_clean(path, capsys)


@QUICK
@given(cut=st.integers(min_value=0, max_value=400), junk=st.binary(max_size=12))
def test_any_bytes_are_ok_or_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cut: int, junk: bytes
) -> None:
    text = yaml.safe_dump(TINY).encode()
    path = tmp_path / "s.yaml"
    path.write_bytes(text[:cut] + junk + text[cut:])
    _assert_clean(path, capsys)


@QUICK
@given(
    line=st.one_of(
        st.text(max_size=80),
        st.builds(
            lambda a, b: f'{{"timestamp": {a}, "input_length": {b}, "output_length": 3}}',
            st.sampled_from(["0", "1e999", "NaN", "-1", "1.5", "[1]", "null", "2e3"]),
            st.one_of(st.integers(min_value=-5, max_value=2**70).map(str), st.just("1e30")),
        ),
    )
)
def test_any_mooncake_line_is_a_trace_or_a_trace_error(tmp_path: Path, line: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 4, "output_length": 2}\n' + line + "\n")
    try:
        trace = read_mooncake(path)
    except TraceError as e:
        assert str(e).startswith(f"{path}:"), str(e)
    else:
        assert (trace.prompt >= 0).all() and (trace.arrival_s >= 0).all()
