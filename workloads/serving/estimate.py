"""Goodput estimates of one instance for deployment sizing: the largest Poisson rate
at which the PREDICTED SLO attainment (the share of requests with TTFT <= S_ttft and
TPOT <= S_tpot, the quantity the simulation reports) reaches ``q`` (the sizing
attainment). The same predictor serves every role and every deployment policy
(colocated, DistServe, Cauchy, Melange's size buckets, the autoscaler), so no policy is
sized with a more or less conservative rule than another. Closed forms on the iteration
roofline (``IterationCost``) over a sample of the workload's (prompt, output) lengths:

* prefill queue (prefill-only and colocated instances; prompts first as in vLLM):
  M/G/1 with service times ``T_i = prefill_s(P_i)``, ``rho = lambda E[T]``, wait
  ``E[W] = (1 + rho) lambda E[T^2] / (2 (1 - rho))``: Pollaczek-Khinchine times
  ``1 + rho`` because vLLM prefills every waiting prompt that fits in one iteration,
  so a prompt also waits for the ones that joined its iteration behind it (about
  ``rho`` x its wait of work; hetsim's approximation, which brings the mean TTFT of an H100
  prefill instance at 34-42 req/s within 15% of the simulation's, vs 40-50% low
  without it), and the exponential tail ``P(W > t) = rho exp(-rho t / E[W])`` (exact
  for M/M/1; Kingman's heavy-traffic form). Request ``i`` meets TTFT
  with probability ``1 - rho exp(-rho (S_ttft - T_i - d) / E[W])`` (0 when ``T_i + d >
  S_ttft``), ``d`` = the decode step a colocated prompt waits behind (0 prefill-only);
* decode batch (Little's law, continuous batching admits every request): ``b = lambda
  E[O - 1] tau`` with ``tau = decode_s(b, C) / (1 - rho)`` the mean time per output
  token (decodes paused by the prefills' share ``rho`` of the GPU; ``rho = 0`` on a
  decode-only instance), ``C`` the output-weighted mean context ``E[(O-1)(P + O/2)] /
  E[O-1]``; the smallest fixed point ``b`` (none: overloaded). ``b <= max_batch``, and
  the batch's quantile ``b_q = b + z_q sqrt(b)`` (Poisson number in service, M/G/inf)
  must fit the KV (``b_q (E[P] + E[O])`` tokens: running out preempts at once);
* TPOT of request ``i``: ``tau`` plus the prefills that arrive during its ``O_i - 1``
  steps, a compound Poisson sum with variance ``lambda tau E[T^2] / (O_i - 1)``
  (normal approximation); on a decode-only instance ``decode_s(b, C)`` against
  ``S_tpot`` for everyone (no pauses; a TPOT averages its steps over a lifetime as
  long as the batch's turnover, so the batch's mean sets it);
* predicted attainment = (mean over the sample of the TTFT probability) x (mean of the
  TPOT probability) (independence assumed); goodput: bisection over ``lambda`` for the
  rate where it falls to ``q``, divided by ``1 + headroom`` (``sizing_headroom``): a
  margin for the predictor's error, since attainment falls steeply past that rate.

What is left out (why measured goodput can differ): the token budget of a prefill
iteration, preemptions, the KV transfer time in a disaggregated TPOT, the batch's
slow fluctuation in a colocated TPOT, the transient of a finite run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from statistics import NormalDist

import numpy as np

from hetsim.workloads.serving.cost import IterationCost

_NORMAL = NormalDist()


@dataclass(frozen=True)
class Targets:
    """SLO targets, the attainment to size for (``q``) and the rate margin ``headroom``
    (a goodput is the predicted rate at ``q`` divided by ``1 + headroom``)."""

    ttft_s: float
    tpot_s: float
    attainment: float = 0.9
    headroom: float = 0.0

    @property
    def z(self) -> float:
        """Standard normal quantile of ``attainment``."""
        return _NORMAL.inv_cdf(self.attainment)


@dataclass(frozen=True)
class Lengths:
    """A sample of requests' prompt and output lengths (tokens)."""

    prompts: np.ndarray
    outputs: np.ndarray

    @cached_property
    def steps(self) -> np.ndarray:
        """Decode steps after the first token, ``O_i - 1`` (at least 1 for the sums)."""
        return np.maximum(self.outputs.astype(float) - 1.0, 1.0)

    @cached_property
    def context(self) -> float:
        """Output-weighted mean context of a decode step, ``E[(O-1)(P + O/2)] / E[O-1]``."""
        ctx = self.prompts + self.outputs / 2.0
        return float((self.steps * ctx).sum() / self.steps.sum())

    @property
    def prompt_mean(self) -> float:
        """Mean prompt tokens."""
        return float(self.prompts.mean())

    @property
    def output_mean(self) -> float:
        """Mean output tokens."""
        return float(self.outputs.mean())

    @cached_property
    def kv_per_seq(self) -> float:
        """Mean KV tokens a finished sequence holds, ``E[P] + E[O]``."""
        return float(self.prompts.mean() + self.outputs.mean())


@dataclass(frozen=True)
class Estimator:
    """Goodput of one (GPU type, TP) config on a sample (module docstring)."""

    cost: IterationCost
    lengths: Lengths
    kv_tokens: int
    max_batch: int
    targets: Targets

    @cached_property
    def prefill_times(self) -> np.ndarray:
        """``T_i`` of every sampled prompt alone in an iteration."""
        return np.array([self.cost.prefill_s(int(p)) for p in self.lengths.prompts])

    def ttft_met(self, rate: float, extra_s: float) -> float:
        """Predicted share meeting TTFT at ``rate`` (``extra_s``: a decode step ahead)."""
        t = self.prefill_times
        rho = rate * float(t.mean())
        if rho >= 1.0:
            return 0.0
        slack = self.targets.ttft_s - t - extra_s
        wait = (1.0 + rho) * rate * float((t * t).mean()) / (2.0 * (1.0 - rho))
        if wait <= 0:
            return float((slack >= 0).mean())
        p = 1.0 - rho * np.exp(-rho * np.maximum(slack, 0.0) / wait)
        return float(np.where(slack >= 0, p, 0.0).mean())

    def batch(self, rate: float, rho: float) -> float | None:
        """Smallest ``b`` with ``b (1 - rho) >= lambda E[O-1] decode_s(b)`` (Little's law
        fixed point), None if none up to ``max_batch`` (doubling grid, then bisection)."""
        per = rate * float(self.lengths.steps.mean()) / (1.0 - rho)
        if per <= 0:
            return 0.0

        def slack(b: float) -> float:
            return b - per * self.cost.decode_s(max(int(np.ceil(b)), 1), self.lengths.context)

        hi = 1.0
        while slack(hi) < 0:
            if hi >= self.max_batch:
                return None
            hi = min(2.0 * hi, float(self.max_batch))
        lo = hi / 2.0 if hi > 1.0 else 0.0
        for _ in range(12):
            mid = (lo + hi) / 2.0
            lo, hi = (lo, mid) if slack(mid) >= 0 else (mid, hi)
        return hi

    def _batch_fits(self, b: float) -> bool:
        """Whether the batch's quantile ``b_q`` fits the KV and its mean ``max_batch``."""
        bq = b + self.targets.z * np.sqrt(b)
        return b <= self.max_batch and bq * self.lengths.kv_per_seq <= self.kv_tokens

    def colocated_attainment(self, rate: float) -> float:
        """Predicted attainment of a colocated instance at ``rate``."""
        t = self.prefill_times
        rho = rate * float(t.mean())
        if rho >= 1.0:
            return 0.0
        b = self.batch(rate, rho)
        if b is None or not self._batch_fits(b):
            return 0.0
        step = self.cost.decode_s(max(int(np.ceil(b)), 1), self.lengths.context)
        tau = step / (1.0 - rho)
        sd = np.sqrt(rate * tau * float((t * t).mean()) / self.lengths.steps)
        z = (self.targets.tpot_s - tau) / np.maximum(sd, 1e-12)
        tpot = float(np.mean([_NORMAL.cdf(float(v)) for v in z]))
        return self.ttft_met(rate, step) * tpot

    def decode_attainment(self, rate: float) -> float:
        """Predicted TPOT attainment of a decode-only instance at ``rate`` (0 or 1)."""
        b = self.batch(rate, 0.0)
        if b is None or not self._batch_fits(b):
            return 0.0
        step = self.cost.decode_s(max(int(np.ceil(b)), 1), self.lengths.context)
        return 1.0 if step <= self.targets.tpot_s else 0.0

    def goodput(self, role: str) -> float:
        """Largest rate (req/s) whose predicted attainment in ``role`` (``prefill``,
        ``decode``, ``mixed``) reaches the target, over ``1 + headroom``; 0 if none.
        Bisection to 0.5%."""
        check = {
            "prefill": lambda r: self.ttft_met(r, 0.0),
            "decode": self.decode_attainment,
            "mixed": self.colocated_attainment,
        }[role]
        q = self.targets.attainment
        hi = 1.0 / float(self.prefill_times.mean()) if role != "decode" else self._decode_cap()
        lo = 0.0
        if check(hi * 1e-3) < q:
            return 0.0
        while hi - lo > 0.005 * hi:
            mid = (lo + hi) / 2.0
            lo, hi = (mid, hi) if check(mid) >= q else (lo, mid)
        return lo / (1.0 + self.targets.headroom)

    def _decode_cap(self) -> float:
        """Upper bound of a decode instance's rate: ``max_batch`` sequences per fastest
        step of ``max_batch``."""
        b = self.max_batch
        return b / (self.cost.decode_s(b, self.lengths.context) * float(self.lengths.steps.mean()))
