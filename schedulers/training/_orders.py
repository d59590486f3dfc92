"""Shared 1F1B ordering: warm-up forwards, one-forward-one-backward, cool-down backwards."""

from __future__ import annotations

from hetsim.workloads.training.view import Unit


def one_f_one_b(fwd: list[Unit], bwd: list[Unit], warmup: int) -> tuple[Unit, ...]:
    """``warmup`` forwards, then alternate forward/backward, then the remaining backwards."""
    warmup = min(warmup, len(fwd))
    order = list(fwd[:warmup])
    for j, f in enumerate(fwd[warmup:]):
        order += [f, bwd[j]]
    order += bwd[len(fwd) - warmup :]
    return tuple(order)
