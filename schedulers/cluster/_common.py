"""Shared pieces of the cluster policies: an empty parameter model, the greedy allocator."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict


class NoParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def greedy_allocate(
    groups: Sequence[Any], free_gpus: Sequence[int], pick: Callable[[Any, list[int]], int]
) -> list[int | None]:
    """Groups in priority order each take one GPU type with room, chosen by ``pick(group,
    candidate types)``; None where no allowed type has enough free GPUs."""
    free = list(free_gpus)
    out: list[int | None] = []
    for g in groups:
        ok = [t for t in range(len(free)) if g.allowed[t] and free[t] >= g.gpus]
        t = pick(g, ok) if ok else None
        if t is not None:
            free[t] -= g.gpus
        out.append(t)
    return out
