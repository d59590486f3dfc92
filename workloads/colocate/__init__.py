"""Colocation domain: several workloads on one cluster (``workloads:``).

- ``sharing``: partition and time-sliced sharing (memory shares, slowed work).
- ``cluster_view``: the cluster as one workload sees it (its devices; shared links and memory).
- ``sim_view``: the simulation as one workload sees it (its own streams and table names).
- ``ledger``: who owns each GPU over time; the exclusive-owner invariant.
- ``estimators``: serving-load estimators an arbiter sees (past arrivals only).
- ``view``: the arbiter's read-only view and decision.
- ``arbitration``: the mechanism carrying out an arbiter's decisions (lend, reclaim).
- ``report``: per-workload rows and the cluster row (utilisation, idle GPU-hours).
"""
