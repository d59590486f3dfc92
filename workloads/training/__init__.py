"""Training domain: a transformer iteration as operators with tensor lifetimes; pipelines.

Modules (``view`` is the contract: the read-only views and decision types this
domain's policies in ``hetsim.schedulers.training`` receive and return):

- ``exec``: Execution of one training iteration on one accelerator: a compute stream, two copy
  streams.
- ``metrics``: Summary metrics, the fit check and model sizing of the ``training`` workload.
- ``model``: Transformer model spec for the training domain: parameter count, model states,
  activations.
- ``offload``: Optimizer offload (ZeRO-Offload) for the ``training`` workload: placement and the
  step tail.
- ``ops``: One training iteration as an operator sequence with tensors and their lifetimes.
- ``pipeline``: Long-context pipeline parallelism (decision ``training.schedule``): one training
  iteration.
- ``pipeline_sim``: Pipeline schedule execution as list scheduling: per-device unit orders plus
  dependencies.
- ``view``: Read-only views and typed decisions of the training domain's decision points.
- ``workload``: Training memory on one accelerator: swap, recompute, or neither (decision
  ``training.swap``).
"""
