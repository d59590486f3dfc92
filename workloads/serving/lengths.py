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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from hetsim.workloads.serving.traces import Strict

MAX_TOKENS = 10_000_000  # a length law's bound: far above any model's context
ZIPF_SUPPORT_MAX = 10_000_000  # values a Zipf law tabulates (its CDF is a float array)


class FixedLength(Strict):
    """Every request has ``tokens`` tokens."""

    dist: Literal["fixed"] = "fixed"
    tokens: PositiveInt = Field(le=MAX_TOKENS)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` token counts (int64)."""
        return np.full(n, self.tokens, dtype=np.int64)


class UniformLength(Strict):
    """Token counts uniform over the integers ``low .. high`` (both included)."""

    dist: Literal["uniform"] = "uniform"
    low: PositiveInt = Field(le=MAX_TOKENS)
    high: PositiveInt = Field(le=MAX_TOKENS)

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

    dist: Literal["zipf"] = "zipf"
    low: PositiveInt = Field(le=MAX_TOKENS)
    high: PositiveInt = Field(le=MAX_TOKENS)
    theta: PositiveFloat = Field(le=10.0)

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

    dist: Literal["lognormal"] = "lognormal"
    median: PositiveFloat = Field(le=MAX_TOKENS)
    sigma: PositiveFloat = Field(le=10.0)
    low: PositiveInt = 1
    high: PositiveInt = Field(MAX_TOKENS, le=MAX_TOKENS)

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


class SyntheticLengths(Strict):
    """Request lengths from laws: ``prompt`` and ``output``, or ``total`` with
    ``prefill_decode_ratio`` (decode = ceil(total / (1 + ratio)), prefill = the rest)."""

    prompt: LengthLaw | None = None
    output: LengthLaw | None = None
    total: LengthLaw | None = None
    prefill_decode_ratio: PositiveFloat | None = Field(None, le=1e6)

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
        named random streams."""
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
