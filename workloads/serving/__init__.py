"""Serving domain: LLM requests with continuous batching, paged KV, prefill/decode
disaggregation.

Modules (``view`` is the contract: the read-only views and decision types this
domain's policies in ``hetsim.schedulers.serving`` receive and return):

- ``autoscale``: Autoscaling of a serving deployment: provision units (warm-up), drain and
  release them.
- ``cost``: Roofline cost of one continuous-batching iteration of a dense LLM on a TP group.
- ``deploy``: What the deployment policy sees (configs with goodput estimates), GPU price
- ``estimate``: Goodput estimates of one instance for deployment sizing: the largest Poisson
  rate
- ``instance``: One model instance: continuous batching over a paged KV cache, one SimPy event
  per
- ``metrics``: Summary metrics of the serving workload, each with its written definition.
- ``models``: Mixture-of-experts models for the serving workload (Mixtral-8x7B).
- ``params``: The ``workload:`` block of a serving scenario (pydantic models).
- ``prefix``: Automatic prefix caching of one instance's KV blocks (opt-in:
  ``workload.prefix_cache``).
- ``report``: Cost, capacity and per-instance figures of a finished serving run.
- ``requests``: LLM requests for the serving workload: arrivals, prompt and output lengths,
  traces.
- ``subsim``: Goodput of a candidate deployment unit measured by simulation (mechanism side).
- ``traces``: Request trace files for the serving workload: readers and their documented
  columns.
- ``view``: Read-only snapshots the serving mechanism hands to its policies, and their
  decisions.
- ``workload``: LLM serving on heterogeneous GPUs: colocated or prefill/decode-disaggregated
"""
