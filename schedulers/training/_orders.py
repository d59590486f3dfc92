"""Shared orderings: 1F1B (warm-up forwards, one-forward-one-backward, cool-down backwards)
and its zero-bubble variant with split backward (ZB-H1)."""

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


def zb_h1(fwd: list[Unit], bwd: list[Unit], wgt: list[Unit], warmup: int,
          delay: int) -> tuple[Unit, ...]:  # fmt: skip
    """1F1B's order with each backward split into B and W: after each B, the oldest W runs
    once more than ``delay`` Ws are pending; the last ``delay`` Ws run at the end, filling
    the cool-down (Qi et al., ICLR 2024, ZB-H1: stage i of p delays i Ws, so it holds at
    most p micro-batches' activations, as 1F1B's first stage does)."""
    warmup = min(warmup, len(fwd))
    order = list(fwd[:warmup])
    pending: list[Unit] = []

    def backward(j: int) -> None:
        order.append(bwd[j])
        pending.append(wgt[j])
        while len(pending) > delay:
            order.append(pending.pop(0))

    for j, f in enumerate(fwd[warmup:]):
        order.append(f)
        backward(j)
    for j in range(len(fwd) - warmup, len(bwd)):
        backward(j)
    return tuple(order + pending)
