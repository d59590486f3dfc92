"""ServeGen importer: rate windows to arrivals, token PDFs to lengths, bad rows."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from hetsim.simulator.cli import main
from hetsim.workloads.serving.requests import RequestsConfig, generate
from hetsim.workloads.serving.traces import TraceConfig, read_servegen_lengths, read_servegen_rates

DATA = Path(__file__).resolve().parents[1] / "workloads" / "data" / "serving"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "servegen"
HEADER = "client_id,window_start_s,rate_rps,cv,arrival_dist,shape,scale\n"


def windows(tmp_path: Path) -> Path:
    """Two clients, two windows: summed rates 1 + 1 = 2 and 3 + 3 = 6 req/s."""
    p = tmp_path / "w.csv"
    p.write_text(HEADER + "0,0,1,1,Gamma,1,1\n0,600,3,1,Gamma,1,1\n1,0,1,1,,0,0\n1,600,3,1,,0,0\n")
    return p


def pdf(tmp_path: Path) -> Path:
    p = tmp_path / "pdf.csv"
    p.write_text(
        "field,value,probability\ninput_tokens,100,0.25\ninput_tokens,300,0.75\n"
        "output_tokens,10,1.0\n"
    )
    return p


def test_rates_are_summed_over_clients(tmp_path: Path) -> None:
    rates, width = read_servegen_rates(windows(tmp_path), None, 0.0)
    assert rates.tolist() == [2.0, 6.0] and width == 600.0
    rates, _ = read_servegen_rates(windows(tmp_path), [1], 600.0)
    assert rates.tolist() == [3.0]


def test_arrivals_follow_the_window_rates(tmp_path: Path) -> None:
    windows(tmp_path)
    pdf(tmp_path)
    tc = TraceConfig(format="servegen", path="w.csv", lengths_path="pdf.csv", window_s=100.0)
    cfg = RequestsConfig(
        num_requests=3000, arrivals="trace", rate_per_s=20.0, lengths="trace", trace=tc
    )
    req = generate(cfg, np.random.default_rng(1), tmp_path)
    # rates scaled to a mean of 20: 10 and 30 req/s over 100 s windows -> 1000 + 3000
    # expected; 3000 requests end in window 2 at about 100 + 2000/30 = 166.7 s
    first = int((req.arrival_s < 100).sum())
    assert abs(first - 1000) < 4 * np.sqrt(1000)
    assert req.arrival_s[-1] == pytest.approx(166.7, abs=4 * np.sqrt(2000) / 30)
    # input 100 w.p. 0.25, 300 w.p. 0.75: mean 250, sd 86.6; output always 10
    assert req.prompt.mean() == pytest.approx(250, abs=4 * 86.6 / np.sqrt(3000))
    assert set(req.output.tolist()) == {10}


def test_too_many_requests_for_the_windows(tmp_path: Path) -> None:
    windows(tmp_path)
    tc = TraceConfig(format="servegen", path="w.csv", window_s=1.0)
    cfg = RequestsConfig(num_requests=100, arrivals="trace", rate_per_s=None, trace=tc)
    with pytest.raises(ValueError, match=r"requests\.num_requests: 100 requests outlast"):
        generate(cfg, np.random.default_rng(1), tmp_path)


def test_shipped_sample_pdf_is_normalised() -> None:
    lengths = read_servegen_lengths(DATA / "servegen_m-small_token_pdf.csv.gz")
    for _field, (values, prob) in lengths.items():
        assert prob.sum() == pytest.approx(1.0) and (values >= 0).all()


@pytest.mark.skipif(not SHARED.exists(), reason="needs ../shared/data")
def test_shipped_windows_are_the_first_day_of_the_shared_file() -> None:
    with gzip.open(SHARED / "language_m-small_client_windows.csv.gz", "rt") as f:
        shared = [ln for k, ln in enumerate(f) if k == 0 or int(ln.split(",")[1]) < 86400]
    with gzip.open(DATA / "servegen_m-small_windows_day1.csv.gz", "rt") as f:
        assert f.readlines() == shared


def test_cli_negative_rate_names_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "w.csv").write_text(HEADER + "0,0,1,1,,0,0\n0,600,-1,1,,0,0\n")
    (tmp_path / "s.yaml").write_text(
        "name: bad\ncluster:\n  nodes:\n    - name: box\n      devices:\n"
        "        gpu: {type: l4}\nworkload:\n  kind: serving\n  tp_options: [1]\n"
        "  requests:\n    num_requests: 3\n    arrivals: trace\n"
        "    trace: {format: servegen, path: w.csv}\n"
    )
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"{tmp_path / 'w.csv'}:3: column rate_rps: '-1' is not a number >= 0"
