"""Synthetic request lengths: each law against its closed form, the total/ratio split,
named streams, and the Vidur workload's requests."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

import hetsim
from hetsim.simulator.rng import RandomStreams
from hetsim.workloads.serving.lengths import (
    LengthLaw,
    SyntheticLengths,
    ZipfLength,
    split_total,
)

LAW: TypeAdapter[LengthLaw] = TypeAdapter(LengthLaw)
N = 200_000


def _draw(spec: dict[str, object], seed: int = 3, n: int = N) -> np.ndarray:
    return LAW.validate_python(spec).draw(np.random.default_rng(seed), n)


def test_uniform_covers_both_ends_with_the_uniform_mean() -> None:
    x = _draw({"dist": "uniform", "low": 512, "high": 2048})
    assert x.min() == 512 and x.max() == 2048
    assert abs(x.mean() - (512 + 2048) / 2) < 5.0  # sd of the mean: 443 / sqrt(N) ~ 1


def test_fixed_is_constant() -> None:
    assert set(_draw({"dist": "fixed", "tokens": 77}, n=100).tolist()) == {77}


def test_zipf_frequencies_follow_k_to_the_minus_theta() -> None:
    """P(k-th value) = k^-theta / H(N, theta); sample frequencies of the first values
    within 4 standard errors."""
    law = ZipfLength(low=10, high=109, theta=1.2)
    p = np.arange(1, 101, dtype=float) ** -1.2
    p /= p.sum()
    assert np.allclose(law.probabilities(), p)
    x = law.draw(np.random.default_rng(5), N)
    assert x.min() >= 10 and x.max() <= 109
    for k in range(3):
        freq = np.mean(x == 10 + k)
        assert abs(freq - p[k]) < 4 * math.sqrt(p[k] * (1 - p[k]) / N)


def test_lognormal_median_and_clip() -> None:
    x = _draw({"dist": "lognormal", "median": 300, "sigma": 0.8, "low": 10, "high": 4000})
    assert x.min() >= 10 and x.max() <= 4000
    assert abs(np.median(x) - 300) < 6  # median of exp(N(log 300, 0.8)), rounded


def test_split_total_by_hand() -> None:
    """Ratio 3: decode = ceil(total / 4)."""
    prefill, decode = split_total(np.array([512, 513, 1518, 2048]), 3.0)
    assert decode.tolist() == [128, 129, 380, 512]
    assert prefill.tolist() == [384, 384, 1138, 1536]


@pytest.mark.parametrize(
    "spec",
    [
        {"total": {"dist": "uniform", "low": 1, "high": 9}},  # ratio missing
        {"prompt": {"dist": "fixed", "tokens": 5}},  # output missing
        {
            "prompt": {"dist": "fixed", "tokens": 5},
            "output": {"dist": "fixed", "tokens": 5},
            "prefill_decode_ratio": 2,
        },
        {"total": {"dist": "uniform", "low": 9, "high": 1}, "prefill_decode_ratio": 3},
        {"total": {"dist": "zipf", "low": 1, "high": 9}, "prefill_decode_ratio": 3},  # theta
    ],
)
def test_bad_specs_are_refused(spec: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        SyntheticLengths.model_validate(spec)


def test_named_streams_keep_prompt_draws_when_output_law_changes() -> None:
    a = SyntheticLengths.model_validate(
        {"prompt": {"dist": "uniform", "low": 1, "high": 999},
         "output": {"dist": "fixed", "tokens": 3}}
    )  # fmt: skip
    b = SyntheticLengths.model_validate(
        {"prompt": {"dist": "uniform", "low": 1, "high": 999},
         "output": {"dist": "zipf", "low": 1, "high": 50, "theta": 1.0}}
    )  # fmt: skip
    pa, _ = a.draw(RandomStreams(9), 1000)
    pb, ob = b.draw(RandomStreams(9), 1000)
    assert np.array_equal(pa, pb)
    assert not np.array_equal(pb, ob)


def test_vidur_workload_requests() -> None:
    """The shipped Vidur workload: totals in [512, 2048], decode = ceil(total / 4),
    arrival gaps at most 3 mean gaps (12 req/s), and the same tables on a rerun."""
    over = {"workload.requests.num_requests": 300}
    res = hetsim.run("vidur-workload", overrides=over)
    req = res.tables["requests"].sort_values("request")
    total = req["prompt_tokens"] + req["output_tokens"]
    assert total.between(512, 2048).all()
    assert (req["output_tokens"] == np.ceil(total / 4).astype(int)).all()
    gaps = np.diff(np.concatenate([[0.0], req["arrival_s"].to_numpy()]))
    assert gaps.max() <= 3.0 / 12 + 1e-12
    assert req["arrival_s"].is_monotonic_increasing
    again = hetsim.run("vidur-workload", overrides=over).tables["requests"]
    assert again.sort_values("request").equals(req)
