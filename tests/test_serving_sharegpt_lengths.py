"""Benchmark-client length filters and the shipped ShareGPT length preset: the filter
drops (never clips) pairs and redraws them deterministically; the preset's seeded draw
reproduces the published statistics it was built from (its YAML ``published`` block);
the validation rows V35-V37 use it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from hetsim.simulator.rng import RandomStreams
from hetsim.workloads.paths import resolve_path
from hetsim.workloads.serving.lengths import PairFilter, SyntheticLengths

PRESET = "pkg:serving/sharegpt_bench_serving_llama3.yaml"
ROOT = Path(__file__).resolve().parent.parent


def _published() -> dict[str, float]:
    doc = yaml.safe_load(resolve_path(PRESET, Path(".")).read_text(encoding="utf-8"))
    return doc["published"]


def test_filter_drops_short_prompts_without_clipping() -> None:
    """Prompts uniform on 1..10, kept only from 4: the kept prompts are uniform on
    4..10 (mean 7, no mass piled at 4), and exactly n pairs come back."""
    syn = SyntheticLengths(
        prompt={"dist": "uniform", "low": 1, "high": 10},
        output={"dist": "fixed", "tokens": 5},
        filter=PairFilter(min_prompt=4),
    )
    prompt, output = syn.draw(RandomStreams(1), 70_000)
    assert len(prompt) == len(output) == 70_000
    assert prompt.min() == 4 and prompt.max() == 10
    assert abs(prompt.mean() - 7.0) < 0.05  # sd 2 / sqrt(70000) ~ 0.008
    assert abs(np.mean(prompt == 4) - 1 / 7) < 0.01  # uniform: no pile at the bound


def test_filter_bounds_the_sum_and_is_deterministic() -> None:
    syn = SyntheticLengths(
        prompt={"dist": "uniform", "low": 1, "high": 1500},
        output={"dist": "uniform", "low": 1, "high": 1500},
        filter=PairFilter(min_prompt=4, min_output=4, max_prompt=1024, max_total=2048),
    )
    p1, o1 = syn.draw(RandomStreams(7), 5000)
    p2, o2 = syn.draw(RandomStreams(7), 5000)
    assert np.array_equal(p1, p2) and np.array_equal(o1, o2)
    assert p1.max() <= 1024 and (p1 + o1).max() <= 2048 and min(p1.min(), o1.min()) >= 4


def test_a_filter_nothing_passes_is_a_clear_error() -> None:
    syn = SyntheticLengths(
        prompt={"dist": "fixed", "tokens": 2000},
        output={"dist": "fixed", "tokens": 10},
        filter=PairFilter(max_prompt=1024),
    )
    with pytest.raises(ValueError, match="filter"):
        syn.draw(RandomStreams(0), 10)


def test_sharegpt_preset_reproduces_its_published_means() -> None:
    """A seeded draw of 200,000 kept pairs: mean prompt and output within 1% of the
    published means (the draw's own sampling error is ~0.3%); every pair inside
    bench_serving's ShareGPT filter."""
    pub = _published()
    syn = SyntheticLengths.model_validate({"preset": PRESET})
    prompt, output = syn.draw(RandomStreams(0), 200_000)
    assert abs(prompt.mean() / pub["prompt_mean_tokens"] - 1) < 0.01
    assert abs(output.mean() / pub["output_mean_tokens"] - 1) < 0.01
    assert prompt.min() >= 4 and output.min() >= 4
    assert prompt.max() <= 1024 and (prompt + output).max() <= 2048


def test_published_means_are_the_token_totals_over_requests() -> None:
    """The YAML's means, recomputed from the totals its sources print (sglang issues
    #2805: 369,103 input / 326,408 generated over 1,648 requests; #1639: 453,502 input
    over 2,000 requests)."""
    pub = _published()
    assert pub["prompt_mean_tokens"] == pytest.approx((369103 + 453502) / 3648, abs=0.01)
    assert pub["output_mean_tokens"] == pytest.approx(326408 / 1648, abs=0.01)


def test_preset_keys_given_inline_replace_the_files() -> None:
    syn = SyntheticLengths.model_validate(
        {"preset": PRESET, "prompt": {"dist": "fixed", "tokens": 100}}
    )
    assert syn.prompt is not None and syn.prompt.dist == "fixed"
    assert syn.output is not None and syn.output.dist == "lognormal"
    assert syn.filter is not None and syn.filter.max_total == 2048


@pytest.mark.parametrize(
    ("preset", "message"),
    [("pkg:serving/no_such_file.yaml", "cannot read"), ("lengths.yaml", "shipped file")],
)
def test_bad_preset_names_the_file(preset: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SyntheticLengths.model_validate({"preset": preset})


def test_validation_rows_v35_to_v37_use_the_preset() -> None:
    for name in ("v35", "v36", "v37"):
        doc = yaml.safe_load((ROOT / "validation" / f"{name}.yaml").read_text("utf-8"))
        req = doc["workload"]["requests"]
        assert req["lengths"] == "synthetic" and req["synthetic"] == {"preset": PRESET}
