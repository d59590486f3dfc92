"""Elastic domain: online training fed by a time-varying sample stream, rescaled over time.

Modules (``view`` is the contract: the read-only views and decision types this
domain's policies in ``hetsim.schedulers.elastic`` receive and return):

- ``metrics``: Summary metrics and result tables of the elastic workload (computed once,
  vectorised).
- ``model``: Fluid model and cost model of the elastic online-training workload (pure
  functions).
- ``params``: The ``workload:`` block of an elastic online-training scenario (pydantic models).
- ``traffic``: Sample streams of the elastic workload: a mean arrival rate per control step.
- ``view``: Read-only snapshots the elastic mechanism hands to its three decision points.
- ``workload``: Elastic online training: a live sample stream, a rescalable job, lag and
  freshness.
"""
