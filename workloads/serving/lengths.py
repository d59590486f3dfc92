"""Synthetic request lengths: fixed, uniform, Zipf and log-normal token counts.

These are the length laws peer serving simulators generate without a trace (Vidur's
synthetic request generator offers fixed, uniform and Zipf; log-normal is the usual fit
of production prompt lengths). A law draws integer token counts; a request's lengths
come either from two laws (``prompt``, ``output``) or from one law for the total with a
prefill:decode ratio ``r``: ``decode = ceil(total / (1 + r))``, ``prefill = total -
decode`` (so ``r = 3`` gives a quarter of the tokens to decode, as in Vidur's default).

Each law draws from its own named random stream (``serving.lengths.prompt``,
``serving.lengths.output``, ``serving.lengths.total``), so choosing lengths never shifts
the arrival draws, and the same seed gives the same lengths in any process.

A ``filter`` keeps only the (prompt, output) pairs a benchmark client would keep and
draws again for the rest, as the ShareGPT samplers of vLLM's ``benchmark_serving`` and
SGLang's ``bench_serving`` drop conversations that are too short or too long (they do
not clip them). A ``preset`` names a shipped YAML file (``pkg:serving/...``) whose
``synthetic:`` block gives the laws with their source; keys written next to ``preset``
replace the file's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from hetsim.workloads.paths import PKG_PREFIX, resolve_path
from hetsim.workloads.serving.traces import Strict

MAX_TOKENS = 10_000_000  # a length law's bound: far above any model's context
ZIPF_SUPPORT_MAX = 10_000_000  # values a Zipf law tabulates (its CDF is a float array)


class FixedLength(Strict):
    """Every request has ``tokens`` tokens."""

    dist: Literal["fixed"] = Field(default="fixed", description="Law kind (fixed).")
    tokens: PositiveInt = Field(le=MAX_TOKENS, description="Token count of every request.")

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` token counts (int64)."""
        return np.full(n, self.tokens, dtype=np.int64)


class UniformLength(Strict):
    """Token counts uniform over the integers ``low .. high`` (both included)."""

    dist: Literal["uniform"] = Field(default="uniform", description="Law kind (uniform).")
    low: PositiveInt = Field(le=MAX_TOKENS, description="Smallest token count.")
    high: PositiveInt = Field(le=MAX_TOKENS, description="Largest token count (included).")

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` token counts (int64)."""
        return rng.integers(self.low, self.high + 1, size=n, dtype=np.int64)


class ZipfLength(Strict):
    """Bounded Zipf: the ``k``-th value of ``low .. high`` (k = 1, 2, ...) has
    probability proportional to ``k ** -theta``, so short lengths dominate."""

    dist: Literal["zipf"] = Field(default="zipf", description="Law kind (zipf).")
    low: PositiveInt = Field(le=MAX_TOKENS, description="Smallest token count (the most probable).")
    high: PositiveInt = Field(le=MAX_TOKENS, description="Largest token count.")
    theta: PositiveFloat = Field(
        le=10.0,
        description="Zipf exponent: the k-th value has probability proportional to k^-theta.",
    )

    @model_validator(mode="after")
    def _ordered(self) -> ZipfLength:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        if self.high - self.low + 1 > ZIPF_SUPPORT_MAX:
            raise ValueError(f"high - low + 1 must be <= {ZIPF_SUPPORT_MAX}")
        return self

    def probabilities(self) -> np.ndarray:
        """P(low + k - 1) for k = 1 .. high - low + 1."""
        weights = np.arange(1, self.high - self.low + 2, dtype=np.float64) ** -self.theta
        return weights / weights.sum()

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` token counts (int64), by inverse CDF of :meth:`probabilities`."""
        cdf = np.cumsum(self.probabilities())
        k = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
        return self.low + np.minimum(k, len(cdf) - 1).astype(np.int64)


class LogNormalLength(Strict):
    """Log-normal token counts: ``median * exp(sigma * Z)`` rounded to the nearest
    integer and clipped to ``low .. high``."""

    dist: Literal["lognormal"] = Field(default="lognormal", description="Law kind (lognormal).")
    median: PositiveFloat = Field(le=MAX_TOKENS, description="Median token count.")
    sigma: PositiveFloat = Field(
        le=10.0, description="Standard deviation of the log of the token count."
    )
    low: PositiveInt = Field(default=1, description="Token counts below are clipped up to this.")
    high: PositiveInt = Field(
        MAX_TOKENS, le=MAX_TOKENS, description="Token counts above are clipped down to this."
    )

    @model_validator(mode="after")
    def _ordered(self) -> LogNormalLength:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` token counts (int64)."""
        x = np.rint(rng.lognormal(np.log(self.median), self.sigma, size=n))
        return np.clip(x, self.low, self.high).astype(np.int64)


LengthLaw = Annotated[
    FixedLength | UniformLength | ZipfLength | LogNormalLength, Field(discriminator="dist")
]


MAX_FILTER_ROUNDS = 1000  # redraw rounds before a filter is declared too strict


class PairFilter(Strict):
    """The (prompt, output) pairs a benchmark client keeps; the others are drawn again.
    ``min_*`` and ``max_prompt`` bound each length, ``max_total`` their sum (vLLM's and
    SGLang's ShareGPT samplers: 4, 4, 1024 and 2048)."""

    min_prompt: PositiveInt = Field(default=1, description="Shortest prompt kept, in tokens.")
    min_output: PositiveInt = Field(default=1, description="Shortest output kept, in tokens.")
    max_prompt: PositiveInt | None = Field(
        None, le=MAX_TOKENS, description="Longest prompt kept, in tokens (null: no bound)."
    )
    max_total: PositiveInt | None = Field(
        None,
        le=2 * MAX_TOKENS,
        description="Largest prompt + output kept, in tokens (null: no bound).",
    )

    def keep(self, prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
        """Mask of the pairs kept."""
        ok = (prompt >= self.min_prompt) & (output >= self.min_output)
        if self.max_prompt is not None:
            ok &= prompt <= self.max_prompt
        if self.max_total is not None:
            ok &= prompt + output <= self.max_total
        return ok


def _load_preset(data: Any) -> Any:
    """``data`` with the laws of its ``preset`` file merged under its own keys."""
    if not isinstance(data, dict) or data.get("preset") is None:
        return data
    ref = str(data["preset"])
    if not ref.startswith(PKG_PREFIX):
        raise ValueError(f"preset: {ref!r} must name a shipped file (pkg:serving/...)")
    path = resolve_path(ref, Path("."))
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"preset: cannot read {ref} ({type(exc).__name__})") from None
    block = doc.get("synthetic") if isinstance(doc, dict) else None
    if not isinstance(block, dict):
        raise ValueError(f"preset: {ref} has no 'synthetic:' mapping")
    return {**block, **data}


class SyntheticLengths(Strict):
    """Request lengths from laws: ``prompt`` and ``output``, or ``total`` with
    ``prefill_decode_ratio`` (decode = ceil(total / (1 + ratio)), prefill = the rest);
    optionally only the pairs ``filter`` keeps (the rest drawn again), and the laws of
    a shipped ``preset`` file (keys given here replace the file's)."""

    preset: str | None = Field(
        None,
        description="a shipped YAML file (pkg:serving/...) whose synthetic: block "
        "gives the laws (keys written here replace the file's)",
    )
    prompt: LengthLaw | None = Field(
        default=None, description="Law of prompt lengths in tokens (with output; not with total)."
    )
    output: LengthLaw | None = Field(
        default=None, description="Law of output lengths in tokens (with prompt; not with total)."
    )
    total: LengthLaw | None = Field(
        default=None,
        description="Law of prompt + output lengths in tokens, split by prefill_decode_ratio.",
    )
    prefill_decode_ratio: PositiveFloat | None = Field(
        None,
        le=1e6,
        description="Prefill tokens per decode token when lengths come from "
        "total: decode = ceil(total / (1 + ratio)).",
    )
    filter: PairFilter | None = Field(
        default=None,
        description="Keep only the (prompt, output) pairs a benchmark client "
        "keeps, drawing the others again (null: keep all).",
    )

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        return _load_preset(data)

    @model_validator(mode="after")
    def _one_form(self) -> SyntheticLengths:
        split = self.prompt is not None or self.output is not None
        if self.total is not None:
            if split:
                raise ValueError("give either total (with prefill_decode_ratio) or prompt/output")
            if self.prefill_decode_ratio is None:
                raise ValueError("total needs prefill_decode_ratio")
        elif self.prompt is None or self.output is None:
            raise ValueError("give prompt and output, or total with prefill_decode_ratio")
        elif self.prefill_decode_ratio is not None:
            raise ValueError("prefill_decode_ratio goes with total, not prompt/output")
        return self

    def draw(
        self, streams: Callable[[str], np.random.Generator], n: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(prompt tokens, output tokens) of ``n`` requests; ``streams(name)``: the run's
        named random streams. With a filter, rejected pairs are drawn again, in rounds
        of as many pairs as are still missing, so the result depends on the seed only."""
        if self.filter is None:
            return self._draw_pairs(streams, n)
        prompts, outputs, have = [], [], 0
        for _ in range(MAX_FILTER_ROUNDS):
            prompt, output = self._draw_pairs(streams, n - have)
            ok = self.filter.keep(prompt, output)
            prompts.append(prompt[ok])
            outputs.append(output[ok])
            have += int(ok.sum())
            if have == n:
                return np.concatenate(prompts), np.concatenate(outputs)
        raise ValueError(
            f"requests.synthetic.filter: {have} of {n} pairs kept after "
            f"{MAX_FILTER_ROUNDS} rounds; the filter rejects nearly every draw of the laws"
        )

    def _draw_pairs(
        self, streams: Callable[[str], np.random.Generator], n: int
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.total is not None:
            assert self.prefill_decode_ratio is not None
            total = self.total.draw(streams("serving.lengths.total"), n)
            return split_total(total, self.prefill_decode_ratio)
        assert self.prompt is not None and self.output is not None
        prompt = self.prompt.draw(streams("serving.lengths.prompt"), n)
        return prompt, self.output.draw(streams("serving.lengths.output"), n)


def split_total(total: np.ndarray, ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """(prefill, decode) tokens of requests of ``total`` tokens at a prefill:decode
    ``ratio``: decode = ceil(total / (1 + ratio)), prefill = total - decode."""
    decode = np.ceil(total / (1.0 + ratio)).astype(np.int64)
    return total - decode, decode
