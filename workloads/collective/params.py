"""The ``workload:`` block of a collective microbenchmark (pydantic model)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from hetsim.devices.collectives import ALGORITHMS
from hetsim.simulator.limits import Seconds
from hetsim.workloads.base import WorkloadParams

FASTEST = "fastest"
"""``algorithm: fastest``: the fabric's fitted algorithm with the least predicted time
for this size and group, as NCCL's tuner picks the algorithm its own model predicts
fastest (a reconstruction: hetsim's fits stand in for NCCL's tuning tables)."""


class CollectiveParams(WorkloadParams):
    """One collective ``op`` of ``nbytes`` (nccl-tests' size convention, see
    :mod:`devices.collectives`) run ``repetitions`` times, one after another, on a group.

    ``devices``: full device names (``node/gpu0``) in ring order; default: every GPU and
    NPU of the cluster in configuration order. ``fabric``: a catalogue fabric name
    (``hetsim list fabrics``); default: the ring the topology gives
    (:func:`workloads.collective.fabric.ring_fabric`). ``algorithm``: one of the op's
    algorithms, ``fastest``, or None for the op's default (ring; direct for all-to-all).
    ``gap_s``: idle time between two repetitions.
    """

    kind: Literal["collective"] = Field(
        default="collective", description="Workload kind (collective)."
    )
    op: Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"] = Field(
        default="all_reduce", description="Collective operation run."
    )
    nbytes: PositiveInt = Field(
        default=64 * 2**20,
        description="Message size in bytes as nccl-tests counts it (see devices/collectives.py).",
    )
    devices: list[str] | None = Field(
        None,
        min_length=1,
        description="Full device names of the group in ring order (null: "
        "every GPU and NPU in configuration order).",
    )
    fabric: str | None = Field(
        default=None,
        description="Catalogue collective fabric (hetsim list "
        "fabrics); null: the ring the topology gives.",
    )
    algorithm: str | None = Field(
        default=None,
        description="Algorithm of the op, fastest (least predicted time), or null "
        "for the op's default (ring; direct for all-to-all).",
    )
    repetitions: PositiveInt = Field(
        default=11, description="Times the collective runs, one after another."
    )
    gap_s: Seconds = Field(default=0.0, description="Idle seconds between two repetitions.")

    @model_validator(mode="after")
    def _known_algorithm(self) -> CollectiveParams:
        valid = ALGORITHMS[self.op]
        if self.algorithm is not None and self.algorithm not in (*valid, FASTEST):
            raise ValueError(
                f"algorithm: {self.algorithm!r} is not one of {self.op}'s "
                f"{', '.join((*valid, FASTEST))}"
            )
        if self.devices is not None and len(set(self.devices)) != len(self.devices):
            raise ValueError(f"devices: must be distinct, got {self.devices}")
        return self
