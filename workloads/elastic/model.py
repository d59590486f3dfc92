"""Fluid model and cost model of the elastic online-training workload (pure functions).

Backlog (lag) is a fluid: ``dL/dt = lambda(t) - c(t)`` with ``L >= 0``, where ``c`` is
the job's consumption capacity. Within one control step both rates are constant (the
step's mean arrival rate and the step's capacity averaged over its up time), so the
lag is piecewise linear and :func:`fluid_step` is exact for that input: it returns
the lag at the step's end, the samples consumed and the integral of the lag.

Freshness comes from the cumulative curves (FIFO consumption): the sample that arrived
at time ``s`` is consumed when ``D(t) = A(s)``; :func:`oldest_age_s` and
:func:`sample_delays_s` invert the piecewise-linear curves with ``searchsorted``.

Throughput of a synchronous data-parallel / parameter-server job on ``n`` workers
(reconstruction, ``elastic-observability.md`` section 1.3)::

    mu(n) = min(n * mu_1 / (1 + kappa * (n - 1)), B_ps / bytes_per_sample)

``mu_1`` (one worker) is priced by the device cost model: a batch's dense compute and
memory traffic on the GPU's roofline plus its parameter-server traffic over the
worker's network link, not overlapped. Partition skew makes the most loaded worker the
bottleneck: with ``f_max`` the largest share of the stream held by one worker,
``mu_eff(n) = mu(n) / (n * f_max)``.
"""

from __future__ import annotations

import numpy as np

from hetsim.devices.compute import ComputeDevice
from hetsim.devices.spec import LinkSpec


def per_worker_rate_per_s(
    device: ComputeDevice,
    link: LinkSpec,
    batch: int,
    flops_per_sample: float,
    hbm_bytes_per_sample: float,
    ps_bytes_per_sample: float,
    dtype: str,
) -> float:
    """Samples/s of one worker: ``batch / (t_gpu + t_ps)`` (roofline + link, serialised)."""
    gpu_s = device.op_time_s(batch * flops_per_sample, batch * hbm_bytes_per_sample, dtype)
    return batch / (gpu_s + link.transfer_time_s(batch * ps_bytes_per_sample))


def scaling_curve(n: np.ndarray, mu_1: float, kappa: float, cap_per_s: float) -> np.ndarray:
    """``min(n mu_1 / (1 + kappa (n - 1)), cap)`` for each worker count (0 for n = 0)."""
    n = np.asarray(n, dtype=float)
    raw = n * mu_1 / (1.0 + kappa * np.maximum(n - 1.0, 0.0))
    return np.asarray(np.minimum(raw, cap_per_s))


def fluid_step(
    lag0: float, rate_per_s: float, capacity_per_s: float, step_s: float
) -> tuple[float, float, float]:
    """One step of ``dL/dt = rate - capacity``, ``L >= 0``, constant rates.

    Returns (lag at the end, samples consumed, integral of lag over the step in
    sample-seconds). When the backlog empties inside the step (at ``tau = lag0 /
    (capacity - rate)``) the lag stays 0 and the job consumes exactly the arrivals.
    """
    end = lag0 + (rate_per_s - capacity_per_s) * step_s
    if end >= 0.0:
        return end, capacity_per_s * step_s, 0.5 * (lag0 + end) * step_s
    tau = lag0 / (capacity_per_s - rate_per_s)
    return 0.0, lag0 + rate_per_s * step_s, 0.5 * lag0 * tau


def _invert(curve: np.ndarray, values: np.ndarray, step_s: float) -> np.ndarray:
    """First time at which the piecewise-linear ``curve`` (on a ``step_s`` grid)
    reaches each value (``inf`` if it never does)."""
    idx = np.searchsorted(curve, values, side="left")
    out = np.full(len(values), np.inf)
    inside = idx < len(curve)
    i = idx[inside]
    prev = np.maximum(i - 1, 0)
    rise = curve[i] - curve[prev]
    frac = np.where(rise > 0, (values[inside] - curve[prev]) / np.where(rise > 0, rise, 1), 0)
    out[inside] = np.where(i == 0, 0.0, (prev + frac) * step_s)
    return out


def oldest_age_s(
    arrived: np.ndarray, consumed: np.ndarray, lag: np.ndarray, step_s: float, eps: float = 1e-9
) -> np.ndarray:
    """Age of the oldest unconsumed sample at each step boundary (0 when no backlog).

    ``arrived``/``consumed`` are the cumulative curves A, D at boundaries 0..K.
    """
    t = np.arange(len(arrived)) * step_s
    born = _invert(arrived, consumed, step_s)
    return np.asarray(np.where(lag > eps * np.maximum(arrived, 1.0), t - born, 0.0))


def sample_delays_s(
    arrived: np.ndarray, consumed: np.ndarray, step_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Consumption delay of the sample arriving mid-way through each step, and the
    number of samples that arrived in that step. Samples not consumed by the end of the
    run get their age at the end (a lower bound)."""
    counts = np.diff(arrived)
    mid_values = arrived[:-1] + 0.5 * counts
    mid_t = (np.arange(len(counts)) + 0.5) * step_s
    done_t = _invert(consumed, mid_values, step_s)
    end_t = (len(arrived) - 1) * step_s
    return np.minimum(done_t, end_t) - mid_t, counts
