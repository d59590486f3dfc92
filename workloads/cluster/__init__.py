"""Cluster domain: DL training jobs queued, packed and placed on a heterogeneous GPU cluster.

Modules (``view`` is the contract: the read-only views and decision types this
domain's policies in ``hetsim.schedulers.cluster`` receive and return):

- ``contention``: Node contention between groups sharing a node: CPU cores, storage and NIC
  bandwidth.
- ``data``: Readers for the cluster domain's data: inventories, job traces, speed and stage
  tables.
- ``estimates``: The mechanism's estimates for the cluster policies, and the views built from
  them.
- ``jobs``: The job table of a cluster run: sources, per-GPU-type speeds and deadlines.
- ``metrics``: Summary metrics and tables of the cluster workload, each with its definition.
- ``model``: Physical model of the cluster domain: interleaved iteration time, the GPU pool (its
- ``params``: The ``workload:`` block of a ``cluster`` scenario (DL jobs on a heterogeneous GPU
  cluster).
- ``scheduling_pass``: One scheduling pass of the cluster workload: order, pack, allocate,
  apply.
- ``sources``: Job sources drawn from the public Philly and Helios derivatives (not per-job
  replays).
- ``view``: Read-only snapshots the cluster mechanism hands to its three policies, and their
  decisions.
- ``workload``: DL training jobs on a heterogeneous GPU cluster: queueing, packing and
  placement.
"""
