"""The cluster as one workload of a multi-workload run sees it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hetsim.devices.cluster import Cluster

ACCELERATORS = ("gpu", "npu")


class ClusterView(Cluster):
    """One workload's window on the shared :class:`~devices.cluster.Cluster`.

    A :class:`Cluster` whose device index holds only the accelerators the workload holds
    now (CPUs and switches stay visible to all: hosts are shared), so every listing and
    look-up (``device_names``, ``usable``, ``accelerator``, ``device``) sees only those;
    the memory pools, links, copies and collective groups are the shared cluster's
    objects, so every workload's allocations and transfers are accounted (and contend)
    together. ``whole`` is the shared cluster; :meth:`admit` and :meth:`drop` follow the
    arbiter's grants. On a shared device (a sharing model other than exclusive),
    :meth:`memory` is this workload's share of the pool (``pools``)."""

    def __init__(
        self, cluster: Cluster, devices: Iterable[str], pools: dict[str, Any] | None = None
    ) -> None:  # no Cluster.__init__: the shared cluster's state, an own device index
        self.__dict__.update(cluster.__dict__)
        self.whole = cluster
        own = set(devices)
        self._devices = {
            n: d for n, d in cluster._devices.items()
            if n in own or d.spec.kind not in ACCELERATORS
        }  # fmt: skip
        self._by_kind = {
            k: [n for n in names if n in self._devices] for k, names in cluster._by_kind.items()
        }
        #: this workload's share of the memory of each device it shares (sharing.PoolShare)
        self.pools = dict(pools or {})

    def admit(self, name: str) -> None:
        """``name`` joins the devices this workload sees (a GPU lent to it)."""
        keep = set(self._devices) | {name}
        self._devices = {n: d for n, d in self.whole._devices.items() if n in keep}
        kind = self.whole.device(name).spec.kind
        self._by_kind[kind] = [n for n in self.whole._by_kind[kind] if n in keep]

    def drop(self, name: str) -> None:
        """``name`` leaves the devices this workload sees (a lent GPU returned)."""
        dev = self._devices.pop(name)
        self._by_kind[dev.spec.kind].remove(name)

    def memory(self, name: str) -> Any:
        """The memory pool of ``name``: this workload's share where the device is shared."""
        share = self.pools.get(name)
        return share if share is not None else super().memory(name)
