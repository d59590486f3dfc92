"""LUD acceptance drawn per request: the Beta draw's moments, and the degenerate cases
(K = 1, disabled) equal standard decoding."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hetsim.workloads.serving.lud import expected_accepted, lud_acceptance
from hetsim.workloads.serving.params import LudConfig
from tests.test_serving_mechanism import one_request, run, scenario


def test_per_request_acceptance_has_the_configured_mean_and_variance() -> None:
    m, kappa, n = 0.3, 5.0, 200_000
    p = lud_acceptance(LudConfig(accept_p=m, accept_concentration=kappa), n,
                       np.random.default_rng(7))  # fmt: skip
    assert p is not None and p.shape == (n,) and (p >= 0).all() and (p < 1).all()
    # Beta(m k, (1 - m) k): mean m, variance m (1 - m) / (k + 1) = 0.035; the sample
    # mean's sd is sqrt(0.035 / n) = 4e-4, the variance's about 1e-4
    assert p.mean() == pytest.approx(m, abs=2e-3)
    assert p.var() == pytest.approx(m * (1 - m) / (kappa + 1), rel=0.03)


def test_fixed_and_disabled_acceptance() -> None:
    rng = np.random.default_rng(1)
    p = lud_acceptance(LudConfig(accept_p=0.27, accept_concentration=None), 5, rng)
    assert p is not None and (p == 0.27).all()
    assert lud_acceptance(LudConfig(enabled=False), 5, rng) is None
    assert lud_acceptance(None, 5, rng) is None
    # E[min(K, Geom(1 - p))]: 1 + p + p^2 + p^3 for K = 4
    assert expected_accepted(0.5, 4) == pytest.approx(1.875)
    assert expected_accepted(np.array([0.0, 1.0]), 3).tolist() == [1.0, 3.0]


def test_lookahead_one_and_disabled_lud_are_standard_decoding(tmp_path: Any) -> None:
    wl = one_request(200, 300)
    base = run(scenario(wl), tmp_path).tables["requests"].iloc[0]
    k1 = run(scenario(dict(wl, lud={"lookahead": 1, "accept_p": 0.6})), tmp_path)
    off = run(scenario(dict(wl, lud={"enabled": False, "accept_p": 0.6})), tmp_path)
    for res in (k1, off):
        row = res.tables["requests"].iloc[0]
        assert row.tpot_s == pytest.approx(base.tpot_s, rel=1e-9)
        assert row.finish_s == pytest.approx(base.finish_s, rel=1e-9)
