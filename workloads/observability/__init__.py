"""Observability domain: data-parallel training with stragglers, faults and checkpoints.

Modules (``view`` is the contract: the read-only views and decision types this
domain's policies in ``hetsim.schedulers.observability`` receive and return):

- ``faults``: Fault model of the observability domain: fail-stop and fail-slow faults with
  ground truth.
- ``job``: A long training job under fail-stop and fail-slow faults: checkpoints, recovery,
  ETTR.
- ``scoring``: Scoring a detector against the injected ground truth.
- ``tables``: Output tables and timeline of the straggler-detection workload, and its injection
  spec.
- ``telemetry``: Per-rank, per-operator timings of a data-parallel training job, a window at a
  time.
- ``timeline``: The job-level timeline of ``observability-faults``: one SimPy process, event to
  event.
- ``view``: Read-only views the observability mechanisms hand to their policies, and the
  decisions.
- ``workload``: Straggler detection on a data-parallel training job with per-rank telemetry.
"""
