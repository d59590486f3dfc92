"""The empty parameter model shared by policies that take no parameters."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class NoParams(BaseModel):
    """This policy has no parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)
