"""Shared pieces of the cluster policies: an empty parameter model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class NoParams(BaseModel):
    """No parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)
