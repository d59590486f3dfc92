"""Queueing domain: requests with FLOP/byte demands dispatched to a pool of devices.

Modules (``view`` is the contract: the read-only views and decision types this
domain's policies in ``hetsim.schedulers.queueing`` receive and return):

- ``demand``: Arrivals and service demands of the generic queueing workload, sampled up front.
- ``servers``: Servers of the generic queueing workload: FCFS and processor sharing.
- ``view``: Read-only snapshots the queueing dispatcher hands to its policy (immutable tuples).
- ``workload``: A generic queueing workload: requests with FLOP/byte demands served by a device
  pool.
"""
