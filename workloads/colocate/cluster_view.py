"""The cluster as one workload of a multi-workload run sees it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hetsim.devices.cluster import Cluster
from hetsim.devices.compute import ComputeDevice

ACCELERATORS = ("gpu", "npu")


class ClusterView:
    """One workload's window on the shared :class:`~devices.cluster.Cluster`: listing
    and picking devices shows only the accelerators assigned to it (CPUs and switches
    stay visible to all: hosts are shared); memory pools, links, copies and groups are
    the shared cluster's, so every workload's allocations and transfers are accounted
    (and contend) together. ``whole`` is the shared cluster."""

    def __init__(
        self, cluster: Cluster, devices: Iterable[str], pools: dict[str, Any] | None = None
    ) -> None:
        self.whole = cluster
        self.own = frozenset(devices)
        #: this workload's share of the memory of each device it shares (sharing.PoolShare)
        self.pools = dict(pools or {})

    def __getattr__(self, name: str) -> Any:
        return getattr(self.whole, name)

    def _visible(self, name: str) -> bool:
        return name in self.own or self.whole.device(name).spec.kind not in ACCELERATORS

    def device_names(self, kinds: Iterable[str] | None = None) -> list[str]:
        """Device names (optionally of ``kinds``) this workload may use, in order."""
        return [n for n in self.whole.device_names(kinds) if self._visible(n)]

    def devices(self) -> list[ComputeDevice]:
        """Compute devices this workload may use, in configuration order."""
        return [self.whole.device(n) for n in self.device_names()]

    def memory(self, name: str) -> Any:
        """The memory pool of ``name``: this workload's share where the device is shared."""
        share = self.pools.get(name)
        return share if share is not None else self.whole.memory(name)

    def accelerator(self, name: str | None, field: str) -> str:
        """As :meth:`Cluster.accelerator`, over this workload's accelerators."""
        if name is not None:
            if not self._visible(name):
                raise KeyError(f"{field}: device {name!r} is not assigned to this workload")
            return name
        found = self.device_names(ACCELERATORS)
        if not found:
            raise ValueError(f"{field}: no gpu or npu is assigned to this workload")
        return found[0]
